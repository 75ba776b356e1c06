"""The agent's turn, through the consumer handler, with SQS FIFO events, moto's DynamoDB over
HTTP, and local OpenAI and whasp servers that the real clients talk to."""

from __future__ import annotations

import io
import json
import logging
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Key

from devstack.fake_openai import notes_of, turns_of
from devstack.lambda_harness import reported_failures as failures
from devstack.lambda_harness import retried
from memagent.memory.person import person_key
from tests.conftest import (
    AGENT,
    BUSINESS,
    MAYA,
    dynamodb_table,
    load_function,
    seed_turns,
    sqs_batch,
    sqs_record,
    whasp_message,
)
from tests.integration.faults import crash_after

SAM = "+447700900456"


def rows(table_name: str, phone: str = MAYA, prefix: str = "") -> list[dict[str, Any]]:
    table = dynamodb_table(table_name)
    condition = Key("pk").eq(person_key(AGENT, phone))
    if prefix:
        condition &= Key("sk").begins_with(prefix)
    return table.query(KeyConditionExpression=condition, ConsistentRead=True)["Items"]


def turns(table_name: str, phone: str = MAYA) -> list[tuple[str, str]]:
    return [(i["role"], i["text"]) for i in rows(table_name, phone, "MSG#")]


def state(table_name: str, phone: str = MAYA) -> dict[str, Any]:
    return next(i for i in rows(table_name, phone, "STATE"))


