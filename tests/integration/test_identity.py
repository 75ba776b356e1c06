"""Whose memory it is (issue 19), through the handlers with Meta-shaped POSTs: person keys only
the stack's key can compute, identifiers that move between people, and retention."""

from __future__ import annotations

import hashlib
import io
import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

import memagent.turn.identity
from devstack.events import meta_contact, meta_message, meta_notification
from memagent.memory.person import legacy_key, person_key
from tests.conftest import AGENT, dynamodb_table
from tests.integration.test_meta import (  # noqa: F401 (fixtures)
    MAYA_BSUID,
    MAYA_PHONE,
    NOW,
    consumer,
    graph,
    graph_server,
    memory_rows,
    meta_consumer_env,
    post,
    queue,
    text_from,
    webhook,
)


def _table_items(resources) -> list[dict]:
    return dynamodb_table(resources.table_name).scan(ConsistentRead=True)["Items"]


def test_no_key_group_id_or_log_line_is_computable_from_a_phone_without_the_stacks_key(
    webhook, queue, consumer, resources, monkeypatch, lambda_context
):
    from memagent.observability import logger

    # given Maya's messages and a marketing preference, queued and answered, logs captured
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    preference = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], field="user_preferences"
    )
    preference["entry"][0]["changes"][0]["value"]["user_preferences"] = [
        {"wa_id": MAYA_PHONE.lstrip("+"), "value": "stop", "timestamp": NOW + 60}
    ]
    queued = []
    for notification in (
        text_from("Hello", phone=MAYA_PHONE, at=NOW),
        text_from("Me again", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 30),
        preference,
    ):
        assert post(webhook, notification, lambda_context) == 200
        queued += [m["Attributes"] for m in queue.peek()]
        assert queue.drain(consumer, lambda_context) == 0
    where = {
        "table": json.dumps(_table_items(resources), default=str),
        "queue": json.dumps(queued),
        "logs": out.getvalue(),
    }
    # when someone hashes her phone number (or BSUID) the old way, bare SHA-256
    guesses = set()
    for identifier in (MAYA_PHONE, MAYA_PHONE.lstrip("+"), MAYA_BSUID):
        for text in (AGENT + "\x1f" + identifier, identifier):
            guesses.add(hashlib.sha256(text.encode()).hexdigest()[:16])
    # then nothing matches, anywhere; the keyed key is what the table holds
    assert {name: [g for g in guesses if g in text] for name, text in where.items()} == {
        "table": [],
        "queue": [],
        "logs": [],
    }
    assert person_key(AGENT, MAYA_PHONE) in where["table"]
    assert person_key(AGENT, MAYA_PHONE) in {q["MessageGroupId"] for q in queued}
    assert '"marketing preference"' in where["logs"]
    assert MAYA_PHONE.lstrip("+") not in where["logs"] + where["queue"]


def test_the_person_key_is_read_from_secrets_manager_and_computes_other_keys(
    moto_server, monkeypatch
):
    import uuid

    import memagent.memory.person as person

    # given a stack whose key is its generated secret (no plain PERSON_KEY; a name of its own,
    # as the moto server may outlive one run of this test: make mutation runs it again)
    arn = boto3.client("secretsmanager").create_secret(
        Name=f"PersonKeySecret-identity-{uuid.uuid4().hex[:8]}", SecretString="s" * 64
    )["ARN"]
    local = person.person_key(AGENT, MAYA_PHONE)
    monkeypatch.delenv("PERSON_KEY")
    monkeypatch.setenv("PERSON_KEY_SECRET_ARN", arn)
    monkeypatch.setattr(person, "_key", None)  # a cold start
    # when a key is derived, then it comes from that secret: another key, the same each time
    stacks = person.person_key(AGENT, MAYA_PHONE)
    assert stacks != local and stacks.startswith("P#") and len(stacks) == 42
    assert person.person_key(AGENT, MAYA_PHONE) == stacks


# ------------------------------------------------------------------ retention


def _ttl_sweep(ttl, tap) -> list[dict]:
    """DynamoDB's TTL process now (devstack.ttl, with no lag): every item whose `expires_at`
    has passed is deleted, and its stream record names the DynamoDB service as the deleter
    (userIdentity), as AWS's do. Returns the stream's new records, unfiltered."""
    ttl.lag = 0
    ttl.sweep()
    return tap.poll()


def test_a_person_silent_past_the_retention_is_forgotten_one_who_wrote_on_day_29_is_not(
    consumer_env, compactor_env, resources, tap, ttl, whasp, monkeypatch, lambda_context
):
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template
    from memagent.observability import logger
    from tests.conftest import MAYA, load_function, sqs_batch, whasp_message

    sam = "+447700900456"
    consumer = load_function(
        "consumer", {**consumer_env, "INACTIVE_RETENTION_DAYS": "30"}, monkeypatch
    )
    now = datetime.now(UTC)

    def writes(phone: str, text: str, days_ago: float) -> None:
        at = (now - timedelta(days=days_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
        batch = sqs_batch(whasp_message(text, chat=phone, created_at=at))
        assert consumer.handler(batch, lambda_context) == {"batchItemFailures": []}

    # given Sam wrote on day 0 only, and Maya on day 2 and on day 29 (with 30 days' retention;
    # each message handled now: her day 2's retention has not ended when her day 29's comes)
    writes(sam, "my HIV test came back positive", 31)
    writes(MAYA, "I start the new job on Monday", 29)
    writes(MAYA, "First week done!", 2)
    # when DynamoDB's TTL runs on day 31, and Lambda hands the compactor what the filter lets by
    records = _ttl_sweep(ttl, tap)
    delivered = [r for r in records if passes_filters(r, stream_filters(load_template()))]
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    compactor = load_function(
        "compactor", {**compactor_env, "MEDIA_BUCKET": consumer_env["MEDIA_BUCKET"]}, monkeypatch
    )
    assert compactor.handler({"Records": delivered}, lambda_context) == {"batchItemFailures": []}
    # then the filter let exactly Sam's state deletion through, nothing from the turns before
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in delivered] == [person_key(AGENT, sam)]
    assert len(records) > 10  # the turns' own records, none delivered
    # and Sam is forgotten completely: only the content-free erasure mark is left
    rows = compactor.compactor.store.everything(person_key(AGENT, sam))
    assert [set(r) - {"pk", "sk"} for r in rows] == [{"erased_at"}]
    # with the audit line of an operator's erasure, naming the TTL process as the caller
    audits = [json.loads(line) for line in out.getvalue().splitlines() if '"audit"' in line]
    assert [(a["audit"], a["person"], a["outcome"], a["caller"]) for a in audits] == [
        ("erase", person_key(AGENT, sam), "done", "retention (dynamodb.amazonaws.com)")
    ]
    # while Maya, who wrote on day 29, keeps all of it
    memory = compactor.compactor.store.load(person_key(AGENT, MAYA))
    assert [t.text for t in memory.turns if t.role == "user"] == [
        "I start the new job on Monday",
        "First week done!",
    ]


def _maya_writes(consumer, lambda_context, text: str, at: datetime, event_id: str | None) -> None:
    """Maya's whasp message written at `at`, handled by the consumer, nothing left to retry."""
    from tests.conftest import MAYA, sqs_batch, whasp_message

    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    batch = sqs_batch(whasp_message(text, chat=MAYA, created_at=stamp, event_id=event_id))
    assert consumer.handler(batch, lambda_context) == {"batchItemFailures": []}


def test_a_message_that_arrives_after_the_ttl_deletion_survives_the_expiry_and_is_remembered(
    consumer_env, compactor_env, resources, tap, ttl, whasp, openai, monkeypatch, lambda_context
):
    from devstack.fake_openai import turns_of
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template
    from tests.conftest import MAYA, load_function

    consumer = load_function(
        "consumer", {**consumer_env, "INACTIVE_RETENTION_DAYS": "30"}, monkeypatch
    )
    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA)

    def writes(text: str, at: datetime, event_id: str | None = None) -> None:
        _maya_writes(consumer, lambda_context, text, at, event_id)

    # given Maya wrote 31 days ago (30 days' retention), and DynamoDB's TTL has just deleted
    # her state item; its stream record (the deletion's time in it) is not handled yet
    old = ("my HIV test came back positive", datetime.now(UTC) - timedelta(days=31), "evt_old")
    writes(*old)
    records = _ttl_sweep(ttl, tap)
    expiry = [r for r in records if passes_filters(r, stream_filters(load_template()))]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in expiry] == [pk]
    deleted = datetime.fromtimestamp(expiry[0]["dynamodb"]["ApproximateCreationDateTime"], UTC)
    # when she writes again meanwhile (a new conversation), then the expiry runs, delivered twice
    writes("Hi! Is this the running club?", deleted + timedelta(seconds=1))
    for _ in range(2):
        assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # then the new message was answered, and it and its answer are remembered: her next
    # message is answered with them in front of the model, and nothing of the old memory;
    # a late redelivery of the old message is refused (it predates the expiry)
    writes(*old)
    writes("Great, Tuesdays suit me", deleted + timedelta(seconds=2))
    assert len(whasp.sent) == 3
    seen = [text for _, text in turns_of(openai.calls()[-1])]
    assert seen[0] == "Hi! Is this the running club?" and seen[-1] == "Great, Tuesdays suit me"
    assert len(seen) == 3
    rows = compactor.compactor.store.everything(pk)
    assert "HIV" not in json.dumps(rows, default=str)
    # and no reply since the TTL's deletion read the expired memory (a recycled number's new
    # owner must not be answered with it), not even the one before the record was handled
    assert [c for c in openai.calls()[1:] if "HIV" in json.dumps(c)] == []
    # and her new state stands (the retention counts from her new messages)
    state = next(r for r in rows if r["sk"] == "STATE")
    assert int(state["last_seq"]) == max(int(r["seq"]) for r in rows if r["sk"].startswith("MSG#"))
    assert int(state["expires_at"]) > (deleted + timedelta(days=29)).timestamp()


