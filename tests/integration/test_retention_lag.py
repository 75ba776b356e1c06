"""Retention on AWS's clock (issue 29): DynamoDB's TTL deletes an expired item late ("typically
within two days"; until then it "still show[s] up in reads"), so a person whose retention has
ended may write while their memory is still there: a recycled whasp number's new owner, most
of all. Through whasp's signed POST to the webhook handler, the event queue and the consumer
handler, and the compactor handler fed what the template's stream filter lets by; DynamoDB's TTL
is devstack.ttl (the `ttl` fixture), on a clock of its own."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from devstack.fake_openai import turns_of
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, whasp_message
from tests.integration.test_meta import Queue
from tests.integration.webhook_calls import post_signed, webhook_env

DAY = 86400
SAM = "+447700900456"


def _table(resources) -> list[dict]:
    return dynamodb_table(resources.table_name).scan(ConsistentRead=True)["Items"]


@pytest.fixture
def bucket(resources) -> str:
    """The transcript archive (ArchiveBucket), for the consumer and the compactor."""
    name = f"archive-{resources.table_name}".lower()
    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture
def pipeline(resources, consumer_env, bucket, monkeypatch, lambda_context):
    """writes(phone, text, at): whasp's POST of the message to the webhook handler, then the
    event queue drained into the consumer handler (30 days' retention), nothing left failed."""
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    settings = {"INACTIVE_RETENTION_DAYS": "30", "ARCHIVE_BUCKET": bucket}
    consumer = load_function("consumer", {**consumer_env, **settings}, monkeypatch)
    queue = Queue(resources)

    def writes(phone: str, text: str, at: datetime) -> None:
        stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        event = whasp_message(text, chat=phone, created_at=stamp)
        assert post_signed(webhook, event, lambda_context)[0] == 200
        assert queue.drain(consumer, lambda_context) == 0

    return writes


def test_the_ttl_stand_in_deletes_late_with_the_record_aws_writes(resources, tap, ttl):
    # given three items of the table: expired an hour ago, not yet expired, and a TTL that is no
    # Number (DynamoDB ignores it)
    table = dynamodb_table(resources.table_name)
    now = int(ttl.clock.now())
    for pk, expires in (("P#old", now - 3600), ("P#new", now + 3600), ("P#text", "soon")):
        table.put_item(Item={"pk": pk, "sk": "STATE", "expires_at": expires})
    tap.poll()
    # when the TTL runs with a lag of two hours, then the expired item is still read
    ttl.lag = 2 * 3600
    assert ttl.sweep() == 0
    assert "Item" in table.get_item(Key={"pk": "P#old", "sk": "STATE"}, ConsistentRead=True)
    # when an hour passes, then it is deleted, and only it; the stream's record of it is a
    # REMOVE by the DynamoDB service, dated when the TTL deleted it, as Lambda hands it over
    ttl.clock.advance(3600)
    assert ttl.sweep() == 1
    assert sorted(item["pk"] for item in table.scan()["Items"]) == ["P#new", "P#text"]
    [record] = tap.poll()
    assert record["eventName"] == "REMOVE"
    assert record["userIdentity"] == {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    assert now + 3600 <= record["dynamodb"]["ApproximateCreationDateTime"] <= ttl.clock.now()
    # and a delete by anyone else names no one
    table.delete_item(Key={"pk": "P#new", "sk": "STATE"})
    assert "userIdentity" not in tap.poll()[0]


def test_a_person_whose_retention_ended_before_the_ttl_deleted_them_gets_none_of_the_old_memory(
    pipeline, resources, compactor_env, whasp, openai, tap, ttl, monkeypatch, lambda_context
):
    from memagent.observability import logger

    then = datetime.now(UTC) - timedelta(days=31)
    compactor = load_function("compactor", compactor_env, monkeypatch)
    maya, sam = person_key(AGENT, MAYA), person_key(AGENT, SAM)
    # given Maya and Sam told the agent something private 31 days ago (30 days' retention):
    # both expired a day ago, and DynamoDB's TTL, two days behind, has deleted neither
    ttl.lag = 2 * DAY
    pipeline(MAYA, "my HIV test came back positive", then)
    pipeline(SAM, "my divorce papers came today", then)
    assert ttl.sweep() == 0
    assert "HIV" in json.dumps(_table(resources), default=str)
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    # when Maya's number's new owner writes (after the replies, stored as they were sent)
    now = datetime.now(UTC) + timedelta(seconds=1)
    pipeline(MAYA, "Hi! Is this the running club?", now)
    # then they are answered from a context without the old memory, which is erased, with the
    # audit line of the TTL's own expiry
    assert len(whasp.sent) == 3
    assert turns_of(openai.calls()[-1]) == [("user", "Hi! Is this the running club?")]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    assert "HIV" not in json.dumps(_table(resources), default=str)
    audits = [json.loads(line) for line in out.getvalue().splitlines() if '"audit"' in line]
    assert [(a["person"], a["caller"], a["outcome"]) for a in audits] == [
        (maya, "retention (dynamodb.amazonaws.com)", "done")
    ]
    # when the TTL comes, two days late, and the compactor gets what the filter lets by
    ttl.clock.advance(2 * DAY)
    assert ttl.sweep() == 1  # Sam's state: Maya's number's new owner renewed hers
    delivered = tap.matching()
    assert [r["dynamodb"]["Keys"]["pk"]["S"] for r in delivered] == [sam]
    assert compactor.handler({"Records": delivered}, lambda_context) == {"batchItemFailures": []}
    # then Sam is forgotten, and the new owner's conversation stands: their next message is
    # answered with it, and nothing older, in front of the model
    assert "divorce" not in json.dumps(_table(resources), default=str)
    pipeline(MAYA, "Great, Tuesdays suit me", now + timedelta(seconds=1))
    seen = [text for _, text in turns_of(openai.calls()[-1])]
    assert seen[0] == "Hi! Is this the running club?" and seen[-1] == "Great, Tuesdays suit me"
    assert len(seen) == 3
    assert [c for c in openai.calls()[2:] if "HIV" in json.dumps(c)] == []
    state = next(r for r in _table(resources) if r["pk"] == maya and r["sk"] == "STATE")
    assert int(state["expires_at"]) > (now + timedelta(days=29)).timestamp()


def test_no_write_renews_a_state_whose_retention_has_ended(pipeline, resources):
    from memagent.errors import ConcurrentUpdate
    from memagent.memory.types import Turn
    from memagent.store.memory_store import MemoryStore

    # given Maya's retention ended a day ago, her state not deleted yet
    now = datetime.now(UTC)
    pipeline(MAYA, "my HIV test came back positive", now - timedelta(days=31))
    store = MemoryStore(resources.table_name, retention=timedelta(days=30))
    pk = person_key(AGENT, MAYA)
    memory = store.load(pk)
    # when a turn that did not see it expire (it read a moment before) stores a message
    turn = Turn(memory.next_seq, "user", "Hi!", now, number="+15550100", event_id="evt_late")
    with pytest.raises(ConcurrentUpdate):
        store.remember_inbound(
            pk,
            previous=memory.state,
            turn=turn,
            event_time=now,
            compact=False,
            ledger_ttl=timedelta(days=30),
        )
    # then the write is refused (the turn retries from a fresh read, which expires it first):
    # her retention is not moved on, so the old memory cannot outlive it
    assert store.load(pk).state.expires_at < now


def test_a_state_item_deleted_by_anyone_but_the_ttl_passes_the_filter_and_is_no_expiry(
    pipeline, resources, compactor_env, openai, tap, monkeypatch, lambda_context
):
    from memagent.observability import logger

    now = datetime.now(UTC)
    compactor = load_function("compactor", compactor_env, monkeypatch)
    pk = person_key(AGENT, MAYA)
    pipeline(MAYA, "I start the new job on Monday", now)
    calls = len(openai.calls())
    tap.poll()  # her turn's own records
    # given someone deletes Maya's state item by hand (DeleteItem: not the TTL)
    dynamodb_table(resources.table_name).delete_item(Key={"pk": pk, "sk": "STATE"})
    # when Lambda hands the compactor what the template's filter lets by
    delivered = tap.matching()
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    # then the deletion is delivered (a filter on a DynamoDB stream can name only its dynamodb
    # key, not userIdentity), and the compactor neither forgets her nor folds anything
    assert [(r["eventName"], r["dynamodb"]["Keys"]["pk"]["S"]) for r in delivered] == [
        ("REMOVE", pk)
    ]
    assert "userIdentity" not in delivered[0]
    assert compactor.handler({"Records": delivered}, lambda_context) == {"batchItemFailures": []}
    rows = compactor.compactor.store.everything(pk)
    assert next(r["text"] for r in rows if r["sk"].startswith("MSG#")) == (
        "I start the new job on Monday"
    )
    assert not any("erased_at" in r for r in rows)
    assert '"audit"' not in out.getvalue()
    assert len(openai.calls()) == calls


def test_an_expired_memory_begun_after_an_erasure_is_expired_whole(pipeline, resources, openai):
    # given Maya was forgotten 40 days ago (her state keeps that erasure's mark), then began
    # again 31 days ago (30 days' retention): that memory expired a day ago, not deleted yet
    now = datetime.now(UTC)
    pk = person_key(AGENT, MAYA)
    table = dynamodb_table(resources.table_name)
    then = now - timedelta(days=31)
    for seq, role, text in ((1, "user", "my HIV test came back positive"), (2, "assistant", "ok")):
        at = (then + timedelta(seconds=seq)).isoformat()
        item = {"pk": pk, "sk": f"MSG#{seq:012d}", "seq": seq, "role": role, "text": text}
        table.put_item(Item={**item, "at": at})
    table.put_item(
        Item={
            "pk": pk,
            "sk": "STATE",
            "erased_at": (now - timedelta(days=40)).isoformat(),
            "last_seq": 2,
            "last_inbound_at": (then + timedelta(seconds=1)).isoformat(),
            "expires_at": int((then + timedelta(days=30)).timestamp()),
        }
    )
    # when her number's new owner writes
    pipeline(MAYA, "Hi! Is this the running club?", now + timedelta(seconds=1))
    # then nothing of that memory survives either: the expiry marks at the newest time the
    # expired memory holds, not at the erasure's older mark
    assert turns_of(openai.calls()[-1]) == [("user", "Hi! Is this the running club?")]
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_an_expired_persons_archived_transcripts_go_with_the_turns_expiry(
    pipeline, resources, compactor_env, bucket, openai, monkeypatch
):
    from devstack.fake_openai import offline_model
    from tests.conftest import seed_turns

    # given Maya's conversation of 31 days ago (30 days' retention), folded, its transcript
    # archived since (a fold runs after the turns it folds), her retention ended a day ago
    now = datetime.now(UTC)
    pk = person_key(AGENT, MAYA)
    settings = {"ARCHIVE_BUCKET": bucket}
    compactor = load_function("compactor", {**compactor_env, **settings}, monkeypatch).compactor
    texts = ["my HIV test came back positive" if i == 0 else f"turn {i}" for i in range(45)]
    seed_turns(compactor.store, MAYA, texts, start=now - timedelta(days=31, hours=1))
    openai.responder = lambda request: json.dumps({"summary": "Maya's news.", "facts": []})
    assert compactor.compact(pk) == "compacted"
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": int((now - timedelta(days=1)).timestamp())},
    )
    s3 = boto3.client("s3")
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 1
    # when her number's new owner writes
    openai.responder = offline_model
    pipeline(MAYA, "Hi! Is this the running club?", datetime.now(UTC) + timedelta(seconds=1))
    # then the archived transcript is gone with the rest of the old memory
    assert s3.list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_a_transcript_archived_by_a_fold_that_died_before_its_commit_goes_with_the_expiry(
    resources, compactor_env, bucket, openai, tap, ttl, monkeypatch, lambda_context
):
    from tests.conftest import seed_turns
    from tests.integration.faults import Died, crash_after

    # given Maya's conversation of 31 days ago (30 days' retention), whose fold archived its
    # transcript, then died before its commit (a timeout) and was never retried to the end: the
    # archived copy is newer than anything her memory holds
    now = datetime.now(UTC)
    pk = person_key(AGENT, MAYA)
    settings = {**compactor_env, "ARCHIVE_BUCKET": bucket}
    compactor = load_function("compactor", settings, monkeypatch)
    texts = ["my HIV test came back positive" if i == 0 else f"turn {i}" for i in range(45)]
    seed_turns(compactor.compactor.store, MAYA, texts, start=now - timedelta(days=31, hours=1))
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": int((now - timedelta(days=1)).timestamp())},
    )
    openai.responder = lambda request: json.dumps({"summary": "Maya's news.", "facts": []})
    crash_after(compactor.compactor.archive, "put", monkeypatch, fault=Died)
    with pytest.raises(Died):
        compactor.compactor.compact(pk)
    s3 = boto3.client("s3")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 1
    # when DynamoDB's TTL deletes her state item, and the compactor gets its stream record
    tap.poll()
    ttl.lag = 0
    assert ttl.sweep() == 1
    delivered = tap.matching()
    assert [r["eventName"] for r in delivered] == ["REMOVE"]
    assert compactor.handler({"Records": delivered}, lambda_context) == {"batchItemFailures": []}
    # then the archived transcript is gone with the rest of her memory
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_an_expired_memory_whose_last_message_no_reply_answered_is_expired_whole(
    pipeline, resources, openai
):
    # given Maya asked for a human 31 days ago (30 days' retention), then told them something
    # private, stored for the human and never answered: the newest thing her memory holds
    now = datetime.now(UTC)
    pk = person_key(AGENT, MAYA)
    table = dynamodb_table(resources.table_name)
    then = now - timedelta(days=31)
    said = [("user", "talk to a human"), ("assistant", "A person will answer you here soon.")]
    said.append(("user", "my HIV test came back positive"))
    for seq, (role, text) in enumerate(said, start=1):
        at = (then + timedelta(seconds=seq)).isoformat()
        item = {"pk": pk, "sk": f"MSG#{seq:012d}", "seq": seq, "role": role, "text": text}
        table.put_item(Item={**item, "at": at})
    table.put_item(
        Item={
            "pk": pk,
            "sk": "STATE",
            "last_seq": 3,
            "last_inbound_at": (then + timedelta(seconds=3)).isoformat(),
            "handoff_since": (then + timedelta(seconds=1)).isoformat(),
            "expires_at": int((then + timedelta(days=30)).timestamp()),
        }
    )
    # when her number's new owner writes
    pipeline(MAYA, "Hi! Is this the running club?", now + timedelta(seconds=1))
    # then that last message goes with the rest of the expired memory: the expiry's mark is
    # its time, and only what was written after the mark is the new conversation's
    assert turns_of(openai.calls()[-1]) == [("user", "Hi! Is this the running club?")]
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_a_message_the_new_owner_wrote_before_the_expiry_ran_is_answered_afresh(
    pipeline, resources, openai, whasp
):
    from memagent.store.memory_store import MemoryStore
    from tests.conftest import seed_turns

    # given Maya's conversation of 31 days ago (30 days' retention): her retention ended a day
    # ago, and DynamoDB's TTL has not deleted her yet
    now = datetime.now(UTC)
    store = MemoryStore(resources.table_name, retention=timedelta(days=30))
    said = ["my HIV test came back positive", "I'm so sorry."]
    seed_turns(store, MAYA, said, start=now - timedelta(days=31))
    # when her number's new owner's message, written a minute ago (it waited in the queue), is
    # handled: the turn expires the old memory first
    pipeline(MAYA, "Hi! Is this the running club?", now - timedelta(minutes=1))
    # then it is answered, as the person writing to us it is (the expiry's mark is the newest
    # time the old memory holds, not the moment it ran), from a context without the old memory
    assert len(whasp.sent) == 1
    assert turns_of(openai.calls()[-1]) == [("user", "Hi! Is this the running club?")]
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_an_operators_reply_to_the_new_conversation_is_sent_once_across_a_late_expiry(
    pipeline, resources, compactor_env, whasp, tap, ttl, monkeypatch, lambda_context
):
    from memagent.store.memory_store import MemoryStore
    from tests.conftest import seed_turns
    from tests.integration.test_operator import call, person

    compactor = load_function("compactor", compactor_env, monkeypatch)
    admin_env = {
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "PROVIDER": "whasp",
        "WHASP_API_URL": whasp.url,
        "WHASP_API_KEY": "whasp-test-key",
    }
    admin = load_function("admin", admin_env, monkeypatch)
    # given Maya's conversation of 31 days ago (30 days' retention), and DynamoDB's TTL has
    # deleted her state item; its stream record waits (Lambda retries it)
    now = datetime.now(UTC)
    said = ["my HIV test came back positive", "I'm so sorry."]
    seed_turns(MemoryStore(resources.table_name), MAYA, said, start=now - timedelta(days=31))
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": person_key(AGENT, MAYA), "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": int((now - timedelta(days=1)).timestamp())},
    )
    ttl.lag = 0
    assert ttl.sweep() == 1
    expiry = tap.matching()
    # and meanwhile her number's new owner writes, and an operator takes the chat and answers
    pipeline(MAYA, "Hi! Can a person help me?", now + timedelta(seconds=1))
    assert call(admin, lambda_context, "POST", f"{person()}/handoff")[0] == 200
    key = {"idempotency-key": "op-1"}
    words = {"text": "Hello, I'm Ana from the club"}
    assert call(admin, lambda_context, "POST", f"{person()}/messages", words, **key)[0] == 200
    # when the stream record is handled, then the operator's client retries the request (its
    # answer was lost) with the same key
    assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
    status, _ = call(admin, lambda_context, "POST", f"{person()}/messages", words, **key)
    # then the new owner got the operator's words once, and the conversation (the operator's
    # view, the model's context) holds them once: the expiry took nothing of the new
    # conversation, the record of that reply included
    assert status == 200
    assert whasp.texts_to(MAYA).count(words["text"]) == 1
    _, conversation = call(admin, lambda_context, "GET", f"{person()}/conversation")
    assert [m["text"] for m in conversation["messages"]].count(words["text"]) == 1
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_a_voice_note_of_the_new_conversation_kept_for_its_retry_outlives_a_late_expiry(
    resources, consumer_env, compactor_env, openai, whasp, tap, ttl, monkeypatch, lambda_context
):
    import time_machine

    from devstack.events import sqs_batch
    from memagent.store.memory_store import MemoryStore
    from tests.conftest import seed_turns
    from tests.integration.test_retries import kept, voice_note

    # 30 days' retention; the template's model retries: one in-process retry, then the queue's
    settings = {"INACTIVE_RETENTION_DAYS": "30", "OPENAI_MAX_RETRIES": "1"}
    consumer = load_function("consumer", {**consumer_env, **settings}, monkeypatch)
    compactor = load_function(
        "compactor", {**compactor_env, "MEDIA_BUCKET": consumer_env["MEDIA_BUCKET"]}, monkeypatch
    )
    # given Maya's conversation of 31 days ago (30 days' retention), and DynamoDB's TTL has
    # deleted her state item; its stream record waits (Lambda retries it)
    now = datetime.now(UTC)
    said = ["my HIV test came back positive", "I'm so sorry."]
    seed_turns(MemoryStore(resources.table_name), MAYA, said, start=now - timedelta(days=31))
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": person_key(AGENT, MAYA), "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": int((now - timedelta(days=1)).timestamp())},
    )
    ttl.lag = 0
    assert ttl.sweep() == 1
    expiry = tap.matching()
    with time_machine.travel(now + timedelta(minutes=1), tick=True):
        # when, a minute later, she sends a voice note whose transcription fails (the record
        # is retried, its file kept), and then the stream record is handled
        openai.transcriber = lambda audio: f"I ran {len(audio)} metres"
        openai.fail_next(2, status=500)
        batch = sqs_batch(voice_note(whasp, seconds_ago=1))
        assert consumer.handler(batch, lambda_context)["batchItemFailures"] != []
        assert len(kept(consumer_env)) == 1
        assert compactor.handler({"Records": expiry}, lambda_context) == {"batchItemFailures": []}
        # and whasp's media URL has expired by the retry
        whasp.expire_media()
        assert consumer.handler(batch, lambda_context) == {"batchItemFailures": []}
    # then the retry transcribed the kept copy: she is answered to what she said, from a
    # context without the old memory
    assert turns_of(openai.calls()[-1]) == [("user", "[voice note] I ran 2004 metres")]
    assert len(whasp.texts_to(MAYA)) == 1
    assert "HIV" not in json.dumps(_table(resources), default=str)


