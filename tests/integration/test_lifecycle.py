"""A person's lifecycle: forget, export, the admin API, chat keywords, the opt-out policy and a
replaced business number. Through the handlers, against moto's DynamoDB over HTTP."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from devstack.apigw import http_api_event
from devstack.fake_openai import notes_of, turns_of
from devstack.lambda_harness import reported_failures as failures
from memagent.lifecycle.rights import forget
from memagent.memory.person import person_key
from memagent.store.erasure import BUDGET_COUNTERS
from memagent.store.memory_store import MemoryStore, ledger_sk
from tests.conftest import (
    AGENT,
    BUSINESS,
    MAYA,
    dynamodb_table,
    load_function,
    sqs_batch,
    sqs_record,
    whasp_message,
)
from tests.integration.faults import crash_before

SAM = "+447700900456"
NEW_NUMBER = "+14155550199"


def scan(table_name: str) -> list[dict[str, Any]]:
    table = dynamodb_table(table_name)
    items, kwargs = [], {}
    while True:
        page = table.scan(ConsistentRead=True, **kwargs)
        items.extend(page["Items"])
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def only_the_mark(state: dict[str, Any]) -> bool:
    """An erased person's state item: the erasure mark, and the day's budget counters (counts,
    no content: memagent.store.erasure)."""
    return set(state) - set(BUDGET_COUNTERS) == {"pk", "sk", "erased_at"}


def fill(table_name: str, phone: str, *, messages: int, facts: int, ledger: int) -> None:
    """A long-lived person, written in bulk: raw messages, a summary, facts, ledger entries."""
    pk = person_key(AGENT, phone)
    table = dynamodb_table(table_name)
    start = datetime(2026, 6, 1, tzinfo=UTC)
    with table.batch_writer() as batch:
        for seq in range(1, messages + 1):
            batch.put_item(
                Item={
                    "pk": pk,
                    "sk": f"MSG#{seq:012d}",
                    "seq": seq,
                    "role": "user" if seq % 2 else "assistant",
                    "text": f"private text {seq}",
                    "at": (start + timedelta(minutes=seq)).isoformat(),
                    "number": BUSINESS,
                }
            )
        for n in range(facts):
            batch.put_item(
                Item={
                    "pk": pk,
                    "sk": f"FACT#{n:016x}",
                    "text": f"Fact {n}",
                    "at": start.isoformat(),
                }
            )
        for n in range(ledger):
            batch.put_item(
                Item={
                    "pk": pk,
                    "sk": ledger_sk(f"evt_{phone}_{n}"),
                    "event_id": f"evt_{phone}_{n}",
                    "status": "sent",
                    "created_at": (start + timedelta(minutes=n)).isoformat(),
                }
            )
        batch.put_item(
            Item={
                "pk": pk,
                "sk": "STATE",
                "last_seq": messages,
                "marker": 0,
                "summary": "Maya told me about her new job.",
                "last_number": BUSINESS,
                "last_inbound_at": start.isoformat(),
                "compaction_due": False,
            }
        )


def mine(items: list[dict], phone: str) -> list[dict]:
    return [i for i in items if i["pk"] == person_key(AGENT, phone)]


# ------------------------------------------------------------------ forget


def test_forget_leaves_only_the_content_free_erasure_mark(resources):
    fill(resources.table_name, MAYA, messages=500, facts=50, ledger=250)
    fill(resources.table_name, SAM, messages=30, facts=5, ledger=15)
    # and Maya's summary in its own item, and her BSUID, which reaches her memory (a link)
    table = dynamodb_table(resources.table_name)
    pk, bsuid = person_key(AGENT, MAYA), person_key(AGENT, "GB.11122233344455566677")
    written = datetime(2026, 6, 2, tzinfo=UTC).isoformat()
    table.put_item(Item={"pk": pk, "sk": "SUMMARY", "text": "Maya is a nurse.", "at": written})
    table.put_item(Item={"pk": pk, "sk": f"ALIAS#{bsuid}"})
    table.put_item(Item={"pk": bsuid, "sk": "STATE", "alias_of": pk})
    store = MemoryStore(resources.table_name)
    before_sam = mine(scan(resources.table_name), SAM)

    receipt = forget(store, AGENT, MAYA)

    # the receipt counts each kind of what was removed
    assert receipt.by_kind == {
        "messages": 500,
        "facts": 50,
        "ledger": 250,
        "summary": 1,
        "links": 1,
        "state": 1,
        "identifiers": 1,
    }
    everything = scan(resources.table_name)
    [mark] = mine(everything, MAYA)
    assert only_the_mark(mark)
    assert MAYA not in json.dumps(everything, default=str)
    # other people are untouched
    assert mine(everything, SAM) == before_sam
    # a second run succeeds and removes nothing more
    again = forget(store, AGENT, MAYA)
    assert again.removed == 0
    [mark_again] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark_again)


def test_after_forget_an_old_redelivery_is_ignored_and_a_new_message_starts_fresh(
    consumer, resources, whasp, openai, lambda_context
):
    old = whasp_message("I live at 1 Private Road", created_at="2026-11-29T09:00:00Z")
    consumer.handler(sqs_batch(old), lambda_context)
    assert len(whasp.sent) == 1
    store = consumer.consumer.agent.store
    forget(store, AGENT, MAYA)  # erased now, after the message was sent

    # when the old event is delivered again (a late whasp retry)
    response = consumer.handler({"Records": [sqs_record(old, receive_count=2)]}, lambda_context)
    # then it is neither stored nor answered
    assert failures(response) == []
    assert len(whasp.sent) == 1
    assert len(mine(scan(resources.table_name), MAYA)) == 1  # still only the mark

    # when Maya writes again, afterwards
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    consumer.handler(sqs_batch(whasp_message("Hello again", created_at=later)), lambda_context)
    # then a fresh memory starts and she is answered, without the old message in context
    assert len(whasp.sent) == 2
    assert [text for _, text in turns_of(openai.calls()[-1])] == ["Hello again"]


# ------------------------------------------------------------------ the admin API


def admin_event(method: str, phone: str) -> dict[str, Any]:
    """An operator's export (GET) or erasure (DELETE), signed (AWS_IAM), as API Gateway hands it
    to the admin function."""
    return http_api_event(
        method=method,
        path=f"/people/{quote(phone, safe='')}",
        route_key=f"{method} /people/{{id}}",
        path_parameters={"id": phone},
        headers={"authorization": "AWS4-HMAC-SHA256 Credential=...", "user-agent": "aws-cli"},
        body=b"",
        caller="arn:aws:iam::123456789012:user/operator",
    )


@pytest.fixture
def admin(resources, monkeypatch) -> Any:
    return load_function(
        "admin", {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT}, monkeypatch
    )


def test_admin_export_holds_every_layer(admin, resources, lambda_context):
    fill(resources.table_name, MAYA, messages=6, facts=2, ledger=3)
    response = admin.handler(admin_event("GET", MAYA), lambda_context)
    assert response["statusCode"] == 200
    body = json.loads(response["body"])
    assert body["phone"] == MAYA
    assert body["summary"]["text"] == "Maya told me about her new job."
    assert [m["seq"] for m in body["messages"]] == list(range(1, 7))
    assert all(m["at"] and m["text"] for m in body["messages"])
    assert sorted(f["text"] for f in body["facts"]) == ["Fact 0", "Fact 1"]
    assert len(body["processed_events"]) == 3
    assert body["state"]["last_seq"] == 6


@pytest.mark.parametrize("summary_kept", ["on the state", "as its own item", "none"])
def test_an_export_is_exactly_what_is_held_field_by_field(
    admin, resources, lambda_context, summary_kept
):
    """Art. 15: every message with its number and time, every fact, every processed event,
    the state (but the summary, which is its own section), and the summary with what it
    covers, as plain JSON; nothing more, nothing renamed."""
    start = datetime(2026, 6, 1, tzinfo=UTC)
    fill(resources.table_name, MAYA, messages=3, facts=1, ledger=1)
    table = dynamodb_table(resources.table_name)
    pk = person_key(AGENT, MAYA)
    # an older version kept the summary on the state, with when it was written
    summary_at = (start + timedelta(hours=1)).isoformat()
    table.update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET summary_at = :t",
        ExpressionAttributeValues={":t": summary_at},
    )
    summary: dict[str, Any] | None = {
        "text": "Maya told me about her new job.",
        "covers_up_to_message": 0,
        "updated_at": summary_at,
    }
    if summary_kept == "as its own item":  # where the compactor keeps it now
        at = (start + timedelta(days=1)).isoformat()
        table.put_item(Item={"pk": pk, "sk": "SUMMARY", "text": "Maya is a nurse.", "at": at})
        table.update_item(
            Key={"pk": pk, "sk": "STATE"},
            UpdateExpression="SET marker = :m REMOVE summary, summary_at",
            ExpressionAttributeValues={":m": 2},
        )
        summary = {"text": "Maya is a nurse.", "covers_up_to_message": 2, "updated_at": at}
    elif summary_kept == "none":
        table.update_item(
            Key={"pk": pk, "sk": "STATE"}, UpdateExpression="REMOVE summary, summary_at"
        )
        summary = None
    # and a message of hers waits for its reply (a burst's: the state lists it), and a
    # follow-up she asked for is pending
    table.update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET awaiting = :a",
        ExpressionAttributeValues={":a": [f"evt_{MAYA}_0"]},
    )
    follow_up = {
        "at": "2026-06-02T08:00:00+00:00",
        "local": "2026-06-02T09:00",
        "zone": "Europe/London",
        "about": "call the dentist",
        "created_at": (start + timedelta(minutes=5)).isoformat(),
    }
    table.put_item(Item={"pk": pk, "sk": "DUE#fu-1", "name": "fu-1", **follow_up})
    # when an operator exports her
    response = admin.handler(admin_event("GET", MAYA), lambda_context)
    # then the export holds exactly what is kept about her, its numbers written as integers
    assert response["statusCode"] == 200
    body = json.loads(response["body"], parse_float=lambda number: f"not an integer: {number}")
    assert datetime.fromisoformat(body.pop("exported_at")) <= datetime.now(UTC)
    marker = 2 if summary_kept == "as its own item" else 0
    assert body == {
        "agent": AGENT,
        "phone": MAYA,
        "person": pk,
        "summary": summary,
        "facts": [{"text": "Fact 0", "at": start.isoformat()}],
        "messages": [
            {
                "seq": seq,
                "role": "user" if seq % 2 else "assistant",
                "text": f"private text {seq}",
                "at": (start + timedelta(minutes=seq)).isoformat(),
                "whasp_number": BUSINESS,
            }
            for seq in (1, 2, 3)
        ],
        "follow_ups": [{"id": "fu-1", **follow_up, "status": "pending"}],
        "processed_events": [
            {"event_id": f"evt_{MAYA}_0", "status": "sent", "at": start.isoformat()}
        ],
        "state": {
            "last_seq": 3,
            "marker": marker,
            "last_number": BUSINESS,
            "last_inbound_at": start.isoformat(),
            "compaction_due": False,
            "awaiting": [f"evt_{MAYA}_0"],
        },
        "archived_transcripts": [],
        "kept_media": [],
    }


def test_a_summary_an_operator_wrote_before_any_fold_is_exported_as_covering_no_message(
    admin, consumer, lambda_context
):
    from tests.integration.test_operator import call, person

    # given Maya's first message, nothing of it folded yet, and a summary an operator wrote
    said = whasp_message("I'm Maya, a nurse", created_at="2026-11-29T09:00:00Z")
    assert failures(consumer.handler(sqs_batch(said), lambda_context)) == []
    summary = {"text": "Maya is a nurse.", "based_on": None}
    assert call(admin, lambda_context, "PUT", f"{person()}/summary", summary)[0] == 200
    # when an operator exports her
    status, body = call(admin, lambda_context, "GET", person())
    # then the summary covers none of her messages: each is still held, word for word
    assert status == 200
    assert (body["summary"]["text"], body["summary"]["covers_up_to_message"]) == (
        "Maya is a nurse.",
        0,
    )
    assert [m["text"] for m in body["messages"] if m["role"] == "user"] == ["I'm Maya, a nurse"]


def test_admin_delete_forgets_and_returns_a_receipt(admin, resources, lambda_context):
    fill(resources.table_name, MAYA, messages=6, facts=2, ledger=3)
    response = admin.handler(admin_event("DELETE", MAYA), lambda_context)
    assert response["statusCode"] == 200
    receipt = json.loads(response["body"])
    assert receipt["removed"] == 6 + 2 + 3 + 1
    assert "erased_at" in receipt
    assert MAYA not in response["body"]
    assert len(mine(scan(resources.table_name), MAYA)) == 1


def test_admin_delete_erases_media_kept_under_another_identifier(
    resources, monkeypatch, lambda_context
):
    from memagent.aws.archive import KeptMedia
    from memagent.memory.types import PersonState

    bucket = f"{resources.table_name}-media"
    boto3.client("s3").create_bucket(Bucket=bucket)
    admin = load_function(
        "admin",
        {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT, "MEDIA_BUCKET": bucket},
        monkeypatch,
    )
    # given Maya's second identifier is linked to her memory, and a voice note was kept under it
    fill(resources.table_name, MAYA, messages=2, facts=0, ledger=1)
    store = MemoryStore(resources.table_name)
    other = person_key(AGENT, NEW_NUMBER)
    store.attach(other, person_key(AGENT, MAYA), own=PersonState())
    media = KeptMedia(bucket)
    media.put(other, "evt_voice", b"OggS....", "audio/ogg")
    # when she is forgotten
    assert admin.handler(admin_event("DELETE", MAYA), lambda_context)["statusCode"] == 200
    # then the kept file is gone too
    assert media.get(other, "evt_voice") is None
    assert boto3.client("s3").list_objects_v2(Bucket=bucket).get("KeyCount") == 0


def test_an_operators_erasure_that_stopped_half_way_never_reaches_a_later_reply(
    admin, consumer, resources, whasp, openai, monkeypatch, lambda_context
):
    from tests.integration.faults import Died

    # given Maya told the agent where she lives, and the admin's erasure of her timed out
    # after writing its mark, before deleting anything
    old = whasp_message("I live at 1 Private Road", created_at="2026-11-29T09:00:00Z")
    assert failures(consumer.handler(sqs_batch(old), lambda_context)) == []
    crash_before(admin.store, "delete_items", monkeypatch, Died("timeout"))
    with pytest.raises(Died):
        admin.handler(admin_event("DELETE", MAYA), lambda_context)
    assert "Private Road" in json.dumps(mine(scan(resources.table_name), MAYA), default=str)
    # when she writes again, afterwards
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    consumer.handler(sqs_batch(whasp_message("Hello again", created_at=later)), lambda_context)
    # then she is answered from a fresh memory, and the erasure is finished
    assert len(whasp.sent) == 2
    assert [text for _, text in turns_of(openai.calls()[-1])] == ["Hello again"]
    assert "Private Road" not in json.dumps(scan(resources.table_name), default=str)


def test_an_erasure_that_stopped_before_clearing_the_state_never_shows_its_old_summary(
    admin, consumer, resources, openai, monkeypatch, lambda_context
):
    from tests.integration.faults import Died

    # given Maya's memory as an older version kept it (the summary on the state item), and
    # an operator's erasure that deleted her items, then timed out before clearing the state
    fill(resources.table_name, MAYA, messages=4, facts=1, ledger=2)
    crash_before(admin.store, "reduce_state_to_mark", monkeypatch, Died("timeout"))
    with pytest.raises(Died):
        admin.handler(admin_event("DELETE", MAYA), lambda_context)
    assert "her new job" in json.dumps(mine(scan(resources.table_name), MAYA), default=str)
    # when she writes again, afterwards
    later = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    consumer.handler(sqs_batch(whasp_message("Hello again", created_at=later)), lambda_context)
    # then she is answered from a fresh memory: the old summary is nowhere in front of the
    # model, and the erasure is finished
    assert "her new job" not in json.dumps(openai.calls()[-1])
    assert [text for _, text in turns_of(openai.calls()[-1])] == ["Hello again"]
    assert "her new job" not in json.dumps(scan(resources.table_name), default=str)


@pytest.mark.parametrize("phone", ["447700900123", "+0447700900123", "hello", "+44 7700 900123"])
def test_admin_refuses_a_phone_that_is_not_e164(admin, lambda_context, phone):
    for method in ("GET", "DELETE"):
        response = admin.handler(admin_event(method, phone), lambda_context)
        assert response["statusCode"] == 400


# ------------------------------------------------------------------ chat keywords


def test_forget_me_in_the_chat_asks_then_erases_then_says_goodbye(
    consumer, resources, whasp, openai, lambda_context
):
    consumer.handler(
        sqs_batch(whasp_message("I have a dog called Biscuit", created_at="2026-11-29T09:00:00Z")),
        lambda_context,
    )
    consumer.handler(
        sqs_batch(whasp_message("Forget me", created_at="2026-11-29T09:01:00Z")), lambda_context
    )
    assert "Reply YES" in whasp.sent[-1]["text"]
    assert len(mine(scan(resources.table_name), MAYA)) > 1  # nothing erased yet
    model_calls = len(openai.calls())

    consumer.handler(
        sqs_batch(whasp_message("yes", created_at="2026-11-29T09:02:00Z")), lambda_context
    )

    assert "forgotten everything" in whasp.sent[-1]["text"]
    assert len(whasp.sent) == 3
    assert len(openai.calls()) == model_calls  # keyword replies need no model
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


def test_anything_but_yes_keeps_the_memory(consumer, resources, whasp, lambda_context):
    consumer.handler(
        sqs_batch(whasp_message("forget me", created_at="2026-11-29T09:01:00Z")), lambda_context
    )
    consumer.handler(
        sqs_batch(whasp_message("no, keep it", created_at="2026-11-29T09:02:00Z")), lambda_context
    )
    consumer.handler(
        sqs_batch(whasp_message("yes", created_at="2026-11-29T09:03:00Z")), lambda_context
    )
    assert "forgotten" not in whasp.sent[-1]["text"]
    assert (
        len([i for i in mine(scan(resources.table_name), MAYA) if i["sk"].startswith("MSG#")]) == 6
    )


def test_what_do_you_remember_is_the_models_with_the_facts_and_summary_in_its_notes(
    consumer, resources, openai, whasp, lambda_context
):
    fill(resources.table_name, MAYA, messages=2, facts=2, ledger=0)
    consumer.handler(
        sqs_batch(
            whasp_message("What do you remember about me?", created_at="2026-11-29T09:00:00Z")
        ),
        lambda_context,
    )
    # the model answers, its instructions holding the summary and the facts (never read out
    # word for word: the reply is the model's)
    [request] = openai.calls()
    assert "Maya told me about her new job." in request["instructions"]
    assert "Fact 0" in request["instructions"] and "Fact 1" in request["instructions"]
    assert whasp.sent[-1]["text"].startswith("[offline model]")


# ------------------------------------------------------------------ opt-out policy


def opted_out_event(created_at: str = "2026-11-29T11:00:00Z") -> dict[str, Any]:
    return {
        "id": f"evt_{uuid.uuid4().hex[:8]}",
        "type": "chat.opted_out",
        "created_at": created_at,
        "data": {"number": BUSINESS, "chat": MAYA},
    }


def test_keep_policy_stops_sending_and_the_next_message_lifts_it(
    consumer, resources, whasp, lambda_context
):
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T10:00:00Z")), lambda_context
    )
    sent = len(whasp.sent)
    # STOP arrives as a message (no reply) and as an opt-out event
    consumer.handler(
        sqs_batch(whasp_message("STOP", created_at="2026-11-29T10:59:00Z"), opted_out_event()),
        lambda_context,
    )
    assert len(whasp.sent) == sent
    state = next(i for i in mine(scan(resources.table_name), MAYA) if i["sk"] == "STATE")
    assert state["opted_out"] is True
    # memory survives under the keep policy
    assert any(i["sk"].startswith("MSG#") for i in mine(scan(resources.table_name), MAYA))
    # the next message lifts the opt-out and is answered
    consumer.handler(
        sqs_batch(whasp_message("I'm back", created_at="2026-11-29T12:00:00Z")), lambda_context
    )
    assert len(whasp.sent) == sent + 1
    state = next(i for i in mine(scan(resources.table_name), MAYA) if i["sk"] == "STATE")
    assert state["opted_out"] is False


def test_an_opt_out_older_than_the_last_message_is_ignored(consumer, resources, lambda_context):
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T12:00:00Z")), lambda_context
    )
    consumer.handler(sqs_batch(opted_out_event("2026-11-29T11:00:00Z")), lambda_context)
    state = next(i for i in mine(scan(resources.table_name), MAYA) if i["sk"] == "STATE")
    assert state["opted_out"] is False


def test_erase_policy_forgets_on_opt_out(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T10:00:00Z")), lambda_context
    )
    sent = len(whasp.sent)
    consumer.handler(sqs_batch(opted_out_event()), lambda_context)
    assert len(whasp.sent) == sent
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


def test_erase_policy_forgets_on_a_stop_message(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T10:00:00Z")), lambda_context
    )
    consumer.handler(
        sqs_batch(whasp_message("stop", created_at="2026-11-29T10:01:00Z")), lambda_context
    )
    assert len(whasp.sent) == 1
    assert len(mine(scan(resources.table_name), MAYA)) == 1


def test_erase_policy_does_not_erase_on_a_redelivered_message_whose_reply_was_refused(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T10:00:00Z")), lambda_context
    )
    # given whasp refused the reply to her next message (409: opted out at whasp)
    whasp.opted_out.add(MAYA)
    event = whasp_message("are you there?", created_at="2026-11-29T10:05:00Z")
    consumer.handler(sqs_batch(event), lambda_context)
    # when whasp delivers that message again
    consumer.handler({"Records": [sqs_record(event, receive_count=2)]}, lambda_context)
    # then she is not erased: she never wrote STOP
    said = [i["text"] for i in mine(scan(resources.table_name), MAYA) if i.get("role") == "user"]
    assert said == ["hi", "are you there?"]


def test_erase_policy_finishes_a_stop_erasure_a_crash_interrupted(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    consumer.handler(
        sqs_batch(whasp_message("hi", created_at="2026-11-29T10:00:00Z")), lambda_context
    )
    died = RuntimeError("the Lambda died after storing the STOP")
    crash_before(consumer.consumer.agent, "_forget", monkeypatch, died)
    stop = whasp_message("stop", created_at="2026-11-29T10:01:00Z")
    from devstack.lambda_harness import retried

    assert retried(consumer.handler, sqs_batch(stop), lambda_context) != []
    assert (
        failures(consumer.handler({"Records": [sqs_record(stop, receive_count=2)]}, lambda_context))
        == []
    )
    assert len(mine(scan(resources.table_name), MAYA)) == 1  # only the mark


# ------------------------------------------------------------------ a replaced number


def test_after_number_replaced_the_same_person_gets_the_same_context(
    consumer, resources, whasp, openai, lambda_context
):
    consumer.handler(
        sqs_batch(whasp_message("My name is Maya", created_at="2026-11-29T09:00:00Z")),
        lambda_context,
    )
    replaced = {
        "id": "evt_91c0",
        "type": "number.replaced",
        "created_at": "2026-11-29T10:00:00Z",
        "data": {"old_number": BUSINESS, "new_number": NEW_NUMBER, "label": "Coach"},
    }
    assert failures(consumer.handler(sqs_batch(replaced), lambda_context)) == []
    agent_row = (
        boto3.resource("dynamodb")
        .Table(resources.table_name)
        .get_item(Key={"pk": f"A#{AGENT}", "sk": "NUMBER"})["Item"]
    )
    assert (agent_row["current"], agent_row["previous"]) == (NEW_NUMBER, BUSINESS)

    # when Maya writes through the new number
    consumer.handler(
        sqs_batch(
            whasp_message("Hi, new number?", number=NEW_NUMBER, created_at="2026-11-29T10:05:00Z")
        ),
        lambda_context,
    )
    call = openai.calls()[-1]
    # then the context holds her earlier turn, and the reply goes out from the new number
    assert turns_of(call)[0][1] == "My name is Maya"
    assert "new" in notes_of(call).lower() and "number" in notes_of(call).lower()
    assert whasp.sent[-1]["from"] == NEW_NUMBER
    # the new-number line appears once
    consumer.handler(
        sqs_batch(whasp_message("Thanks", number=NEW_NUMBER, created_at="2026-11-29T10:06:00Z")),
        lambda_context,
    )
    from memagent.memory.context import NEW_NUMBER_LINE

    assert NEW_NUMBER_LINE in notes_of(call)
    assert NEW_NUMBER_LINE not in notes_of(openai.calls()[-1])


def test_after_number_replaced_an_operators_reply_goes_out_from_the_new_number(
    consumer, resources, whasp, monkeypatch, lambda_context
):
    from tests.integration.test_operator import call, person

    admin = load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": AGENT,
            "PROVIDER": "whasp",
            "WHASP_API_URL": whasp.url,
            "WHASP_API_KEY": "whasp-test-key",
            "LEDGER_TTL_DAYS": "3650",
        },
        monkeypatch,
    )
    # given Maya wrote to the business number, and whasp then replaced it (banned for good)
    consumer.handler(
        sqs_batch(whasp_message("My order never arrived", created_at="2026-11-29T09:00:00Z")),
        lambda_context,
    )
    replaced = {
        "id": "evt_91c1",
        "type": "number.replaced",
        "created_at": "2026-11-29T10:00:00Z",
        "data": {"old_number": BUSINESS, "new_number": NEW_NUMBER, "label": "Coach"},
    }
    assert failures(consumer.handler(sqs_batch(replaced), lambda_context)) == []
    # when an operator takes her chat over and replies, before she writes again
    assert call(admin, lambda_context, "POST", f"{person()}/handoff")[0] == 200
    words = "Hi Maya, this is Sam from the shop. Your parcel is on its way."
    status, _ = call(
        admin,
        lambda_context,
        "POST",
        f"{person()}/messages",
        {"text": words},
        **{"idempotency-key": "reply-1"},
    )
    # then the words go out once, from the number that replaced the retired one, and her
    # export says which number carried them
    assert status == 200
    assert [(s["from"], s["text"]) for s in whasp.sent[1:]] == [(NEW_NUMBER, words)]
    exported = json.loads(admin.handler(admin_event("GET", MAYA), lambda_context)["body"])
    assert exported["messages"][-1]["whasp_number"] == NEW_NUMBER


def test_the_command_line_tool_exports_and_forgets(resources, capsys):
    import runpy
    import sys
    from pathlib import Path

    fill(resources.table_name, MAYA, messages=4, facts=1, ledger=2)
    script = str(Path(__file__).resolve().parents[2] / "scripts" / "people.py")
    for action in ("export", "forget"):
        sys.argv = [script, action, MAYA, "--table", resources.table_name, "--agent", AGENT]
        with pytest.raises(SystemExit) as done:
            runpy.run_path(script, run_name="__main__")
        assert done.value.code == 0
        out = json.loads(capsys.readouterr().out)
        if action == "export":
            assert len(out["messages"]) == 4 and out["summary"]
        else:
            assert out["removed"] == 4 + 1 + 2 + 1
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


# ------------------------------------------------------------------ races with an erasure


def test_a_compaction_racing_an_erasure_commits_nothing(
    compactor_env, resources, openai, monkeypatch
):
    from tests.conftest import seed_turns

    compactor = load_function("compactor", compactor_env, monkeypatch).compactor
    store = compactor.store

    def fold_while_forgotten(request):
        forget(store, AGENT, MAYA)  # the admin erases Maya while the model is folding
        return json.dumps({"summary": "Maya's secrets", "facts": ["Has a dog called Biscuit"]})

    openai.responder = fold_while_forgotten
    seed_turns(store, MAYA, [f"turn {i}" for i in range(45)])
    assert compactor.compact(person_key(AGENT, MAYA)) == "lost_race"
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


def test_a_late_opt_out_never_moves_the_erasure_back(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "OPT_OUT_POLICY": "erase"}, monkeypatch)
    before = whasp_message("sent at nine", created_at="2026-11-29T09:00:00Z")
    consumer.handler(sqs_batch(before), lambda_context)
    forget(consumer.consumer.agent.store, AGENT, MAYA)  # erased now
    # when an opt-out created at eight arrives late
    consumer.handler(sqs_batch(opted_out_event("2026-11-29T08:00:00Z")), lambda_context)
    # then the nine o'clock message, redelivered, is still refused
    consumer.handler({"Records": [sqs_record(before, receive_count=2)]}, lambda_context)
    assert len(whasp.sent) == 1
    [mark] = mine(scan(resources.table_name), MAYA)
    assert mark["erased_at"] > "2026-11-29T09:00:00"


def test_confirmed_forget_erases_even_if_the_goodbye_cannot_be_sent(
    consumer, resources, whasp, lambda_context
):
    consumer.handler(
        sqs_batch(whasp_message("forget me", created_at="2026-11-29T09:01:00Z")), lambda_context
    )
    whasp.reject_next(1, status=403)
    response = consumer.handler(
        sqs_batch(whasp_message("yes", created_at="2026-11-29T09:02:00Z")), lambda_context
    )
    assert failures(response) == []
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


def test_an_erasure_while_the_model_answers_leaves_only_the_mark(
    consumer, resources, openai, lambda_context
):
    # given Maya writes, and the admin erases her while the model is composing the reply
    store = consumer.consumer.agent.store

    def answer_while_forgotten(request):
        forget(store, AGENT, MAYA)
        return "A reply composed before the erasure"

    openai.responder = answer_while_forgotten
    response = consumer.handler(sqs_batch(whasp_message("hi")), lambda_context)
    # then the turn ends cleanly and nothing of hers is left but the content-free mark: the
    # reply that landed after the erasure's deletes was found and removed by the turn itself
    assert failures(response) == []
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)


def test_a_crash_after_a_reply_outlived_an_erasure_is_cleaned_by_the_redelivery(
    consumer, resources, openai, lambda_context, monkeypatch
):
    # given the erasure lands while the model answers, and the turn crashes after the send
    store = consumer.consumer.agent.store

    def answer_while_forgotten(request):
        forget(store, AGENT, MAYA)
        return "A reply composed before the erasure"

    openai.responder = answer_while_forgotten
    died = RuntimeError("crash before the turn could notice the erasure")
    crash_before(store, "finish_event", monkeypatch, died)
    event = whasp_message("hi")
    batch = sqs_batch(event)
    # the batch's only record failed (reported, not raised)
    assert failures(consumer.handler(batch, lambda_context)) == [batch["Records"][0]["messageId"]]
    assert any(item["sk"].startswith("MSG#") for item in mine(scan(resources.table_name), MAYA))
    # when the queue redelivers the message
    response = consumer.handler({"Records": [sqs_record(event, receive_count=2)]}, lambda_context)
    # then it is older than the mark: skipped, and the reply that outlived the erasure is gone
    assert failures(response) == []
    [mark] = mine(scan(resources.table_name), MAYA)
    assert only_the_mark(mark)