def test_a_message_in_flight_when_the_ttl_fired_is_answered_afresh_an_old_one_is_not_again(
    consumer_env, compactor_env, resources, tap, ttl, whasp, openai, monkeypatch, lambda_context
):
    from devstack.fake_openai import turns_of
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template
    from tests.conftest import MAYA, load_function, seed_turns

    # 7 days' retention, inside the ledger's 30 days: only the expiry's mark can tell an old
    # message's redelivery from a new one
    consumer = load_function(
        "consumer", {**consumer_env, "INACTIVE_RETENTION_DAYS": "7"}, monkeypatch
    )
    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA)

    def writes(text: str, at: datetime, event_id: str | None = None) -> None:
        _maya_writes(consumer, lambda_context, text, at, event_id)

    # given Maya's conversation of 8 days ago, answered then, and DynamoDB's TTL deleting her
    # state item now; the stream record's handler runs before her newest message is handled
    started = datetime.now(UTC) - timedelta(days=8)
    seed_turns(
        consumer.consumer.agent.store,
        MAYA,
        ["my HIV test came back positive", "I'm sorry to hear that."],
        start=started,
    )
    answered = next(
        r for r in compactor.compactor.store.everything(pk) if r["sk"].startswith("EVT#")
    )
    records = _ttl_sweep(ttl, tap)
    expiry = [r for r in records if passes_filters(r, stream_filters(load_template()))]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in expiry] == [pk]
    deleted = datetime.fromtimestamp(expiry[0]["dynamodb"]["ApproximateCreationDateTime"], UTC)
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # when her message written a second before the deletion (queued, in flight) is delivered
    writes("Hi! Is this the running club?", deleted - timedelta(seconds=1), "evt_in_flight")
    # then it gets one reply, from a context without the old memory
    assert len(whasp.sent) == 1
    assert [text for _, text in turns_of(openai.calls()[-1])] == ["Hi! Is this the running club?"]
    assert "HIV" not in json.dumps(openai.calls())
    # when the stream record comes again, and the old message (already answered) is redelivered
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    writes("my HIV test came back positive", started + timedelta(minutes=1), answered["event_id"])
    # then the old one is not answered again, and the new conversation stands: her next
    # message is answered with it in front of the model
    assert len(whasp.sent) == 1
    writes("Great, Tuesdays suit me", deleted + timedelta(seconds=2))
    assert len(whasp.sent) == 2
    seen = [text for _, text in turns_of(openai.calls()[-1])]
    assert seen[0] == "Hi! Is this the running club?" and seen[-1] == "Great, Tuesdays suit me"
    assert len(seen) == 3
    assert "HIV" not in json.dumps(compactor.compactor.store.everything(pk), default=str)


def _silent_past_retention(webhook, queue, consumer, ttl, tap, lambda_context):
    """Maya (phone and BSUID) told the agent something private, then was silent past the
    retention (365 days by default): DynamoDB's TTL deletes her state item. Returns its stream
    record, not handled yet (Lambda retries it, or it waits in CompactionFailureQueue)."""
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template

    a_year_ago = NOW - 400 * 86400
    private = text_from(
        "my HIV test came back positive", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=a_year_ago
    )
    _exchange(webhook, queue, consumer, lambda_context, private)
    records = _ttl_sweep(ttl, tap)
    expiry = [r for r in records if passes_filters(r, stream_filters(load_template()))]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in expiry] == [person_key(AGENT, MAYA_BSUID)]
    return expiry


def test_a_late_ttl_expiry_keeps_the_new_conversation_its_state_and_its_phone_link(
    webhook,
    queue,
    consumer,
    graph,
    openai,
    resources,
    tap,
    ttl,
    compactor_env,
    monkeypatch,
    lambda_context,
):
    from memagent.store.memory_store import MemoryStore
    from tests.conftest import load_function

    compactor = load_function("compactor", compactor_env, monkeypatch)
    store, pk = MemoryStore(resources.table_name), person_key(AGENT, MAYA_BSUID)
    # given Maya's memory expired by the TTL, its stream record not handled yet
    expiry = _silent_past_retention(webhook, queue, consumer, ttl, tap, lambda_context)
    # when she writes again (the turn runs the expiry itself), then from her phone alone
    new = int(datetime.now(UTC).timestamp()) + 2  # after everything the old memory holds
    hello = text_from("Hi! Is this the running club?", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=new)
    alone = text_from("It's Maya, on my phone", phone=MAYA_PHONE, at=new + 1)
    _exchange(webhook, queue, consumer, lambda_context, hello, alone)
    # then her phone still reaches the new conversation (the turn's expiry kept its link)
    assert _said(openai) == ["Hi! Is this the running club?", "It's Maya, on my phone"]
    # when she asks for a human and writes again (stored for the human, not answered by the
    # agent), and only then is the TTL's stream record handled
    human = text_from("talk to a human", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=new + 2)
    _exchange(webhook, queue, consumer, lambda_context, human)
    sent = len(graph.sent)
    waiting = text_from("Are you there?", phone=MAYA_PHONE, at=new + 3)
    _exchange(webhook, queue, consumer, lambda_context, waiting)
    assert len(graph.sent) == sent
    before = store.everything(pk)
    state = next(item for item in before if item["sk"] == "STATE")
    assert {"handoff_since", "expires_at", "last_seq", "phone_key", "bsuid_key"} <= set(state)
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # then the new conversation stands as it was: its state (the human still has the chat, the
    # retention counts from her new messages), its messages, the ledger entry of the one no
    # reply answers yet, and its phone link
    assert store.everything(pk) == before
    assert store.state(person_key(AGENT, MAYA_PHONE)).alias_of == pk
    assert [t.text for t in store.load(pk).turns if t.role == "user"][-1] == "Are you there?"
    # and nothing of the old memory is left, nor was any model call since shown it
    assert "HIV" not in json.dumps(_table_items(resources), default=str)
    assert [c for c in openai.calls()[1:] if "HIV" in json.dumps(c)] == []