def at(minutes: float) -> str:
    base = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)
    return (base + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def message(text: str, minute: float = 0, **kwargs: Any) -> dict[str, Any]:
    return whasp_message(text, created_at=at(minute), **kwargs)


def media_message(
    kind: str,
    url: str,
    mime_type: str,
    minute: float = 0,
    *,
    size: int | None = None,
    message_id: str = "msg_v",
    **fields: Any,
) -> dict[str, Any]:
    """A message carrying media whasp hosts at `url` (audio, image, sticker), plus any `fields`
    of its own (a caption)."""
    media: dict[str, Any] = {"url": url, "mime_type": mime_type}
    if size is not None:
        media["size"] = size
    body = {"id": message_id, "type": kind, "timestamp": at(minute), "media": media, **fields}
    return message("", minute, message=body)


def attempt(consumer, batch: dict, lambda_context) -> list[str]:
    """Run a batch; return the ids Lambda would retry."""
    return retried(consumer.handler, batch, lambda_context)


# ------------------------------------------------------------------ a conversation


def test_three_turn_conversation_is_remembered_and_answered(
    consumer, resources, openai, whasp, lambda_context
):
    said = ["Hi, I'm Maya", "I start the new job on Monday!", "Any tips for the first week?"]
    for minute, text in enumerate(said):
        response = consumer.handler(sqs_batch(message(text, minute)), lambda_context)
        assert failures(response) == []

    # then each message and each reply is stored in order, with roles and the carrying number
    stored = rows(resources.table_name, prefix="MSG#")
    assert [i["role"] for i in stored] == ["user", "assistant"] * 3
    assert [i["text"] for i in stored if i["role"] == "user"] == said
    assert {i["number"] for i in stored} == {BUSINESS}
    assert [int(i["seq"]) for i in stored] == list(range(1, 7))
    # and three replies went out, from the number that carried the messages, to Maya
    assert [(s["from"], s["to"]) for s in whasp.sent] == [(BUSINESS, MAYA)] * 3
    replies = [i["text"] for i in stored if i["role"] == "assistant"]
    assert [s["text"] for s in whasp.sent] == replies
    # and the model saw store=false, the system prompt first, and the turns in order
    calls = openai.calls()
    assert len(calls) == 3
    assert all(call["store"] is False for call in calls)
    assert calls[-1]["instructions"].startswith("You are Coach, a warm running coach.")
    assert turns_of(calls[-1]) == [
        ("user", said[0]),
        ("assistant", replies[0]),
        ("user", said[1]),
        ("assistant", replies[1]),
        ("user", said[2]),
    ]


def test_notes_come_after_the_system_prompt(consumer, resources, openai, lambda_context):
    # given Maya has a summary and facts from earlier conversations
    store = consumer.consumer.agent.store
    pk = person_key(AGENT, MAYA)
    consumer.handler(sqs_batch(message("hello", 0)), lambda_context)
    from memagent.memory.types import Fact

    store.commit_compaction(
        pk,
        old_marker=0,
        new_marker=0,
        summary="Maya is training for her first 10k.",
        new_facts=[("k1", Fact("Has a dog called Biscuit", datetime.now(UTC)))],
    )
    # when she writes again
    consumer.handler(sqs_batch(message("How should I train this week?", 5)), lambda_context)
    instructions = openai.calls()[-1]["instructions"]
    prompt_at = instructions.index("You are Coach")
    assert prompt_at == 0
    assert instructions.index("Maya is training for her first 10k.") > prompt_at
    assert instructions.index("Has a dog called Biscuit") > prompt_at


def test_what_do_you_remember_goes_to_the_model_which_holds_the_fact_just_stored(
    consumer_env, compactor_env, openai, whasp, monkeypatch, lambda_context
):
    # given a stack that folds after two messages, and Maya telling the agent of an allergy
    small = {"COMPACT_THRESHOLD": "2", "COMPACT_KEEP": "1"}
    agent = load_function("consumer", {**consumer_env, **small}, monkeypatch)
    agent.handler(sqs_batch(message("I'm allergic to penicillin", 0)), lambda_context)
    # when she asks at once what the agent remembers
    agent.handler(sqs_batch(message("What do you remember about me?", 1)), lambda_context)
    # then the model answers it, her words in its input (no fixed "no notes yet")
    asked = openai.calls()[-1]
    assert ("user", "I'm allergic to penicillin") in turns_of(asked)
    assert turns_of(asked)[-1] == ("user", "What do you remember about me?")
    # and once compaction has stored the fact, asking again: the model's instructions hold it
    compactor = load_function("compactor", {**compactor_env, **small}, monkeypatch)
    assert compactor.compactor.compact(person_key(AGENT, MAYA)) == "compacted"
    agent.handler(sqs_batch(message("What do you remember about me?", 2)), lambda_context)
    instructions = openai.calls()[-1]["instructions"]
    assert "Allergic to penicillin" in instructions
    assert instructions.index("Allergic to penicillin") > instructions.index("You are Coach")
    assert "Allergic to penicillin" in whasp.texts_to(MAYA)[-1]  # the offline model's notes


# ------------------------------------------------------------------ context limits, end to end


def seed(consumer, phone: str, texts: list[str], start: datetime) -> None:
    seed_turns(consumer.consumer.agent.store, phone, texts, start=start)


def test_61_turns_give_the_model_60(consumer, openai, lambda_context):
    seed(consumer, MAYA, [f"turn {i}" for i in range(60)], datetime(2026, 11, 29, 8, tzinfo=UTC))
    consumer.handler(sqs_batch(message("the 61st", 120)), lambda_context)
    sent_input = [text for _, text in turns_of(openai.calls()[-1])]
    assert len(sent_input) == 60
    assert sent_input[-1] == "the 61st"
    assert sent_input[0] == "turn 1"  # the oldest one dropped


def test_over_12000_characters_drops_the_oldest_first(consumer, openai, lambda_context):
    seed(
        consumer,
        MAYA,
        [f"{i:02d}" + "x" * 998 for i in range(14)],
        datetime(2026, 11, 29, 8, tzinfo=UTC),
    )
    consumer.handler(sqs_batch(message("short question", 120)), lambda_context)
    sent_input = [text for _, text in turns_of(openai.calls()[-1])]
    assert sum(len(text) for text in sent_input) <= 12_000
    assert sent_input[-1] == "short question"
    assert [text[:2] for text in sent_input[:-1]] == [f"{i:02d}" for i in range(3, 14)]


@pytest.mark.parametrize(("gap", "line"), [(timedelta(days=1), True), (timedelta(hours=23), False)])
def test_days_line_from_exactly_one_day(consumer, openai, lambda_context, gap, line):
    first = datetime(2026, 11, 1, 9, tzinfo=UTC)
    consumer.handler(
        sqs_batch(whasp_message("see you", created_at=first.isoformat())), lambda_context
    )
    later = (first + gap).isoformat()
    consumer.handler(sqs_batch(whasp_message("back again", created_at=later)), lambda_context)
    assert ("1 day ago" in notes_of(openai.calls()[-1])) is line


# ------------------------------------------------------------------ duplicates


def test_same_event_twice_in_one_batch_is_one_turn(
    consumer, resources, openai, whasp, lambda_context
):
    event = message("only once please")
    response = consumer.handler(sqs_batch(event, event), lambda_context)
    assert failures(response) == []
    assert turns(resources.table_name) == [
        ("user", "only once please"),
        ("assistant", whasp.sent[0]["text"]),
    ]
    assert len(openai.calls()) == 1
    assert len(whasp.sent) == 1


@pytest.mark.parametrize("later", [timedelta(seconds=1), timedelta(minutes=10), timedelta(days=6)])
def test_redelivery_later_is_one_turn(consumer, resources, openai, whasp, lambda_context, later):
    # given an event answered once
    event = message("answer me once")
    consumer.handler(sqs_batch(event), lambda_context)
    # the ledger entry outlives SQS's 5-minute window by far (TTL is not applied by moto)
    [entry] = rows(resources.table_name, prefix="EVT#")
    assert entry["expires_at"] >= (datetime.now(UTC) + later + timedelta(days=1)).timestamp()
    # when whasp or SQS delivers it again, `later` afterwards
    consumer.handler({"Records": [sqs_record(event, receive_count=2)]}, lambda_context)
    # then nothing new is stored, asked or sent
    assert len(turns(resources.table_name)) == 2
    assert len(openai.calls()) == 1
    assert len(whasp.sent) == 1


# ------------------------------------------------------------------ crash injection


@pytest.mark.parametrize(
    ("target", "method", "model_calls"),
    [
        ("store", "remember_inbound", 1),  # the model had not been asked yet
        # the only crash that costs a second model call (`act`: every turn offers request_human)
        ("model", "act", 2),
        ("store", "remember_reply", 1),
        ("provider", "send_text", 1),
        ("store", "finish_event", 1),
    ],
)
def test_a_crash_at_any_step_still_ends_with_exactly_one_reply(
    consumer, resources, openai, whasp, lambda_context, monkeypatch, target, method, model_calls
):
    agent = consumer.consumer.agent
    crash_after(getattr(agent, target), method, monkeypatch)
    event = message("please answer exactly once")
    # when the first attempt crashes after `method`
    assert len(attempt(consumer, sqs_batch(event), lambda_context)) == 1
    # and the queue redelivers the event
    second = consumer.handler({"Records": [sqs_record(event, receive_count=2)]}, lambda_context)
    assert failures(second) == []
    # then exactly one reply reached the person, and no row is duplicated
    assert len(whasp.sent) == 1
    stored = turns(resources.table_name)
    assert [role for role, _ in stored] == ["user", "assistant"]
    assert stored[1][1] == whasp.sent[0]["text"]
    # a second model call happens only when the crash came before the reply was stored
    assert len(openai.calls()) == model_calls
    # and a third delivery is a no-op
    consumer.handler({"Records": [sqs_record(event, receive_count=3)]}, lambda_context)
    assert len(whasp.sent) == 1


# ------------------------------------------------------------------ order and groups


def test_a_failed_record_fails_the_rest_of_its_group_only(
    consumer, resources, openai, whasp, lambda_context
):
    # A1 is a voice note whose transcription fails (the first call and the client's 2 retries)
    openai.transcriber = lambda audio: "A1"
    url = whasp.add_media(b"O" * 100, "audio/ogg")
    voice = {"id": "m_a1", "type": "audio", "timestamp": at(0), "media": {"url": url}}
    a1, a2 = message("", 0, message=voice), message("A2", 1)
    b1 = message("B1", 0, chat=SAM)
    openai.fail_next(3, status=500)
    batch = sqs_batch(a1, a2, b1)
    response = consumer.handler(batch, lambda_context)
    ids = [r["messageId"] for r in batch["Records"]]
    assert failures(response) == ids[:2]
    # B1 was answered; A2 was never handled before A1
    assert whasp.texts_to(SAM) and not whasp.texts_to(MAYA)
    assert turns(resources.table_name) == []
    # when the queue redelivers A's messages, they are stored in order and answered (together)
    response = consumer.handler(sqs_batch(a1, a2), lambda_context)
    assert failures(response) == []
    assert [t for r, t in turns(resources.table_name) if r == "user"] == ["[voice note] A1", "A2"]
    assert len(whasp.texts_to(MAYA)) == 1


def test_fifty_messages_from_five_people_in_their_order(consumer, resources, whasp, lambda_context):
    people = [f"+4477009001{n:02d}" for n in range(5)]
    events = [message(f"{p[-2:]}-{i}", i, chat=p) for i in range(10) for p in people]
    for start in range(0, 50, 10):  # interleaved across batches of 10
        assert (
            failures(consumer.handler(sqs_batch(*events[start : start + 10]), lambda_context)) == []
        )
    for phone in people:
        said = [t for r, t in turns(resources.table_name, phone) if r == "user"]
        assert said == [f"{phone[-2:]}-{i}" for i in range(10)]
        # each batch held two consecutive messages of each person: one reply to each pair
        assert len(whasp.texts_to(phone)) == 5


# ------------------------------------------------------------------ media


def test_voice_note_is_transcribed_and_stored_as_text(
    consumer, resources, openai, whasp, lambda_context
):
    openai.transcriber = lambda audio: f"I ran {len(audio)} metres today"
    url = whasp.add_media(b"O" * 1234, "audio/ogg")
    event = media_message("audio", url, "audio/ogg", size=1234)
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    assert turns(resources.table_name)[0] == ("user", "[voice note] I ran 1234 metres today")
    [transcription] = openai.calls("/v1/audio/transcriptions")
    assert transcription["model"] == "gpt-transcribe"  # the default


def test_image_with_caption_and_sticker(consumer, resources, openai, whasp, lambda_context):
    openai.responder = lambda request: (
        "A running shoe on a track." if "input_image" in json.dumps(request["input"]) else "Nice!"
    )
    url = whasp.add_media(b"\x89PNG....", "image/png")
    photo = media_message(
        "image", url, "image/png", 0, size=8, message_id="m1", caption="my new shoes"
    )
    sticker = media_message("sticker", url, "image/webp", 1, size=8, message_id="m2")
    assert failures(consumer.handler(sqs_batch(photo, sticker), lambda_context)) == []
    said = [t for r, t in turns(resources.table_name) if r == "user"]
    assert said == ["[photo: A running shoe on a track.] my new shoes", "[sent a sticker]"]
    assert all(call["store"] is False for call in openai.calls())
    assert len(whasp.sent) == 1  # sent together: one answer to both


# ------------------------------------------------------------------ whasp answers


def test_whasp_409_records_the_opt_out_without_retry(consumer, resources, whasp, lambda_context):
    whasp.opted_out.add(MAYA)
    response = consumer.handler(sqs_batch(message("hello")), lambda_context)
    assert failures(response) == []
    assert whasp.sent == []
    assert state(resources.table_name)["opted_out"] is True
    assert len([r for r in whasp.requests if r["path"] == "/v1/messages"]) == 1


def test_whasp_500_then_201_sends_once_with_the_same_key(consumer, whasp, lambda_context):
    whasp.fail_next(1, status=500)
    event = message("hello")
    response = consumer.handler(sqs_batch(event), lambda_context)
    assert failures(response) == []
    sends = [r for r in whasp.requests if r["path"] == "/v1/messages"]
    assert len(sends) == 2
    assert {r["headers"]["idempotency-key"] for r in sends} == {f"reply:{event['id']}:0"}
    assert len(whasp.sent) == 1


def test_whasp_400_parks_the_reply_visibly(consumer, resources, whasp, lambda_context, capsys):
    whasp.reject_next(1, status=400)
    response = consumer.handler(sqs_batch(message("hello")), lambda_context)
    assert failures(response) == []  # not retried: it cannot succeed
    [entry] = rows(resources.table_name, prefix="EVT#")
    assert (entry["status"], entry["http_status"]) == ("parked", 400)
    assert '"ReplyParked"' in capsys.readouterr().out  # the metric the ReplyParked alarm watches


def test_malformed_event_is_parked_on_the_dead_letter_queue(consumer, resources, lambda_context):
    bad = {"Records": [sqs_record(message("x"))]}
    bad["Records"][0]["body"] = '{"id": "evt_bad", "type": "message.received", "data": {}}'
    response = consumer.handler(bad, lambda_context)
    assert failures(response) == []
    parked = boto3.client("sqs").receive_message(
        QueueUrl=resources.queue_urls["EventDeadLetterQueue"], MessageAttributeNames=["All"]
    )["Messages"]
    assert len(parked) == 1
    assert "created_at" in parked[0]["MessageAttributes"]["reason"]["StringValue"]


# ------------------------------------------------------------------ compaction flag, reads, logs


def test_compaction_flag_is_set_exactly_when_40_are_pending(consumer, resources, lambda_context):
    flags = []
    for minute in range(21):  # 21 turns = 42 messages
        consumer.handler(sqs_batch(message(f"m{minute}", minute)), lambda_context)
        current = state(resources.table_name)
        flags.append((int(current["last_seq"]), current["compaction_due"]))
    first_flagged = next(seq for seq, flag in flags if flag)
    assert first_flagged == 40
    assert all(flag is False for seq, flag in flags if seq < 40)


def test_one_query_per_turn_reads_memory(consumer, lambda_context):
    consumer.handler(sqs_batch(message("first", 0)), lambda_context)
    calls: list[str] = []
    client = consumer.consumer.agent.store._client
    client.meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
    )
    consumer.handler(sqs_batch(message("second", 1)), lambda_context)
    assert calls.count("Query") == 1
    assert "Scan" not in calls and "GetItem" not in calls


