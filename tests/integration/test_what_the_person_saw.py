"""Memory holds what the person saw and said, on the times they said it: a reply that never
reached them is not remembered as said, and an erasing STOP erases only what came before it."""

from __future__ import annotations

from datetime import UTC, datetime

from boto3.dynamodb.conditions import Key

from devstack.fake_openai import turns_of
from devstack.lambda_harness import reported_failures as failures
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch, whasp_message


def turns(table_name: str, phone: str = MAYA) -> list[tuple[str, str]]:
    table = dynamodb_table(table_name)
    items = table.query(
        KeyConditionExpression=Key("pk").eq(person_key(AGENT, phone))
        & Key("sk").begins_with("MSG#"),
        ConsistentRead=True,
    )["Items"]
    return [(i["role"], i["text"]) for i in sorted(items, key=lambda i: int(i["seq"]))]


# ------------------------------------------------------------------ undelivered replies


def test_a_reply_refused_for_an_opt_out_is_not_remembered_as_said(
    consumer, resources, openai, whasp, lambda_context
):
    # given Maya opted out at whasp (whasp answers 409 opted_out)
    whasp.opted_out.add(MAYA)
    consumer.handler(
        sqs_batch(whasp_message("hello?", created_at="2026-11-29T09:00:00Z")), lambda_context
    )
    # then nothing was sent, and memory holds her message only, not the reply she never saw
    assert whasp.sent == []
    assert turns(resources.table_name) == [("user", "hello?")]
    # when she writes again (which lifts the opt-out), the model sees no phantom reply
    whasp.opted_out.discard(MAYA)
    now = datetime.now(UTC).isoformat().replace("+00:00", "Z")  # after the recorded opt-out
    consumer.handler(sqs_batch(whasp_message("back now", created_at=now)), lambda_context)
    assert [role for role, _ in turns_of(openai.calls()[-1])] == ["user", "user"]
    assert len(whasp.texts_to(MAYA)) == 1


def test_a_parked_reply_is_not_remembered_as_said(consumer, resources, whasp, lambda_context):
    # given whasp refuses the reply for good
    whasp.reject_next(1, status=400)
    response = consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T09:00:00Z")), lambda_context
    )
    # then it is parked (not retried) and not in memory as if it had been said
    assert failures(response) == []
    assert turns(resources.table_name) == [("user", "hi")]


# ------------------------------------------------------------------ opt-out with erase


def test_erase_on_stop_keeps_what_was_written_after_the_stop(
    consumer_env, resources, whasp, lambda_context, monkeypatch
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    # given Maya told the agent something earlier
    consumer.handler(
        sqs_batch(whasp_message("I have a dog called Biscuit", created_at="2026-11-29T09:50:00Z")),
        lambda_context,
    )
    # when STOP (at t) and "sorry, I did not mean that" (at t + 30 s) are both queued before
    # either is processed
    stop = whasp_message("STOP", created_at="2026-11-29T10:00:00Z")
    sorry = whasp_message("sorry, I did not mean that", created_at="2026-11-29T10:00:30Z")
    response = consumer.handler(sqs_batch(stop, sorry), lambda_context)
    # then the memory from before the STOP is erased, the later message is stored and answered
    assert failures(response) == []
    said = turns(resources.table_name)
    assert [text for role, text in said if role == "user"] == ["sorry, I did not mean that"]
    assert len(whasp.texts_to(MAYA)) == 2  # the first message's reply, then the apology's
    # and a late redelivery of the STOP changes nothing
    consumer.handler({"Records": sqs_batch(stop)["Records"]}, lambda_context)
    assert turns(resources.table_name) == said