def test_a_person_whose_retention_ended_before_the_ttl_came_is_answered_afresh_meta(
    webhook,
    queue,
    consumer,
    openai,
    resources,
    tap,
    ttl,
    lambda_context,
):
    # given Maya told the agent something private 400 days ago (365 days' retention), and
    # DynamoDB's TTL, 60 days behind, has not deleted her state item yet
    ttl.lag = 60 * 86400
    private = text_from(
        "my HIV test came back positive", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW - 400 * 86400
    )
    _exchange(webhook, queue, consumer, lambda_context, private)
    assert ttl.sweep() == 0
    assert "HIV" in json.dumps(_table_items(resources), default=str)
    # when she writes again
    new = int(datetime.now(UTC).timestamp()) + 2  # after everything the old memory holds
    hello = text_from("Hi! Is this the running club?", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=new)
    _exchange(webhook, queue, consumer, lambda_context, hello)
    # then she is answered as a new conversation, and the old memory is gone
    assert _said(openai) == ["Hi! Is this the running club?"]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    assert "HIV" not in json.dumps(_table_items(resources), default=str)
    # when the TTL comes, late: her state was renewed, so it deletes only what has expired
    # since (the new conversation's ledger entries, 30 days on), and nothing passes the filter
    ttl.clock.advance(60 * 86400)
    ttl.sweep()
    assert tap.matching() == []
    # then her new conversation stands, reached by her phone alone too
    alone = text_from("It's Maya, on my phone", phone=MAYA_PHONE, at=new + 1)
    _exchange(webhook, queue, consumer, lambda_context, alone)
    assert _said(openai) == ["Hi! Is this the running club?", "It's Maya, on my phone"]
    assert [c for c in openai.calls()[1:] if "HIV" in json.dumps(c)] == []


@pytest.mark.parametrize("first", [41, 1], ids=["folded", "never-folded"])
def test_an_expiry_racing_the_persons_new_message_keeps_the_new_conversation(
    first,
    consumer_env,
    compactor_env,
    resources,
    tap,
    ttl,
    whasp,
    openai,
    monkeypatch,
    lambda_context,
):
    from devstack.fake_openai import turns_of
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template
    from tests.conftest import MAYA, load_function, sqs_batch, whasp_message

    consumer = load_function("consumer", consumer_env, monkeypatch)
    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA)
    table = dynamodb_table(resources.table_name)
    # given Maya's memory of a year ago, folded down to its newest turns and a summary (seqs 41
    # to 44), or never folded (seqs 1 to 4: the keys her new conversation, which starts at seq
    # 1, writes), and DynamoDB's TTL deleting her state item now
    then = datetime.now(UTC) - timedelta(days=400)
    for seq in range(first, first + 4):
        role, text = ("user", "my HIV test came back positive") if seq % 2 else ("assistant", "ok")
        at = (then + timedelta(minutes=seq)).isoformat()
        table.put_item(
            Item={
                "pk": pk,
                "sk": f"MSG#{seq:012d}",
                "seq": seq,
                "role": role,
                "text": text,
                "at": at,
                "number": "+14155550100",
            }
        )
    if first > 1:
        table.put_item(
            Item={
                "pk": pk,
                "sk": "SUMMARY",
                "text": "Maya's HIV test.",
                "marker": first - 1,
                "at": (then + timedelta(minutes=45)).isoformat(),
            }
        )
    table.put_item(
        Item={
            "pk": pk,
            "sk": "STATE",
            "last_seq": first + 3,
            "marker": first - 1,
            "expires_at": int((then + timedelta(days=365)).timestamp()),
        }
    )
    records = _ttl_sweep(ttl, tap)
    expiry = [r for r in records if passes_filters(r, stream_filters(load_template()))]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in expiry] == [pk]
    erasing = compactor.compactor.store
    deletes = erasing.delete_items_as_read

    def writes(text: str) -> None:
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        batch = sqs_batch(whasp_message(text, chat=MAYA, created_at=stamp))
        assert consumer.handler(batch, lambda_context) == {"batchItemFailures": []}

    def after_her_turn(*args):
        monkeypatch.setattr(erasing, "delete_items_as_read", deletes)
        writes("Hi! Is this the running club?")
        return deletes(*args)

    # when the record's expiry has read her partition, and she writes (answered at once)
    # before it deletes what it read
    monkeypatch.setattr(erasing, "delete_items_as_read", after_her_turn)
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # then her new conversation keeps its state (the retention counts from it)
    state = next(r for r in compactor.compactor.store.everything(pk) if r["sk"] == "STATE")
    assert {"last_seq", "expires_at", "last_inbound_at"} <= set(state)
    # and her next message is answered with it in front of the model, and nothing older
    writes("Great, Tuesdays suit me")
    assert len(whasp.sent) == 2
    seen = [text for _, text in turns_of(openai.calls()[-1])]
    assert seen[0] == "Hi! Is this the running club?" and seen[-1] == "Great, Tuesdays suit me"
    assert "HIV" not in json.dumps(openai.calls()) + json.dumps(
        _table_items(resources), default=str
    )


@pytest.mark.parametrize("where", ["compactor", "turn"])
def test_an_expiry_that_stopped_half_way_never_reaches_the_next_persons_reply(
    where,
    webhook,
    queue,
    consumer,
    openai,
    resources,
    tap,
    ttl,
    compactor_env,
    monkeypatch,
    lambda_context,
):
    from tests.conftest import load_function
    from tests.integration.faults import Died, crash_after, crash_before

    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA_BSUID)
    # given Maya's memory expired by the TTL, and the expiry stopped after its erasure mark,
    # before its deletes: the compactor's invocation timed out, or the turn that ran it crashed
    expiry = _silent_past_retention(webhook, queue, consumer, ttl, tap, lambda_context)
    new = int(datetime.now(UTC).timestamp()) + 2
    hello = text_from("Hi! Is this the running club?", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=new)
    if where == "compactor":
        crash_before(
            compactor.compactor.store, "delete_items_as_read", monkeypatch, Died("timeout")
        )
        with pytest.raises(Died):
            compactor.handler({"Records": expiry}, lambda_context)
        assert "HIV" in json.dumps(compactor.compactor.store.everything(pk), default=str)
        failed = 0
    else:
        crash_after(consumer.consumer.agent.store, "mark_erased", monkeypatch)
        failed = 1  # the record fails once; the queue delivers it again
    # when a message is written after the mark (hers, or a recycled number's new owner's)
    assert post(webhook, hello, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == failed
    # then its reply is built without the old memory, which is gone
    assert _said(openai) == ["Hi! Is this the running club?"]
    assert [c for c in openai.calls()[1:] if "HIV" in json.dumps(c)] == []
    assert "HIV" not in json.dumps(_table_items(resources), default=str)
    # and when the stream record comes (again), the new conversation stands
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    later = text_from("Great, Tuesdays suit me", phone=MAYA_PHONE, at=new + 1)
    _exchange(webhook, queue, consumer, lambda_context, later)
    assert _said(openai) == ["Hi! Is this the running club?", "Great, Tuesdays suit me"]


def test_an_expiry_the_table_refuses_half_way_is_audited_as_failed_then_done_when_retried(
    webhook, queue, consumer, resources, tap, ttl, compactor_env, monkeypatch, lambda_context
):
    from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

    from memagent.observability import logger
    from tests.conftest import load_function
    from tests.integration.faults import Crash, crash_before

    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA_BSUID)
    # given Maya's memory expired by the TTL, and the table refusing the expiry's first deletes
    expiry = _silent_past_retention(webhook, queue, consumer, ttl, tap, lambda_context)
    crash_before(compactor.compactor.store, "delete_items_as_read", monkeypatch, Crash("503"))
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    # when the compactor handles its stream record (the batch fails: Lambda retries it), and
    # again
    with pytest.raises(BatchProcessingError):
        compactor.handler({"Records": expiry}, lambda_context)
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # then the audit trail says the TTL's erasure of her failed, then was done; and it was
    audits = [json.loads(line) for line in out.getvalue().splitlines() if '"audit"' in line]
    caller = "retention (dynamodb.amazonaws.com)"
    assert [(a["audit"], a["person"], a["outcome"], a["caller"]) for a in audits] == [
        ("erase", pk, "failed", caller),
        ("erase", pk, "done", caller),
    ]
    assert "HIV" not in json.dumps(_table_items(resources), default=str)


