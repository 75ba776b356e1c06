"""Facts that change, through the handlers: the consumer stores and answers, the stream fires
the compactor, and the offline model folds as a good model would (it names outdated facts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from devstack.events import sqs_batch
from devstack.fake_openai import notes_of
from devstack.lambda_harness import retried
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, whasp_message

FOLD_EARLY = {"COMPACT_THRESHOLD": "4", "COMPACT_KEEP": "2"}  # a fold every two messages


@pytest.fixture
def functions(consumer_env, compactor_env, monkeypatch) -> tuple[Any, Any]:
    consumer = load_function("consumer", {**consumer_env, **FOLD_EARLY}, monkeypatch)
    compactor = load_function("compactor", {**compactor_env, **FOLD_EARLY}, monkeypatch)
    return consumer, compactor


def say(functions, tap, lambda_context, *texts: str) -> list[str]:
    """The person writes each text (the consumer answers), then the stream runs the compactor
    on the flagged records; returns the ids Lambda would retry."""
    consumer, compactor = functions
    for text in texts:
        assert retried(consumer.handler, sqs_batch(whasp_message(text)), lambda_context) == []
    return retried(compactor.handler, {"Records": tap.matching()}, lambda_context)


def facts(table_name: str) -> list[str]:
    table = dynamodb_table(table_name)
    condition = Key("pk").eq(person_key(AGENT, MAYA)) & Key("sk").begins_with("FACT#")
    items = table.query(KeyConditionExpression=condition, ConsistentRead=True)["Items"]
    return sorted(item["text"] for item in items)


def transactions(compactor) -> list[list[dict[str, Any]]]:
    """Every TransactWriteItems the compactor sends from now on, as its actions."""
    seen: list[list[dict[str, Any]]] = []
    client = compactor.compactor.store._client
    client.meta.events.register(
        "before-parameter-build.dynamodb.TransactWriteItems",
        lambda params, **_: seen.append(params["TransactItems"]),
    )
    return seen


def _sk(body: dict[str, Any]) -> str:
    sk = (body.get("Key") or body.get("Item") or {}).get("sk", "")
    return sk.get("S", "") if isinstance(sk, dict) else sk


def test_a_move_retires_the_old_city_in_the_same_commit(
    functions, tap, resources, openai, lambda_context
):
    # given Maya said where she lives, and a fold kept it
    assert say(functions, tap, lambda_context, "I live in Leeds", "it rains a lot") == []
    assert facts(resources.table_name) == ["Lives in Leeds"]
    commits = transactions(functions[1])
    # when she says she moved, and the next fold runs
    assert say(functions, tap, lambda_context, "We moved to London last month", "so busy") == []
    # then London replaced Leeds, in the transaction that moved the marker
    assert facts(resources.table_name) == ["Lives in London"]
    [commit] = [c for c in commits if any("Update" in a for a in c)]
    kinds = {(kind, _sk(body)[:5]) for action in commit for kind, body in action.items()}
    assert {("Update", "STATE"), ("Put", "FACT#"), ("Delete", "FACT#")} <= kinds
    # and the next turn's context holds London, not Leeds
    say(functions, tap, lambda_context, "how are you?")
    reply = [call for call in openai.calls() if "text" not in call][-1]
    assert "Lives in London" in notes_of(reply) and "Lives in Leeds" not in notes_of(reply)


def test_a_crash_between_the_model_and_the_commit_changes_nothing(
    functions, tap, resources, openai, lambda_context
):
    # given Leeds is known, and Maya says she moved
    say(functions, tap, lambda_context, "I live in Leeds", "it rains a lot")
    consumer, compactor = functions
    for text in ("We moved to London last month", "so busy"):
        consumer.handler(sqs_batch(whasp_message(text)), lambda_context)
    records = tap.matching()

    # when the compactor crashes after the model answered, before its commit lands
    def crash(**_: Any) -> None:
        raise ClientError({"Error": {"Code": "InternalServerError"}}, "TransactWriteItems")

    events = compactor.compactor.store._client.meta.events
    events.register("before-call.dynamodb.TransactWriteItems", crash, unique_id="crash")
    assert retried(compactor.handler, {"Records": records}, lambda_context) != []
    # then nothing changed: Leeds stands, London is not there, nothing was folded
    assert facts(resources.table_name) == ["Lives in Leeds"]
    events.unregister("before-call.dynamodb.TransactWriteItems", unique_id="crash")
    # and the retry folds it as if the crash had never happened
    assert retried(compactor.handler, {"Records": records}, lambda_context) == []
    assert facts(resources.table_name) == ["Lives in London"]


def test_a_denial_takes_a_fact_back(functions, tap, resources, lambda_context):
    # given a fold kept a dog that was never Maya's
    say(functions, tap, lambda_context, "I have a dog called Biscuit", "he is lovely")
    assert facts(resources.table_name) == ["Has a dog called Biscuit"]
    # when she corrects it
    say(functions, tap, lambda_context, "I don't have a dog, that was my sister's", "anyway")
    # then the fact is gone
    assert facts(resources.table_name) == []


def test_a_repeated_fact_is_stored_once_and_the_cap_drops_the_least_recently_confirmed(
    consumer_env, compactor_env, monkeypatch, tap, resources, lambda_context
):
    # given a cap of two facts, and two facts learned in the same fold
    env = {**FOLD_EARLY, "MAX_FACTS": "2"}
    functions = (
        load_function("consumer", {**consumer_env, **env}, monkeypatch),
        load_function("compactor", {**compactor_env, **env}, monkeypatch),
    )
    say(functions, tap, lambda_context, "My name is Maya. I work as a nurse", "ok")
    assert facts(resources.table_name) == ["Name is Maya", "Works as a nurse"]
    # when she says her name again and a third fact comes
    say(functions, tap, lambda_context, "My name is Maya, remember. I live in Leeds", "ok")
    # then the name is stored once, and the nurse fact, confirmed longest ago, made room
    assert facts(resources.table_name) == ["Lives in Leeds", "Name is Maya"]


def test_the_reply_knows_the_persons_date_and_the_fold_keeps_plans_on_absolute_dates(
    functions, tap, resources, openai, lambda_context
):
    london = ZoneInfo("Europe/London")
    now = datetime.now(UTC)
    yesterday = now - timedelta(days=1)

    def day(at: datetime) -> str:
        local = at.astimezone(london)
        return f"{local:%a} {local.day} {local:%b %Y}"

    def replies() -> list[dict[str, Any]]:
        return [call for call in openai.calls() if "text" not in call]

    # given Maya (a UK number) wrote yesterday about "tomorrow", and the agent answers today
    consumer, compactor = functions
    for text in ("my interview is tomorrow", "wish me luck"):
        message = whasp_message(text, created_at=yesterday.isoformat())
        assert retried(consumer.handler, sqs_batch(message), lambda_context) == []
    # then the reply request is told today's date where she is
    assert f"It is {day(now)}, " in notes_of(replies()[-1])
    assert "(Europe/London) for the person." in notes_of(replies()[-1])
    # and her messages from yesterday come after yesterday's date
    assert {"role": "developer", "content": f"(Messages from {day(yesterday)})"} in replies()[-1][
        "input"
    ]
    # when the stream folds them
    assert retried(compactor.handler, {"Records": tap.matching()}, lambda_context) == []
    fold = [call for call in openai.calls() if "text" in call][-1]
    # then the fold was asked for absolute dates, and kept the plan on today's date
    assert "Write every date as an absolute date" in fold["instructions"]
    assert facts(resources.table_name) == [f"Interview on {day(now)}"]
