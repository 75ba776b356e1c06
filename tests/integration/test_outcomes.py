"""Outcomes (issue 42, item 4), through the consumer's and the admin API's handlers (moto over
HTTP, the local whasp and OpenAI): a conversation is a person's day; it is counted once,
resolved by the agent unless a human took it or the person came back within 24 hours;
GET /outcomes sums the days; an erasure removes the person's conversations, and the day's
counts, which hold no one, stay."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devstack.apigw import http_api_event
from devstack.lambda_harness import reported_failures as failures
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch
from tests.integration.test_consumer import message
from tests.integration.test_operator import OPERATOR_ARN, person

SAM = "+447700900456"
DAY = 24 * 60  # minutes


@pytest.fixture
def admin(resources, whasp, monkeypatch) -> Any:
    env = {
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "PROVIDER": "whasp",
        "WHASP_API_URL": whasp.url,
        "WHASP_API_KEY": "whasp-test-key",
        "LEDGER_TTL_DAYS": "3650",
    }
    return load_function("admin", env, monkeypatch)


def ask(admin, lambda_context, method: str, path: str, query: str = "") -> tuple[int, Any]:
    event = http_api_event(
        method=method, path=path, headers={}, body=b"", query=query, caller=OPERATOR_ARN
    )
    response = admin.handler(event, lambda_context)
    return response["statusCode"], json.loads(response["body"] or "null")


def write(consumer, lambda_context, text: str, minute: float, chat: str = MAYA) -> None:
    assert (
        failures(consumer.handler(sqs_batch(message(text, minute, chat=chat)), lambda_context))
        == []
    )


def conversations(resources, who: str) -> list[dict[str, Any]]:
    from memagent.memory import person_key

    table = dynamodb_table(resources.table_name)
    items = table.query(
        KeyConditionExpression="pk = :pk AND begins_with(sk, :c)",
        ExpressionAttributeValues={":pk": person_key(AGENT, who), ":c": "CONV#"},
        ConsistentRead=True,
    )["Items"]
    return items


def test_a_week_of_conversations_is_counted_once_each_and_summed_by_get_outcomes(
    consumer, admin, openai, whasp, resources, lambda_context
):
    # given Maya writes twice on 29 November, comes back the next night (within 24 hours of her
    # last message), and writes again on 2 December
    write(consumer, lambda_context, "Morning! Ran 5 km.", 0)
    write(consumer, lambda_context, "And stretched after.", 5)
    write(consumer, lambda_context, "Knee hurts a bit now.", DAY - 8 * 60)  # 01:00 on the 30th
    write(consumer, lambda_context, "Better today, thanks.", 3 * DAY)
    # and Sam asks for a human on the 29th, and writes on while the human has the chat
    write(consumer, lambda_context, "talk to a human", 10, chat=SAM)
    write(consumer, lambda_context, "hello?", 12, chat=SAM)
    # when an operator asks for the figures of that week
    status, week = ask(admin, lambda_context, "GET", "/outcomes", "from=2026-11-29&to=2026-12-05")
    # then four conversations were opened (one a day a person), one of them a return within
    # 24 hours and one handed to a human: two resolved by the agent
    assert status == 200
    assert (week["conversations"], week["returned"], week["handed_off"]) == (4, 1, 1)
    assert (week["resolved"], week["containment"], week["handoff_rate"]) == (2, 0.5, 0.25)
    # and the model's tokens are there to price a conversation; no CSAT was asked for
    assert week["tokens"] > 0 and week["tokens_per_conversation"] == week["tokens"] / 4
    assert week["csat"] == {"answers": 0, "average": None}
    # and the days hold counts only, per day
    by_day = {d["day"]: d for d in week["days"]}
    assert sorted(by_day) == ["2026-11-29", "2026-11-30", "2026-12-02"]
    assert (by_day["2026-11-29"]["conversations"], by_day["2026-11-29"]["handed_off"]) == (2, 1)
    assert by_day["2026-11-30"]["returned"] == 1
    # and a redelivered message opens nothing twice
    repeat = message("Better today, thanks.", 3 * DAY)
    again = sqs_batch(repeat, repeat)
    assert failures(consumer.handler(again, lambda_context)) == []
    assert (
        ask(admin, lambda_context, "GET", "/outcomes", "from=2026-11-29&to=2026-12-05")[1][
            "conversations"
        ]
        == 4
    )


def test_get_outcomes_refuses_a_bad_range_with_a_400(admin, lambda_context):
    for query in (
        "from=yesterday",
        "from=2026-12-05&to=2026-12-01",
        "from=2024-01-01&to=2026-01-01",
    ):
        status, body = ask(admin, lambda_context, "GET", "/outcomes", query)
        assert status == 400, (query, body)
    # and with no range, the last 7 days up to today (nothing yet)
    status, body = ask(admin, lambda_context, "GET", "/outcomes")
    assert status == 200 and body["conversations"] == 0 and body["containment"] is None


def test_an_erasure_removes_the_persons_conversations_and_keeps_the_days_counts(
    consumer, admin, openai, whasp, resources, lambda_context
):
    # given Maya's two conversations
    write(consumer, lambda_context, "Morning! Ran 5 km.", 0)
    write(consumer, lambda_context, "Rest day today.", 2 * DAY)
    assert len(conversations(resources, MAYA)) == 2
    # when an admin erases her
    assert ask(admin, lambda_context, "DELETE", person())[0] == 200
    # then nothing of her conversations is left; the figures, which name nobody, stay
    assert conversations(resources, MAYA) == []
    week = ask(admin, lambda_context, "GET", "/outcomes", "from=2026-11-29&to=2026-12-05")[1]
    assert week["conversations"] == 2


def test_an_operator_taking_the_chat_over_counts_the_conversation_as_handed_off_once(
    consumer, admin, openai, whasp, resources, lambda_context
):
    # given Maya wrote on 29 November
    write(consumer, lambda_context, "Ran 5 km.", 0)
    # when an operator takes her chat over, twice (a retried request)
    for _ in range(2):
        assert ask(admin, lambda_context, "POST", f"{person()}/handoff")[0] == 200
    # then her conversation that day is counted as handed off, once
    week = ask(admin, lambda_context, "GET", "/outcomes", "from=2026-11-29&to=2026-11-29")[1]
    assert (week["conversations"], week["handed_off"], week["resolved"]) == (1, 1, 0)
    assert conversations(resources, MAYA)[0]["handed_off"] is True