def test_the_retention_filter_names_only_the_dynamodb_key_and_passes_a_state_items_deletion():
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template

    patterns = stream_filters(load_template())
    ttl = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}

    def record(event: str, sk: str, identity: dict | None = None, image: dict | None = None):
        found = {"eventName": event, "dynamodb": {"Keys": {"pk": {"S": "P#1"}, "sk": {"S": sk}}}}
        if identity:
            found["userIdentity"] = identity
        if image:
            found["dynamodb"]["NewImage"] = image
        return found

    # Lambda's guide: "DynamoDB event source mappings only support filtering on the dynamodb
    # key": every pattern names that key alone (the harness refuses any other)
    assert all(set(json.loads(pattern)) == {"dynamodb"} for pattern in patterns)
    with pytest.raises(ValueError, match="only support filtering on the dynamodb key"):
        passes_filters(record("REMOVE", "STATE", ttl), ['{"eventName": ["REMOVE"]}'])
    # a state item's deletion passes, whoever deleted it (the compactor checks userIdentity)
    assert passes_filters(record("REMOVE", "STATE", ttl), patterns)
    assert passes_filters(record("REMOVE", "STATE"), patterns)
    # never the ledger's TTL, nor a state item's change without its flag
    assert not passes_filters(record("REMOVE", "EVT#0a1b", ttl), patterns)
    image = {"pk": {"S": "P#1"}, "sk": {"S": "STATE"}, "last_seq": {"N": "3"}}
    assert not passes_filters(record("MODIFY", "STATE", image=image), patterns)


# ------------------------------------------------------------------ identifiers that move

NEW_BSUID = "GB.77700011122233344400"  # the recycled number's new owner
MAYA_NEW_PHONE = "+447700900999"


def _said(openai) -> list[str]:
    """What the person's turns in the model's last context said."""
    return [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]


def _exchange(webhook, queue, consumer, lambda_context, *notifications) -> None:
    for notification in notifications:
        assert post(webhook, notification, lambda_context) == 200
        assert queue.drain(consumer, lambda_context) == 0


def _user_changed(kind: str, *, at: int, **fields) -> dict:
    """Meta's system message for a changed number or user id (the shapes in pywa's fixtures)."""
    message = {"id": f"wamid.SYS{at}", "timestamp": str(at), "type": "system", "system": {}}
    old = {k: fields.pop(k) for k in ("from", "from_user_id") if k in fields}
    message.update(old)
    message["system"] = {"type": kind, "body": "User changed", **fields}
    return message


def _maya_moved_to_q(*, at: int) -> dict:
    """Meta's notification that Maya's number is now Q (user_changed_number from P)."""
    return meta_notification(
        messages=[
            _user_changed(
                "user_changed_number",
                at=at,
                **{"from": MAYA_PHONE.lstrip("+")},
                wa_id=MAYA_NEW_PHONE.lstrip("+"),
            )
        ]
    )


def test_a_recycled_number_with_a_new_bsuid_is_a_stranger_to_the_previous_owners_memory(
    webhook, queue, consumer, openai, graph, resources, lambda_context
):
    from memagent.lifecycle.rights import export

    store = consumer.consumer.agent.store
    # given phone P with BSUID X told the agent something no one else may see
    secret = "my HIV test came back positive"
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from(secret, phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
    )
    maya = person_key(AGENT, MAYA_BSUID)
    store.table.put_item(
        Item={
            "pk": maya,
            "sk": "FACT#hiv",
            "text": "Tested HIV positive",
            "at": "2026-11-01T00:00:00+00:00",
        }
    )
    # when P, now with BSUID Y (the number's new owner), writes
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hello, who is this?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60),
    )
    context = json.dumps(openai.calls()[-1])
    # then the new owner's context, recall and export by P hold nothing of X's
    assert _said(openai) == ["hello, who is this?"] and "HIV" not in context
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("what do you remember about me", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 90),
    )
    assert "HIV" not in graph.texts_to(MAYA_PHONE)[-1]
    assert "HIV" not in json.dumps(export(store, AGENT, MAYA_PHONE), default=str)
    # nor does "forget me", "yes" by the new owner touch X's memory
    for at, text in ((NOW + 120, "forget me"), (NOW + 150, "yes")):
        _exchange(
            webhook,
            queue,
            consumer,
            lambda_context,
            text_from(text, phone=MAYA_PHONE, bsuid=NEW_BSUID, at=at),
        )
    # and X's memory is intact, reached (and erasable) by X
    by_x = export(store, AGENT, MAYA_BSUID)
    assert by_x["person"] == maya and by_x["messages"][0]["text"] == secret
    assert [f["text"] for f in by_x["facts"]] == ["Tested HIV positive"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("It's me again", bsuid=MAYA_BSUID, at=NOW + 200),
    )
    assert _said(openai) == [secret, "It's me again"]


def test_after_user_changed_number_a_new_bsuid_on_the_old_phone_is_a_stranger(
    webhook, queue, consumer, openai, lambda_context
):
    # given Maya (P, X), who moves to phone Q (user_changed_number)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        _maya_moved_to_q(at=NOW + 30),
    )
    # when P's next owner writes, with their own BSUID, then with the phone alone
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hi, new phone who dis", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60),
    )
    # then they are a stranger
    assert _said(openai) == ["hi, new phone who dis"]
    # and Maya, from Q, is still herself (with her BSUID, and by the phone alone)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Which race again?", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 90),
    )
    assert _said(openai) == ["I'm Maya, training for Berlin", "Which race again?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And when?", phone=MAYA_NEW_PHONE, at=NOW + 120),
    )
    assert _said(openai)[0] == "I'm Maya, training for Berlin"


def test_a_phone_alone_after_user_changed_number_is_a_stranger_too(
    webhook, queue, consumer, openai, lambda_context
):
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya", phone=MAYA_PHONE, at=NOW),
        _maya_moved_to_q(at=NOW + 30),
        text_from("hello?", phone=MAYA_PHONE, at=NOW + 60),
    )
    assert _said(openai) == ["hello?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Still me", phone=MAYA_NEW_PHONE, at=NOW + 90),
    )
    assert _said(openai) == ["I'm Maya", "Still me"]


def test_a_new_bsuids_text_before_its_user_changed_user_id_in_one_post_has_the_memory(
    webhook, queue, consumer, openai, lambda_context
):
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm training for Berlin", bsuid=MAYA_BSUID, at=NOW),
    )
    # when one POST carries the new id's text first, then the change (Meta's order)
    change = _user_changed(
        "user_changed_user_id",
        at=NOW + 30,
        from_user_id=MAYA_BSUID,
        user_id=NEW_BSUID,
        previous_user_id=MAYA_BSUID,
    )
    text = text_from("Which race again?", bsuid=NEW_BSUID, at=NOW + 31)
    one_post = meta_notification(
        contacts=text["entry"][0]["changes"][0]["value"]["contacts"],
        messages=[*text["entry"][0]["changes"][0]["value"]["messages"], change],
    )
    _exchange(webhook, queue, consumer, lambda_context, one_post)
    # then the text's context holds her earlier memory, as does the new id's next message
    assert _said(openai) == ["I'm training for Berlin", "Which race again?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And the date?", bsuid=NEW_BSUID, at=NOW + 60),
    )
    assert _said(openai)[0] == "I'm training for Berlin" and len(_said(openai)) == 3


