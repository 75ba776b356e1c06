"""The console's recent conversations (OperatorConsole=true): each message marks its person in
the sparse RecentIndex, in the state write the turn makes anyway; GET /conversations lists the
newest first, with the address to open each; an erasure takes the person off the list; a stack
without the console writes no such keys and answers 404. Through the consumer and admin handlers
over moto's DynamoDB (its table has every index the template can give it)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devstack.apigw import http_api_event
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch, whasp_message
from tests.integration import test_operator
from tests.integration.test_operator import OPERATOR_ARN, SAM, call, person

ANA = "+447700900789"


@pytest.fixture
def marking(consumer_env, monkeypatch) -> Any:
    """The consumer of a stack with OperatorConsole=true."""
    return load_function("consumer", {**consumer_env, "RECENT_CONVERSATIONS": "true"}, monkeypatch)


admin_env = test_operator.admin_env  # a fixture


@pytest.fixture
def admin(admin_env, monkeypatch) -> Any:
    """The admin function of a stack with OperatorConsole=true."""
    return load_function("admin", {**admin_env, "RECENT_CONVERSATIONS": "true"}, monkeypatch)


def write(consumer, lambda_context, phone: str, text: str, at: datetime) -> None:
    stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event = whasp_message(text, chat=phone, created_at=stamp, event_id=f"evt_{uuid.uuid4().hex}")
    event["data"]["message"]["timestamp"] = stamp
    assert consumer.handler(sqs_batch(event), lambda_context)["batchItemFailures"] == []


def state(table: str, phone: str) -> dict[str, Any]:
    key = {"pk": person_key(AGENT, phone), "sk": "STATE"}
    return dynamodb_table(table).get_item(Key=key)["Item"]


def test_the_newest_writers_come_first_each_with_where_to_open_them(
    marking, admin, resources, lambda_context
):
    now = datetime.now(UTC).replace(minute=30)
    # given three people who wrote in three different hours
    for phone, hours_ago in ((SAM, 5), (MAYA, 1), (ANA, 3)):
        write(
            marking,
            lambda_context,
            phone,
            f"Hello from {phone[-3:]}",
            now - timedelta(hours=hours_ago),
        )
    # when an operator lists the recent conversations
    status, body = call(admin, lambda_context, "GET", "/conversations")
    # then the newest writer comes first, and each opens by their address
    assert status == 200
    listed = [(c["address"], c["hour"]) for c in body["conversations"]]
    hour = lambda h: (now - timedelta(hours=h)).strftime("%Y-%m-%dT%H")  # noqa: E731
    assert listed == [(MAYA, hour(1)), (ANA, hour(3)), (SAM, hour(5))]
    assert body["conversations"][0]["person"] == person_key(AGENT, MAYA)
    assert call(admin, lambda_context, "GET", person(ANA) + "/conversation")[0] == 200
    # and when Sam writes again, he is first
    write(marking, lambda_context, SAM, "Me again", now)
    first = call(admin, lambda_context, "GET", "/conversations")[1]["conversations"][0]
    assert (first["address"], first["hour"]) == (SAM, hour(0))


def test_within_an_hour_the_index_keys_stay_as_they_were(marking, resources, lambda_context):
    # the index is written only when its keys or projected attribute change: once an hour
    start = datetime.now(UTC).replace(minute=1)
    write(marking, lambda_context, MAYA, "one", start)
    before = state(resources.table_name, MAYA)
    write(marking, lambda_context, MAYA, "two", start + timedelta(minutes=40))
    after = state(resources.table_name, MAYA)
    keys = ("recent_shard", "recent_at", "recent_address")
    assert [after[k] for k in keys] == [before[k] for k in keys]
    assert after["recent_shard"].startswith(f"{AGENT}#") and after["recent_address"] == MAYA
    assert after["last_seq"] > before["last_seq"]


def test_an_erased_person_leaves_the_list(marking, admin, resources, lambda_context):
    now = datetime.now(UTC)
    for phone in (MAYA, SAM):
        write(marking, lambda_context, phone, "Hi", now)
    assert call(admin, lambda_context, "DELETE", person(MAYA))[0] == 200
    listed = [
        c["address"]
        for c in call(admin, lambda_context, "GET", "/conversations")[1]["conversations"]
    ]
    assert listed == [SAM]
    assert "recent_address" not in state(resources.table_name, MAYA)


def test_without_the_console_no_keys_are_written_and_the_route_says_so(
    consumer, resources, whasp, bus, lambda_context, monkeypatch
):
    write(consumer, lambda_context, MAYA, "Hi", datetime.now(UTC))
    assert not {"recent_shard", "recent_at", "recent_address"} & set(
        state(resources.table_name, MAYA)
    )
    plain = load_function(
        "admin",
        {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT, "OPERATOR_EVENT_BUS": bus["name"]},
        monkeypatch,
    )
    event = http_api_event(
        method="GET", path="/conversations", headers={}, body=b"", caller=OPERATOR_ARN
    )
    response = plain.handler(event, lambda_context)
    assert response["statusCode"] == 404
    assert "OperatorConsole" in json.loads(response["body"])["error"]