def test_logs_of_a_whole_turn_hold_no_text_and_no_phone(consumer, whasp, lambda_context, caplog):
    secret_text = "my secret diagnosis is xyzzy"
    out = io.StringIO()
    with redirect_stdout(out), caplog.at_level(logging.INFO):  # Lambda's POWERTOOLS_LOG_LEVEL
        consumer.handler(sqs_batch(message(secret_text)), lambda_context)
    logs = out.getvalue() + caplog.text
    assert "event handled" in logs  # we did capture the turn's logs
    reply = whasp.sent[0]["text"]
    for private in (secret_text, "xyzzy", MAYA, MAYA.lstrip("+"), BUSINESS, reply):
        assert private not in logs


def test_a_turn_the_model_refuses_gets_one_fallback_reply(consumer, openai, whasp, lambda_context):
    openai.fail_next(1, status=400)  # e.g. a content-policy refusal: retrying cannot help
    response = consumer.handler(sqs_batch(message("something the model refuses")), lambda_context)
    assert failures(response) == []
    assert len(whasp.sent) == 1
    from memagent.turn.replies import built_in

    assert whasp.sent[0]["text"] == built_in().text("fallback", "en")


def test_a_photo_the_model_cannot_read_becomes_a_note(
    consumer, resources, openai, whasp, lambda_context
):
    url = whasp.add_media(b"HEIC....", "image/heic")
    photo = media_message("image", url, "image/heic", 0, size=8, message_id="m1", caption="look")
    openai.fail_next(1, status=400)  # the image description is refused
    assert failures(consumer.handler(sqs_batch(photo), lambda_context)) == []
    assert turns(resources.table_name)[0] == (
        "user",
        "[sent a photo that could not be opened] look",
    )
    assert len(whasp.sent) == 1