def test_a_new_bsuids_text_a_post_before_its_user_changed_user_id_ends_in_one_memory(
    webhook, queue, consumer, openai, resources, lambda_context
):
    from memagent.lifecycle.rights import forget

    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        # the new id's first text comes alone, in an earlier POST than the change
        text_from("new phone, same me", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 20),
        meta_notification(
            messages=[
                _user_changed(
                    "user_changed_user_id",
                    at=NOW + 30,
                    from_user_id=MAYA_BSUID,
                    user_id=NEW_BSUID,
                    previous_user_id=MAYA_BSUID,
                )
            ]
        ),
        text_from("Which race again?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60),
    )
    assert (
        _said(openai)[0] == "I'm training for Berlin" and _said(openai)[-1] == "Which race again?"
    )
    # and erasing her by the new id erases what it said in between too
    forget(consumer.consumer.agent.store, AGENT, NEW_BSUID)
    table = json.dumps(_table_items(resources), default=str)
    assert "new phone, same me" not in table and "Berlin" not in table


def test_a_contacts_entry_for_another_wa_id_does_not_give_its_bsuid(
    webhook, queue, consumer, resources, lambda_context
):
    from tests.integration.test_meta import SAM_PHONE

    # given Sam's message carrying only someone else's contact entry (phone and BSUID)
    notification = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)],
        messages=[meta_message("hi, Sam here", phone=SAM_PHONE, timestamp=NOW)],
    )
    _exchange(webhook, queue, consumer, lambda_context, notification)
    # then Sam's memory is his phone's; the other BSUID has none, nor reaches Sam's
    assert any(r.get("text") == "hi, Sam here" for r in memory_rows(resources, SAM_PHONE))
    assert memory_rows(resources, MAYA_BSUID) == []


def test_a_recycled_number_does_not_carry_over_the_previous_owners_memory_of_before_keyed_keys(
    webhook, queue, consumer, openai, graph, resources, lambda_context, monkeypatch
):
    from memagent.lifecycle.rights import export

    # given Maya (BSUID X, phone P) as a stack before keyed keys kept her
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        first = text_from(
            "my HIV test came back positive", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW
        )
        _exchange(webhook, queue, consumer, lambda_context, first)
    # when, after the upgrade, P's new owner (BSUID Y) writes first
    hello = text_from("hello, who is this?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60)
    _exchange(webhook, queue, consumer, lambda_context, hello)
    # then they are a stranger to Maya's memory, and so is an export by P
    assert _said(openai) == ["hello, who is this?"]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    by_phone = export(consumer.consumer.agent.store, AGENT, MAYA_PHONE, legacy_keys=True)
    assert "HIV" not in json.dumps(by_phone, default=str)
    # and Maya, by her BSUID, still finds hers
    back = text_from("still me", phone="+447700900999", bsuid=MAYA_BSUID, at=NOW + 120)
    _exchange(webhook, queue, consumer, lambda_context, back)
    assert _said(openai) == ["my HIV test came back positive", "still me"]
    old = {legacy_key(AGENT, MAYA_PHONE), legacy_key(AGENT, MAYA_BSUID)}
    assert [i for i in _table_items(resources) if i["pk"] in old] == []


def _preference(phone: str, bsuid: str | None, at: int) -> dict:
    """Meta's marketing preference (pywa's user_marketing_preferences.json shape): an event
    about the person that carries their identifiers but is not from them writing."""
    notification = meta_notification(
        contacts=[meta_contact(phone=phone, bsuid=bsuid)], field="user_preferences"
    )
    notification["entry"][0]["changes"][0]["value"]["user_preferences"] = [
        {
            "wa_id": phone.lstrip("+"),
            "detail": "User requested to stop marketing messages",
            "category": "marketing_messages",
            "value": "stop",
            "timestamp": at,
        }
    ]
    return notification


def test_a_number_recycled_after_its_owners_bsuid_came_later_is_a_stranger(
    webhook, queue, consumer, openai, lambda_context
):
    # given Maya, who wrote from her phone alone, then with the BSUID Meta gave her later
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("my HIV test came back positive", phone=MAYA_PHONE, at=NOW),
        text_from("I run on Sundays", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 30),
    )
    assert _said(openai) == ["my HIV test came back positive", "I run on Sundays"]
    # when her phone's next owner, with a BSUID of their own, writes
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hello, who is this?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60),
    )
    # then they are a stranger to her memory, and she (by her BSUID) still has it
    assert _said(openai) == ["hello, who is this?"]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("still me", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 90),
    )
    assert _said(openai)[0] == "my HIV test came back positive"


def test_a_person_kept_by_an_older_version_writing_from_a_new_phone_is_reached_by_it(
    webhook, queue, consumer, openai, resources, lambda_context
):
    # given Maya (phone P, BSUID X) as a version before `bsuid_key` kept her
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
    )
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": person_key(AGENT, MAYA_BSUID), "sk": "STATE"},
        UpdateExpression="REMOVE bsuid_key",
    )
    # when she writes from a new phone Q with her BSUID, then from Q alone
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("new phone", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 30),
        text_from("Which race again?", phone=MAYA_NEW_PHONE, at=NOW + 60),
    )
    # then Q reaches her memory
    assert _said(openai) == ["I'm Maya, training for Berlin", "new phone", "Which race again?"]
    # and when Q is recycled (its next owner has another BSUID), they are a stranger
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hello, who is this?", phone=MAYA_NEW_PHONE, bsuid=NEW_BSUID, at=NOW + 90),
    )
    assert _said(openai) == ["hello, who is this?"]


def test_a_preference_naming_identifiers_she_never_wrote_with_links_none_of_them(
    webhook, queue, consumer, openai, resources, lambda_context
):
    # given Maya, known by her phone alone, and Sam (phone and BSUID)
    from tests.integration.test_meta import SAM_BSUID, SAM_PHONE

    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya", phone=MAYA_PHONE, at=NOW),
        text_from("I'm Sam", phone=SAM_PHONE, bsuid=SAM_BSUID, at=NOW),
    )
    # when marketing preferences arrive naming her phone with a BSUID, and Sam's BSUID with
    # another phone (events about them, not messages from them)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        _preference(MAYA_PHONE, MAYA_BSUID, NOW + 30),
        _preference(MAYA_NEW_PHONE, SAM_BSUID, NOW + 30),
    )
    # then each is recorded for its person, and no identifier gets a record
    assert next(r for r in memory_rows(resources, MAYA_PHONE) if r["sk"] == "STATE")["marketing"]
    assert memory_rows(resources, MAYA_BSUID) == [] and memory_rows(resources, MAYA_NEW_PHONE) == []
    # and the BSUID and the other phone, writing, are strangers until Meta says otherwise
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hi", phone=MAYA_NEW_PHONE, at=NOW + 60),
    )
    assert _said(openai) == ["hi"]


def test_a_number_change_about_a_phone_that_never_wrote_records_nothing(
    webhook, queue, consumer, resources, lambda_context
):
    change = _maya_moved_to_q(at=NOW)
    _exchange(webhook, queue, consumer, lambda_context, change)
    assert _table_items(resources) == []


def test_after_user_changed_user_id_her_phone_still_reaches_her(
    webhook, queue, consumer, openai, graph, lambda_context
):
    # given Maya (phone P, BSUID X), whose BSUID Meta regenerates
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        meta_notification(
            messages=[
                _user_changed(
                    "user_changed_user_id",
                    at=NOW + 30,
                    from_user_id=MAYA_BSUID,
                    user_id=NEW_BSUID,
                    previous_user_id=MAYA_BSUID,
                )
            ]
        ),
    )
    # when she writes from her phone alone, then with the new BSUID
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Which race again?", phone=MAYA_PHONE, at=NOW + 60),
    )
    assert _said(openai) == ["I'm training for Berlin", "Which race again?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And the date?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 90),
    )
    # then both reach her memory, and the reply goes to her phone
    assert _said(openai) == ["I'm training for Berlin", "Which race again?", "And the date?"]
    assert graph.sent[-1]["to"] == MAYA_PHONE.lstrip("+")