def test_a_folded_memory_the_ttl_deleted_the_state_of_leaves_no_summary_to_the_new_owner(
    pipeline, resources, compactor_env, openai, ttl, monkeypatch
):
    from devstack.fake_openai import offline_model
    from tests.conftest import seed_turns

    # given Maya's conversation of 31 days ago (30 days' retention), folded into a summary
    # after its last turn, and DynamoDB's TTL has deleted her state item (its stream record
    # not handled yet)
    now = datetime.now(UTC)
    pk = person_key(AGENT, MAYA)
    compactor = load_function("compactor", compactor_env, monkeypatch).compactor
    texts = [f"turn {i}" for i in range(45)]
    seed_turns(compactor.store, MAYA, texts, start=now - timedelta(days=31, hours=1))
    openai.responder = lambda request: json.dumps({"summary": "Maya's HIV news.", "facts": []})
    assert compactor.compact(pk) == "compacted"
    dynamodb_table(resources.table_name).update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": int((now - timedelta(days=1)).timestamp())},
    )
    ttl.lag = 0
    assert ttl.sweep() == 1
    # when her number's new owner writes
    openai.responder = offline_model
    pipeline(MAYA, "Hi! Is this the running club?", datetime.now(UTC) + timedelta(seconds=2))
    # then the summary went with the rest of the old memory: not in front of the model
    assert turns_of(openai.calls()[-1]) == [("user", "Hi! Is this the running club?")]
    assert "HIV" not in json.dumps(openai.calls()[-1])
    assert "HIV" not in json.dumps(_table(resources), default=str)