def test_records_are_deferred_when_the_invocation_runs_out_of_time(
    consumer_env, monkeypatch, whasp, lambda_context
):
    consumer = load_function(
        "consumer", {**consumer_env, "RECORD_TIME_BUDGET_SECONDS": "120"}, monkeypatch
    )
    lambda_context.get_remaining_time_in_millis = lambda: 30_000  # 30 s left < 120 s budget
    batch = sqs_batch(message("later please"))
    # every record deferred: all reported failed (not raised), so each is retried soon
    response = consumer.handler(batch, lambda_context)
    assert failures(response) == [r["messageId"] for r in batch["Records"]]
    assert whasp.sent == []


def _named(caplog) -> list[tuple[Any, ...]]:
    """The function's log lines naming a failed dependency: (level, dependency, status, error)."""
    return [
        (r.levelname, r.dependency, r.status, r.error, r.records)
        for r in caplog.records
        if hasattr(r, "dependency")
    ]


def test_a_model_that_keeps_failing_is_named_in_the_retry_log_line(
    consumer, openai, whasp, lambda_context, caplog
):
    # given a model server answering 500 to every attempt the client makes
    openai.fail_next(20, status=500)
    # when the consumer handles a message
    batch = sqs_batch(message("my secret plans"))
    with caplog.at_level(logging.INFO):
        response = consumer.handler(batch, lambda_context)
    # then the record is retried, and the function's log names the model, the status and the
    # error's class (never the message text)
    assert failures(response) == [batch["Records"][0]["messageId"]]
    assert _named(caplog) == [("WARNING", "model", 500, "InternalServerError", 1)]
    assert "my secret plans" not in caplog.text
    assert not whasp.sent