def test_after_user_changed_number_her_old_phone_alone_is_a_stranger_though_it_was_linked(
    webhook, queue, consumer, openai, graph, lambda_context
):
    # given Maya, whose memory is her BSUID's (her phone links to it), moves to phone Q
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        meta_notification(
            messages=[
                _user_changed(
                    "user_changed_number",
                    at=NOW + 30,
                    **{"from": MAYA_PHONE.lstrip("+")},
                    from_user_id=MAYA_BSUID,  # her BSUID, as Meta names the sender
                    wa_id=MAYA_NEW_PHONE.lstrip("+"),
                )
            ]
        ),
    )
    # when the old phone writes alone (its next owner, before Meta gives them a BSUID)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hello?", phone=MAYA_PHONE, at=NOW + 60),
    )
    # then they are a stranger; Q alone is Maya, and so is her BSUID alone
    assert _said(openai) == ["hello?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Still me", phone=MAYA_NEW_PHONE, at=NOW + 90),
    )
    assert _said(openai) == ["I'm Maya, training for Berlin", "Still me"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And when?", bsuid=MAYA_BSUID, at=NOW + 120),
    )
    assert _said(openai) == ["I'm Maya, training for Berlin", "Still me", "And when?"]


def _decisions(out: io.StringIO) -> list[str]:
    """The decisions the consumer logged, in order (what an operator reads in the logs)."""
    lines = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    return [line["decision"] for line in lines if line.get("message") == "event handled"]


def test_a_number_change_from_before_her_erasure_leaves_her_new_conversation_where_it_is(
    webhook, queue, consumer, openai, lambda_context, monkeypatch
):
    from memagent.lifecycle.rights import forget
    from memagent.observability import logger

    # given Maya, forgotten, who then wrote again from her phone (a new conversation)
    _exchange(
        webhook, queue, consumer, lambda_context, text_from("I'm Maya", phone=MAYA_PHONE, at=NOW)
    )
    forget(
        consumer.consumer.agent.store, AGENT, MAYA_PHONE, at=datetime.fromtimestamp(NOW + 60, UTC)
    )
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Hi again, I'm training for Berlin", phone=MAYA_PHONE, at=NOW + 90),
    )
    # when Meta's number change, made before the erasure, arrives now
    change = _user_changed(
        "user_changed_number",
        at=NOW + 30,
        **{"from": MAYA_PHONE.lstrip("+")},
        wa_id=MAYA_NEW_PHONE.lstrip("+"),
    )
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    _exchange(webhook, queue, consumer, lambda_context, meta_notification(messages=[change]))
    # then the logs say it was skipped; her phone still reaches the new conversation, and the
    # other phone does not
    assert _decisions(out) == ["skipped"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Which race?", phone=MAYA_PHONE, at=NOW + 120),
    )
    assert _said(openai) == ["Hi again, I'm training for Berlin", "Which race?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("hello?", phone=MAYA_NEW_PHONE, at=NOW + 150),
    )
    assert _said(openai) == ["hello?"]


def test_a_message_under_her_old_bsuid_delivered_after_the_change_is_still_hers(
    webhook, queue, consumer, openai, lambda_context, monkeypatch
):
    from memagent.observability import logger

    # given Maya, by her BSUID, whose BSUID Meta regenerates (the logs say it was recorded)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm training for Berlin", bsuid=MAYA_BSUID, at=NOW),
    )
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        meta_notification(
            messages=[
                _user_changed(
                    "user_changed_user_id",
                    at=NOW + 30,
                    from_user_id=MAYA_BSUID,
                    user_id=NEW_BSUID,
                    previous_user_id=MAYA_BSUID,
                )
            ]
        ),
    )
    assert _decisions(out) == ["identity_changed"]
    # when a message she sent under the old BSUID before the change is delivered only now
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Which race again?", bsuid=MAYA_BSUID, at=NOW + 20),
    )
    # then it is answered with her memory, and so is her next message under the new BSUID
    assert _said(openai) == ["I'm training for Berlin", "Which race again?"]
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And the date?", bsuid=NEW_BSUID, at=NOW + 60),
    )
    assert _said(openai) == ["I'm training for Berlin", "Which race again?", "And the date?"]


def test_a_recycled_number_kept_phone_first_before_keyed_keys_is_a_stranger_to_that_memory(
    webhook, queue, consumer, openai, resources, lambda_context, monkeypatch
):
    from memagent.lifecycle.rights import export

    # given Maya as a stack before keyed keys kept her: her phone's memory, her BSUID linked
    # (that stack had no keys before its own to look up)
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        old_stack.setattr(memagent.turn.identity, "carry_over", lambda *_: False)
        _exchange(
            webhook,
            queue,
            consumer,
            lambda_context,
            text_from("my HIV test came back positive", phone=MAYA_PHONE, at=NOW),
            text_from("I run on Sundays", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 30),
        )
    # when, after the upgrade, her phone's new owner (another BSUID) writes first
    hello = text_from("hello, who is this?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 60)
    _exchange(webhook, queue, consumer, lambda_context, hello)
    # then they are a stranger to her memory, which stays where it was, for her BSUID
    assert _said(openai) == ["hello, who is this?"]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    by_phone = export(consumer.consumer.agent.store, AGENT, MAYA_PHONE, legacy_keys=True)
    assert "HIV" not in json.dumps(by_phone, default=str)
    assert any(i["pk"] == legacy_key(AGENT, MAYA_PHONE) for i in _table_items(resources))


def test_erasing_her_after_a_number_change_leaves_her_old_phones_new_owner_alone(
    webhook, queue, consumer, openai, lambda_context
):
    from memagent.lifecycle.rights import forget

    # given Maya (phone P, BSUID X) moved to phone Q, and P's next owner wrote from it
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        _maya_moved_to_q(at=NOW + 30),
        text_from("I'm Sam, new number", phone=MAYA_PHONE, at=NOW + 60),
    )
    # when Maya is forgotten (by her BSUID)
    forget(consumer.consumer.agent.store, AGENT, MAYA_BSUID)
    # then P's new owner keeps their memory
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Remember me?", phone=MAYA_PHONE, at=NOW + 90),
    )
    assert _said(openai) == ["I'm Sam, new number", "Remember me?"]


def test_a_late_message_from_before_her_erasure_links_nothing_back(
    webhook, queue, consumer, resources, lambda_context
):
    from memagent.lifecycle.rights import forget
    from tests.integration.test_lifecycle import only_the_mark

    # given Maya (phone and BSUID), forgotten
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Maya", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
    )
    forget(
        consumer.consumer.agent.store, AGENT, MAYA_BSUID, at=datetime.fromtimestamp(NOW + 60, UTC)
    )
    # when a message she sent before the erasure is delivered after it
    late = text_from("One more thing", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 30)
    _exchange(webhook, queue, consumer, lambda_context, late)
    # then each of her identifiers keeps only its erasure mark: no link comes back
    rows = memory_rows(resources, MAYA_BSUID) + memory_rows(resources, MAYA_PHONE)
    assert [only_the_mark(row) for row in rows] == [True, True]


def _follow_up_seat(resources, openai, graph, monkeypatch) -> tuple:
    """A Meta stack with follow-ups on: its consumer, its admin API and the consumer's settings."""
    from tests.conftest import load_function
    from tests.integration.test_follow_ups import _meta_consumer, follow_up_env
    from tests.integration.test_meta import ACCESS_TOKEN

    consumer, env = _meta_consumer(resources, openai, graph, monkeypatch)
    admin = load_function(
        "admin",
        {
            **{k: env[k] for k in ("TABLE_NAME", "AGENT_ID", "META_GRAPH_URL")},
            "PROVIDER": "meta",
            "META_ACCESS_TOKEN": ACCESS_TOKEN,
            **follow_up_env(resources, env["FOLLOW_UP_SCHEDULE_GROUP"]),
            "FOLLOW_UP_QUEUE_URL": env["QUEUE_URL"],
        },
        monkeypatch,
    )
    return consumer, admin, env


def _follow_up_group(admin, env, lambda_context, who: str) -> str:
    """An operator schedules a follow-up for `who`: the FIFO group it will wait in."""
    from tests.integration.test_follow_ups import tomorrow_at_nine
    from tests.integration.test_operator import call as admin_call
    from tests.integration.test_operator import person

    body = {"when": tomorrow_at_nine().strftime("%Y-%m-%dT%H:%M"), "about": "ask about the race"}
    status, _ = admin_call(
        admin, lambda_context, "POST", f"{person(who)}/follow-ups", body, **{"Idempotency-Key": "k"}
    )
    assert status == 200
    scheduler = boto3.client("scheduler")
    [schedule] = scheduler.list_schedules(GroupName=env["FOLLOW_UP_SCHEDULE_GROUP"])["Schedules"]
    target = scheduler.get_schedule(
        Name=schedule["Name"], GroupName=env["FOLLOW_UP_SCHEDULE_GROUP"]
    )["Target"]
    return json.loads(target["Input"])["MessageGroupId"]


@pytest.mark.parametrize("moved", ["wrote-from-it", "user-changed-number"])
def test_an_operators_follow_up_waits_in_the_group_of_the_phone_she_uses_now(
    moved, resources, openai, graph, webhook, queue, monkeypatch, lambda_context
):
    consumer, admin, env = _follow_up_seat(resources, openai, graph, monkeypatch)
    # given Maya (phone P, BSUID X), who now uses phone Q: she wrote from it, or Meta said so
    now_on_q = (
        text_from("new phone, same me", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 30)
        if moved == "wrote-from-it"
        else _maya_moved_to_q(at=NOW + 30)
    )
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Hi!", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        now_on_q,
    )
    # when an operator schedules a follow-up for her by her BSUID
    group = _follow_up_group(admin, env, lambda_context, MAYA_BSUID)
    # then it will wait in the FIFO group her messages from Q use, ordered with them
    assert group == person_key(AGENT, MAYA_NEW_PHONE)


def test_an_operators_follow_up_never_waits_in_the_group_of_her_old_phones_new_owner(
    resources, openai, graph, webhook, queue, monkeypatch, lambda_context
):
    consumer, admin, env = _follow_up_seat(resources, openai, graph, monkeypatch)
    # given Maya (phone P, BSUID X), whose phone P is now someone else's (their own BSUID),
    # and who writes by her BSUID alone
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Hi!", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        text_from("hello, who is this?", phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + 30),
        text_from("It's Maya", bsuid=MAYA_BSUID, at=NOW + 60),
    )
    # when an operator schedules a follow-up for her by her BSUID
    group = _follow_up_group(admin, env, lambda_context, MAYA_BSUID)
    # then it waits in the group of her own messages, not in P's (its new owner's)
    assert group == person_key(AGENT, MAYA_BSUID)


def test_a_number_change_onto_a_recycled_phone_never_makes_its_previous_owner_hers(
    webhook, queue, consumer, openai, lambda_context
):
    from memagent.lifecycle.rights import forget
    from tests.integration.test_meta import SAM_BSUID

    # given Sam, who wrote from phone Q alone, then with the BSUID Meta gave him later (his
    # memory lives under Q's key), and Maya (phone P, her BSUID)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Sam, I swim on Mondays", phone=MAYA_NEW_PHONE, at=NOW),
        text_from("still Sam", phone=MAYA_NEW_PHONE, bsuid=SAM_BSUID, at=NOW + 10),
        text_from("I'm Maya", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 20),
    )
    # when Q, recycled, becomes Maya's number (user_changed_number), and Maya is forgotten
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        _maya_moved_to_q(at=NOW + 30),
    )
    receipt = forget(consumer.consumer.agent.store, AGENT, MAYA_BSUID)
    # then Sam's memory was never hers to erase: writing by his BSUID, he is answered with it
    calls = len(openai.calls())
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("do you remember me?", bsuid=SAM_BSUID, at=NOW + 60),
    )
    assert len(openai.calls()) == calls + 1
    assert _said(openai) == ["I'm Sam, I swim on Mondays", "still Sam", "do you remember me?"]
    assert receipt.removed > 0  # and Maya was forgotten


def test_erasing_each_later_owner_of_a_recycled_phone_leaves_its_first_owners_memory(
    webhook, queue, consumer, openai, graph, resources, monkeypatch, lambda_context
):
    from tests.conftest import load_function
    from tests.integration.test_lifecycle import admin_event
    from tests.integration.test_meta import SAM_BSUID, SAM_PHONE

    admin = load_function(
        "admin", {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT}, monkeypatch
    )
    # given phone P: Sam's first (from P alone, then with the BSUID Meta gave him: his memory
    # lives under P's key), then Maya's (her BSUID), then Zoe's (hers), neither told by Meta
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Sam, I swim on Mondays", phone=SAM_PHONE, at=NOW),
        text_from("still Sam", phone=SAM_PHONE, bsuid=SAM_BSUID, at=NOW + 10),
        text_from("I'm Maya, training for Berlin", phone=SAM_PHONE, bsuid=MAYA_BSUID, at=NOW + 20),
        text_from("I'm Zoe, I climb", phone=SAM_PHONE, bsuid=NEW_BSUID, at=NOW + 30),
    )
    assert _said(openai) == ["I'm Zoe, I climb"]
    # when an operator erases Maya, then Zoe, each by her BSUID
    receipts = [
        admin.handler(admin_event("DELETE", bsuid), lambda_context)
        for bsuid in (MAYA_BSUID, NEW_BSUID)
    ]
    # then each receipt counts her own memory; P is taken from Zoe, its owner then, and was no
    # identifier of Maya's any more
    assert [r["statusCode"] for r in receipts] == [200, 200]
    maya, zoe = (json.loads(r["body"])["by_kind"] for r in receipts)
    assert maya["messages"] == zoe["messages"] == 2
    assert ("identifiers" in maya, zoe["identifiers"]) == (False, 1)
    # and a message Zoe sent from P alone before her erasure, delivered after it, is neither
    # answered nor kept
    sent = len(graph.sent)
    late = text_from("one more thing from Zoe", phone=SAM_PHONE, at=NOW + 40)
    _exchange(webhook, queue, consumer, lambda_context, late)
    assert len(graph.sent) == sent
    assert "one more thing from Zoe" not in json.dumps(_table_items(resources), default=str)
    # and Sam, writing by his BSUID, is answered with his memory
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("do you remember me?", bsuid=SAM_BSUID, at=NOW + 60),
    )
    assert _said(openai) == ["I'm Sam, I swim on Mondays", "still Sam", "do you remember me?"]


def test_a_person_kept_before_keyed_keys_who_changed_number_is_found_by_her_phone_then_bsuid(
    webhook, queue, consumer, openai, lambda_context, monkeypatch
):
    # given Maya as a stack before keyed keys kept her: her memory under phone P's key, her
    # BSUID X linked to it, then her move to phone Q (user_changed_number: P retired)
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        old_stack.setattr(memagent.turn.identity, "carry_over", lambda *_: False)
        _exchange(
            webhook,
            queue,
            consumer,
            lambda_context,
            text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, at=NOW),
            text_from("I run on Sundays", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 10),
            _maya_moved_to_q(at=NOW + 20),
        )
    # when, after the upgrade, she writes from Q alone, then from Q with her BSUID
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("Which race again?", phone=MAYA_NEW_PHONE, at=NOW + 30),
    )
    first = _said(openai)
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("And when?", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 40),
    )
    # then both times her memory is the context: it moved under Q's key, which her BSUID
    # reaches too
    earlier = ["I'm Maya, training for Berlin", "I run on Sundays"]
    assert first == [*earlier, "Which race again?"]
    assert _said(openai) == [*earlier, "Which race again?", "And when?"]


def test_a_person_kept_before_keyed_keys_is_found_when_dynamodb_serves_the_lookup_in_part(
    webhook, queue, consumer, openai, lambda_context, monkeypatch
):
    # given Maya (BSUID X, phone P) as a stack before keyed keys kept her
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        first = text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID)
        _exchange(webhook, queue, consumer, lambda_context, first)
    # and DynamoDB, throttled, reads only part of the next BatchGetItem: "If at least one of
    # the items is successfully processed, then BatchGetItem completes successfully, while
    # returning the keys of the unread items in UnprocessedKeys" (the first key here)
    client = consumer.consumer.agent.store._client
    real = client.batch_get_item

    def in_part(RequestItems, **kwargs):
        monkeypatch.setattr(client, "batch_get_item", real)  # the next one is served in full
        ((table, request),) = RequestItems.items()
        unread, *read = request["Keys"]
        assert read, "DynamoDB serves at least one key or refuses the request"
        response = real(RequestItems={table: {**request, "Keys": read}}, **kwargs)
        response["UnprocessedKeys"] = {table: {**request, "Keys": [unread]}}
        return response

    monkeypatch.setattr(client, "batch_get_item", in_part)
    # when, after the upgrade, she writes with her BSUID from a new phone Q
    again = text_from("Which race again?", phone=MAYA_NEW_PHONE, bsuid=MAYA_BSUID, at=NOW + 30)
    _exchange(webhook, queue, consumer, lambda_context, again)
    # then the lookup read the rest too: her memory is the context
    assert client.batch_get_item == real
    assert _said(openai) == ["I'm Maya, training for Berlin", "Which race again?"]


def test_an_operators_follow_up_for_a_person_kept_before_keyed_keys_waits_in_her_phones_group(
    resources, openai, graph, webhook, queue, monkeypatch, lambda_context
):
    consumer, admin, env = _follow_up_seat(resources, openai, graph, monkeypatch)
    # given Maya (phone P, BSUID X) as a stack before keyed keys kept her, who writes after
    # the upgrade from P alone (her memory moves under P's keyed key)
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        first = text_from("I'm Maya, training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID)
        _exchange(webhook, queue, consumer, lambda_context, first)
    again = text_from("Which race again?", phone=MAYA_PHONE, at=NOW + 30)
    _exchange(webhook, queue, consumer, lambda_context, again)
    assert _said(openai) == ["I'm Maya, training for Berlin", "Which race again?"]
    # when an operator schedules a follow-up for her by P
    group = _follow_up_group(admin, env, lambda_context, MAYA_PHONE)
    # then it waits in the FIFO group her messages from P use, never one named by a key
    # from before the upgrade
    assert group == person_key(AGENT, MAYA_PHONE)


def test_forgetting_her_takes_every_identifier_that_reached_her(
    webhook, queue, consumer, openai, lambda_context
):
    from memagent.lifecycle.rights import forget

    # given Maya (phone P, BSUID X), whose BSUID Meta regenerated (Y): three identifiers
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm training for Berlin", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW),
        meta_notification(
            messages=[
                _user_changed(
                    "user_changed_user_id",
                    at=NOW + 30,
                    from_user_id=MAYA_BSUID,
                    user_id=NEW_BSUID,
                    previous_user_id=MAYA_BSUID,
                )
            ]
        ),
    )
    # when she is forgotten by her phone
    receipt = forget(consumer.consumer.agent.store, AGENT, MAYA_PHONE)
    # then the receipt counts her two other identifiers, and whoever writes by any of the
    # three afterwards is a stranger to what she said
    assert receipt.by_kind["identifiers"] == 2
    later = int(datetime.now(UTC).timestamp()) + 2  # after the erasure
    for at, (phone, bsuid) in enumerate(
        [(MAYA_PHONE, None), (None, MAYA_BSUID), (None, NEW_BSUID)], start=later
    ):
        hello = text_from("Hi, who is this?", phone=phone, bsuid=bsuid, at=at)
        _exchange(webhook, queue, consumer, lambda_context, hello)
        assert _said(openai) == ["Hi, who is this?"]


def test_erasing_a_recycled_numbers_new_owner_leaves_its_previous_owners_memory_alone(
    webhook, queue, consumer, openai, lambda_context
):
    from memagent.lifecycle.rights import forget
    from tests.integration.test_meta import SAM_BSUID, SAM_PHONE

    # given Sam wrote from his phone P alone (his memory is under P's key), then with his BSUID
    _exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from("I'm Sam, I coach the under-12s", phone=SAM_PHONE, at=NOW),
        text_from("Training is on Thursdays", phone=SAM_PHONE, bsuid=SAM_BSUID, at=NOW + 10),
    )
    # and P, recycled, now belongs to Maya (a new BSUID on it), who wrote
    maya = text_from("Hi, I'm Maya, new number", phone=SAM_PHONE, bsuid=NEW_BSUID, at=NOW + 60)
    _exchange(webhook, queue, consumer, lambda_context, maya)
    assert _said(openai) == ["Hi, I'm Maya, new number"]
    # when Maya is forgotten (by her BSUID)
    receipt = forget(consumer.consumer.agent.store, AGENT, NEW_BSUID)
    # then P, which reached her, is taken from her: its next writer is a stranger to both
    assert receipt.by_kind["identifiers"] == 1
    later = int(datetime.now(UTC).timestamp()) + 2  # after the erasure
    again = text_from("Hello?", phone=SAM_PHONE, at=later)
    _exchange(webhook, queue, consumer, lambda_context, again)
    assert _said(openai) == ["Hello?"]
    # and Sam keeps his memory, reached by his BSUID
    sam = text_from("What day is training?", bsuid=SAM_BSUID, at=later + 1)
    _exchange(webhook, queue, consumer, lambda_context, sam)
    assert _said(openai) == [
        "I'm Sam, I coach the under-12s",
        "Training is on Thursdays",
        "What day is training?",
    ]


def test_a_late_ttl_expiry_keeps_the_bsuid_her_new_conversation_linked(
    webhook,
    queue,
    consumer,
    openai,
    resources,
    tap,
    ttl,
    compactor_env,
    monkeypatch,
    lambda_context,
):
    from devstack.lambda_harness import passes_filters, stream_filters
    from devstack.resources import load_template
    from tests.conftest import load_function

    compactor = load_function("compactor", compactor_env, monkeypatch)
    # given Maya wrote from her phone alone (Meta gave no BSUID then), then was silent past the
    # retention: DynamoDB's TTL deletes her state item, its stream record not handled yet
    private = text_from("my HIV test came back positive", phone=MAYA_PHONE, at=NOW - 400 * 86400)
    _exchange(webhook, queue, consumer, lambda_context, private)
    expiry = [r for r in _ttl_sweep(ttl, tap) if passes_filters(r, stream_filters(load_template()))]
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in expiry] == [person_key(AGENT, MAYA_PHONE)]
    # when she writes again from her phone (the turn runs the expiry itself), then with her
    # BSUID beside it (linked to her new conversation), and only then is the record handled
    new = int(datetime.now(UTC).timestamp()) + 2  # after everything the old memory holds
    hello = text_from("Hi! Is this the running club?", phone=MAYA_PHONE, at=new)
    both = text_from("It's Maya", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=new + 1)
    _exchange(webhook, queue, consumer, lambda_context, hello, both)
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    # then her BSUID alone still reaches the new conversation: her next message is answered
    # with it, and nothing of the old memory
    alone = text_from("Tuesdays suit me", bsuid=MAYA_BSUID, at=new + 2)
    _exchange(webhook, queue, consumer, lambda_context, alone)
    assert _said(openai) == ["Hi! Is this the running club?", "It's Maya", "Tuesdays suit me"]
    assert "HIV" not in json.dumps(_table_items(resources), default=str)
