"""One reply to a burst (issue 15), through the consumer handler with real-shaped SQS FIFO
batches, moto's DynamoDB over HTTP, and the local OpenAI and whasp stand-ins.

A burst is one person's consecutive messages in one batch: they are all stored, in order, and
answered once, after the last, with all of them in the context."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.fake_openai import notes_of, turns_of
from memagent.memory.person import person_key
from tests.conftest import AGENT, BUSINESS, MAYA, load_function, sqs_batch, sqs_record
from tests.integration.faults import Crash, Died, crash_after
from tests.integration.test_consumer import (
    SAM,
    at,
    attempt,
    failures,
    media_message,
    message,
    rows,
    turns,
)
from tests.integration.test_lifecycle import only_the_mark


def said(table_name: str, phone: str = MAYA) -> list[str]:
    return [text for role, text in turns(table_name, phone) if role == "user"]


def ledger(table_name: str, phone: str = MAYA) -> dict[str, dict[str, Any]]:
    """The person's ledger entries, by event id."""
    return {i["event_id"]: i for i in rows(table_name, phone, "EVT#") if "event_id" in i}


def sends(whasp, phone: str = MAYA) -> list[dict[str, Any]]:
    """Every send request for `phone` (repeats included), in order."""
    return [
        r
        for r in whasp.requests
        if r["path"] == "/v1/messages" and (r["json"] or {}).get("to") == phone
    ]


def model_inputs(openai) -> list[list[tuple[str, str]]]:
    return [turns_of(call) for call in openai.calls()]


# ------------------------------------------------------------------ the burst


def test_a_burst_is_stored_in_order_and_answered_once_another_person_separately(
    consumer, resources, openai, whasp, lambda_context
):
    lines = ["hey", "so about tomorrow", "I can't make it at 9, can we do 10?"]
    a = [message(text, minute / 10) for minute, text in enumerate(lines)]
    b1 = message("Ran 5k today!", 0, chat=SAM)
    # when one batch holds Maya's three lines and then Sam's message
    response = consumer.handler(sqs_batch(*a, b1), lambda_context)
    assert failures(response) == []
    # then Maya's three messages are stored in order, followed by one reply
    stored = turns(resources.table_name)
    assert [t for r, t in stored if r == "user"] == lines
    assert [r for r, _ in stored] == ["user", "user", "user", "assistant"]
    # and one model call answered her, its input ending with all three lines
    inputs = model_inputs(openai)
    assert len(inputs) == 2
    maya_input = next(i for i in inputs if i[-1][1] == lines[-1])
    assert maya_input[-3:] == [("user", text) for text in lines]
    # and one reply reached Maya, the stored one, keyed by the burst's last event
    assert whasp.texts_to(MAYA) == [stored[-1][1]]
    assert [r["headers"]["idempotency-key"] for r in sends(whasp)] == [f"reply:{a[-1]['id']}:0"]
    # and Sam got his own reply
    assert len(whasp.texts_to(SAM)) == 1
    # and every one of Maya's ledger entries names the reply that answered it
    entries = ledger(resources.table_name)
    reply_seq = int(rows(resources.table_name, prefix="MSG#")[-1]["seq"])
    for event in a:
        entry = entries[event["id"]]
        assert entry["answered_by"] == a[-1]["id"]
        assert int(entry["reply_seq"]) == reply_seq
    assert [entries[e["id"]]["status"] for e in a] == ["answered", "answered", "sent"]
    # and nothing waits any more
    state = rows(resources.table_name, prefix="STATE")[0]
    assert "awaiting" not in state


def test_coalesce_bursts_false_answers_each_message(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "COALESCE_BURSTS": "false"}, monkeypatch)
    a = [message(f"line {n}", n) for n in range(3)]
    assert failures(consumer.handler(sqs_batch(*a), lambda_context)) == []
    assert [r for r, _ in turns(resources.table_name)] == ["user", "assistant"] * 3
    assert len(openai.calls()) == 3
    assert len(whasp.texts_to(MAYA)) == 3


def test_messages_in_separate_batches_are_answered_separately(
    consumer, resources, openai, whasp, lambda_context
):
    # the burst is what waited in the queue together, not a guess about timing
    for n in range(2):
        consumer.handler(sqs_batch(message(f"line {n}", n / 10)), lambda_context)
    assert len(whasp.texts_to(MAYA)) == 2


def test_a_voice_note_inside_a_burst_is_transcribed_and_joins_it(
    consumer, resources, openai, whasp, lambda_context
):
    openai.transcriber = lambda audio: "running late, sorry"
    url = whasp.add_media(b"O" * 321, "audio/ogg")
    voice = media_message("audio", url, "audio/ogg", 1, size=321)
    batch = sqs_batch(message("hi", 0), voice, message("see you at 10?", 2))
    assert failures(consumer.handler(batch, lambda_context)) == []
    lines = ["hi", "[voice note] running late, sorry", "see you at 10?"]
    assert said(resources.table_name) == lines
    [reply_input] = model_inputs(openai)
    assert reply_input[-3:] == [("user", text) for text in lines]
    assert len(openai.calls("/v1/audio/transcriptions")) == 1
    assert len(whasp.texts_to(MAYA)) == 1


def test_a_repeat_ending_the_batch_still_answers_the_new_message_before_it(
    consumer, resources, openai, whasp, lambda_context
):
    # given a message answered long ago, that whasp posts again after a new one
    old = message("old news", 0)
    consumer.handler(sqs_batch(old), lambda_context)
    new = message("new news", 5)
    # when the batch holds the new message, then the repeat
    batch = {"Records": [sqs_record(new), sqs_record(old, receive_count=1)]}
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then the new one is answered once and the old one not again
    assert said(resources.table_name) == ["old news", "new news"]
    assert len(whasp.texts_to(MAYA)) == 2
    assert len(openai.calls()) == 2


# ------------------------------------------------------------------ keywords inside a burst


@pytest.mark.parametrize(("third_minute", "lifted"), [(3, True), (1, False)])
def test_stop_inside_a_burst_sends_nothing_after_it(
    consumer, resources, openai, whasp, lambda_context, third_minute, lifted
):
    # given [A1, STOP, A3] and whasp's opt-out event after the STOP; A3 written after the
    # STOP, or before it (events arrive out of order)
    a1, stop = message("can we move it?", 0), message("STOP", 2)
    a3 = message("sorry, wrong chat, still here", third_minute)
    opted_out = {
        "id": "evt_opted_out_1",
        "type": "chat.opted_out",
        "created_at": at(2.5),
        "data": {"number": BUSINESS, "chat": MAYA},
    }
    batch = sqs_batch(a1, stop, opted_out, a3)
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then all three are remembered, in order
    assert said(resources.table_name) == ["can we move it?", "STOP", a3["data"]["message"]["text"]]
    state = rows(resources.table_name, prefix="STATE")[0]
    entries = ledger(resources.table_name)
    # and A1 is never answered: the STOP came after it
    assert entries[a1["id"]]["status"] == "opted_out"
    if lifted:
        # A3 came after the STOP: it lifts the opt-out and gets the only reply
        assert state["opted_out"] is False
        assert len(whasp.texts_to(MAYA)) == 1
        [reply_input] = model_inputs(openai)
        assert reply_input[-1] == ("user", a3["data"]["message"]["text"])
        assert entries[a3["id"]]["status"] == "sent"
    else:
        # A3 was written before the STOP: kept, never answered, and the opt-out stands
        assert state["opted_out"] is True
        assert whasp.sent == [] and openai.calls() == []
        assert entries[a3["id"]]["status"] == "opted_out"


def test_a_data_request_inside_a_burst_is_answered_as_when_sent_alone(
    consumer, resources, openai, whasp, lambda_context
):
    batch = sqs_batch(message("hello", 0), message("Send me my data", 1), message("ok", 2))
    assert failures(consumer.handler(batch, lambda_context)) == []
    replies = whasp.texts_to(MAYA)
    assert len(replies) == 3
    assert "talk to a person" in replies[1] and '"forget me"' in replies[1]
    assert len(openai.calls()) == 2  # the data request's answer is a fixed one, not the model's
    assert [r for r, _ in turns(resources.table_name)] == ["user", "assistant"] * 3


def test_forget_me_then_yes_inside_one_batch_erases(
    consumer, resources, openai, whasp, lambda_context
):
    batch = sqs_batch(message("hello", 0), message("forget me", 1), message("yes", 2))
    assert failures(consumer.handler(batch, lambda_context)) == []
    from memagent.turn.replies import built_in

    replies = whasp.texts_to(MAYA)
    assert replies[1:] == [built_in().text("forget_question"), built_in().text("forgotten")]
    assert len(replies) == 3
    [mark] = rows(resources.table_name)
    assert only_the_mark(mark)


def test_anything_but_yes_first_keeps_the_memory_even_in_a_burst(
    consumer, resources, openai, whasp, lambda_context
):
    consumer.handler(sqs_batch(message("forget me", 0)), lambda_context)
    # when the next batch is ["no, wait", "yes"]: the first answer to the question is not yes
    batch = sqs_batch(message("no, wait", 1), message("yes", 2))
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then nothing is erased, and the two lines are one burst with one (model) reply
    assert said(resources.table_name) == ["forget me", "no, wait", "yes"]
    assert len(whasp.texts_to(MAYA)) == 2
    assert len(openai.calls()) == 1


# ------------------------------------------------------------------ crashes and redelivery


STEPS = [
    ("store", "remember_inbound", 1),
    ("store", "remember_inbound", 2),
    ("store", "remember_inbound", 3),
    ("model", "act", 1),  # the model's round (request_human offered on every turn)
    ("store", "remember_reply", 1),
    ("provider", "send_text", 1),
    ("store", "finish_event", 1),
]


def run(consumer, records: list[dict], lambda_context) -> list[str]:
    """One invocation; the message ids the queue keeps (all of them if the invocation died)."""
    try:
        return attempt(consumer, {"Records": records}, lambda_context)
    except Died:
        return [r["messageId"] for r in records]


@pytest.mark.parametrize("fault", [Crash, Died], ids=["record_fails", "invocation_dies"])
@pytest.mark.parametrize(("target", "method", "nth"), STEPS, ids=lambda v: str(v))
def test_a_crash_anywhere_in_a_burst_ends_with_each_message_covered_by_one_sent_reply(
    consumer, resources, openai, whasp, lambda_context, monkeypatch, target, method, nth, fault
):
    """The crash matrix for bursts: after the crash, the queue redelivers what it kept, as one
    batch or split across two at any point (SQS may split a redelivered burst)."""
    agent = consumer.consumer.agent
    for split in range(3):
        phone = f"+44770090{nth}{split}{len(method):02d}"
        burst = [message(f"line {n} of {phone}", n / 10, chat=phone) for n in range(3)]
        records = [sqs_record(e) for e in burst]
        calls_before = len(openai.calls())
        crash_after(getattr(agent, target), method, monkeypatch, nth=nth, fault=fault)
        kept = run(consumer, records, lambda_context)
        assert kept, "the crash must fail something"
        # the queue redelivers what it kept, in order, possibly in two batches
        again = [sqs_record(burst[i], receive_count=2) for i, r in enumerate(records)]
        again = [again[i] for i, r in enumerate(records) if r["messageId"] in kept]
        for batch in [again[: split + 1], again[split + 1 :]] if split < len(again) else [again]:
            if batch:
                assert run(consumer, batch, lambda_context) == []
        # then every message is stored once, in order
        texts = [e["data"]["message"]["text"] for e in burst]
        assert said(resources.table_name, phone) == texts
        # and each message's entry names exactly one reply, and that reply was sent
        entries = ledger(resources.table_name, phone)
        answerers = {entries[e["id"]]["answered_by"] for e in burst}
        assert all(entries[a]["status"] == "sent" for a in answerers)
        sent = whasp.texts_to(phone)
        assert len(sent) == len(answerers)
        keys = {r["headers"]["idempotency-key"] for r in sends(whasp, phone)}
        assert keys == {f"reply:{a}:0" for a in answerers}
        # and the stored replies are the ones sent, each once
        replies = [t for r, t in turns(resources.table_name, phone) if r == "assistant"]
        assert replies == sent
        # and a model call was repeated only if the crash came between the call and its storing
        extra = 1 if method == "act" else 0
        assert len(openai.calls()) - calls_before == len(answerers) + extra
        # and one more late redelivery of everything changes nothing
        late = [sqs_record(e, receive_count=3) for e in burst]
        assert run(consumer, late, lambda_context) == []
        assert whasp.texts_to(phone) == sent


@pytest.mark.parametrize("subset", [(1, 2), (1,), (2,)], ids=["A2+A3", "A2", "A3"])
@pytest.mark.parametrize("method", ["remember_reply", "send_text"])
def test_redelivery_of_the_tail_after_the_reply_was_stored_resends_it(
    consumer, resources, openai, whasp, lambda_context, monkeypatch, method, subset
):
    # given a burst whose reply was stored (and maybe sent) before the process died
    agent = consumer.consumer.agent
    target = agent.store if method == "remember_reply" else agent.provider
    crash_after(target, method, monkeypatch, nth=1, fault=Died)
    a = [message(f"line {n}", n / 10) for n in range(3)]
    run(consumer, [sqs_record(e) for e in a], lambda_context)
    stored_before = rows(resources.table_name)
    reply = [t for r, t in turns(resources.table_name) if r == "assistant"]
    assert len(reply) == 1 and len(openai.calls()) == 1
    # when only some of the burst come back: [A2, A3], or either alone
    again = [sqs_record(a[i], receive_count=2) for i in subset]
    assert run(consumer, again, lambda_context) == []
    # then the same reply went out under the same Idempotency-Key, with no new model call
    assert whasp.texts_to(MAYA) == reply
    assert {r["headers"]["idempotency-key"] for r in sends(whasp)} == {f"reply:{a[-1]['id']}:0"}
    assert len(openai.calls()) == 1
    # and no row was added (the ledger entry moved to sent; nothing else changed)
    assert len(rows(resources.table_name)) == len(stored_before)
    assert turns(resources.table_name) == [
        *[("user", f"line {n}") for n in range(3)],
        *[("assistant", reply[0])],
    ]
    # and every message names the one reply
    assert {e["answered_by"] for e in ledger(resources.table_name).values()} == {a[-1]["id"]}


# a crash after storing the keyword, and what the person wrote after it (the FIFO group holds
# it behind the failed record, so the queue redelivers them together)
KEYWORD_CRASHES = {
    "forget_me": (1, ["forget me", "yes"]),
    "its_yes": (2, ["forget me", "yes", "thanks"]),
}


@pytest.mark.parametrize("fault", [Crash, Died], ids=["record_fails", "invocation_dies"])
@pytest.mark.parametrize("handoff", [False, True], ids=["agent", "human_has_the_chat"])
@pytest.mark.parametrize("crash", sorted(KEYWORD_CRASHES))
def test_forget_me_and_its_yes_keep_their_meaning_when_a_crash_makes_them_a_burst(
    consumer, resources, openai, whasp, lambda_context, monkeypatch, crash, handoff, fault
):
    from memagent.turn.replies import built_in

    # given Maya talking to the agent (or waiting for the human she asked for)
    first = message("talk to a human" if handoff else "hello", 0)
    assert failures(consumer.handler(sqs_batch(first), lambda_context)) == []
    # when she writes "forget me", "yes" (and more), and the turn crashes right after storing
    # "forget me" (or its "yes")
    nth, lines = KEYWORD_CRASHES[crash]
    written = [message(text, 1 + n) for n, text in enumerate(lines)]
    crash_after(
        consumer.consumer.agent.store, "remember_inbound", monkeypatch, nth=nth, fault=fault
    )
    records = [sqs_record(e) for e in written]
    kept = run(consumer, records, lambda_context)
    assert kept
    # and the queue redelivers what it kept, together
    again = [
        sqs_record(e, receive_count=2)
        for e, r in zip(written, records, strict=True)
        if r["messageId"] in kept
    ]
    assert run(consumer, again, lambda_context) == []
    # then she was asked, then forgotten, as if nothing had crashed (a "thanks" written
    # before the erasure ran is not brought back: it predates the erasure's mark)
    replies = whasp.texts_to(MAYA)
    question, forgotten = built_in().text("forget_question"), built_in().text("forgotten")
    assert replies[1:] == [question, forgotten]
    # and nothing of her is kept but the erasure's mark
    [mark] = rows(resources.table_name)
    assert only_the_mark(mark)


def test_ledger_entries_of_a_person_with_no_burst_look_as_before(
    consumer, resources, whasp, lambda_context
):
    event = message("hello")
    consumer.handler(sqs_batch(event), lambda_context)
    entry = ledger(resources.table_name)[event["id"]]
    assert (entry["status"], entry["answered_by"]) == ("sent", event["id"])
    assert person_key(AGENT, MAYA) == entry["pk"]


def test_a_burst_after_days_away_tells_the_model_how_long_it_was(
    consumer, resources, openai, whasp, lambda_context
):
    # given Maya wrote two days ago
    consumer.handler(sqs_batch(message("see you", 0)), lambda_context)
    # when she comes back with a burst of two lines
    two_days = 2 * 24 * 60
    batch = sqs_batch(message("I'm back!", two_days), message("missed me?", two_days + 0.1))
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then the one model call for the burst counts the days from before the burst's first line
    assert len(openai.calls()) == 2
    assert "2 days ago" in notes_of(openai.calls()[-1])
    assert len(whasp.texts_to(MAYA)) == 2


# ------------------------------------------------------------------ a burst and an erasure


def test_a_late_event_from_before_an_erasure_ending_a_burst_still_answers_it(
    consumer, resources, openai, whasp, lambda_context
):
    from datetime import datetime

    from memagent.lifecycle.rights import forget

    # given Maya wrote, was answered, then was forgotten at minute 10
    old = message("I live at 1 Private Road", 0)
    consumer.handler(sqs_batch(old), lambda_context)
    forget(consumer.consumer.agent.store, AGENT, MAYA, at=datetime.fromisoformat(at(10)))
    # when a batch holds her new message, then a late repeat of the old one
    new = message("hello again", 20)
    batch = {"Records": [sqs_record(new), sqs_record(old, receive_count=2)]}
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then the new message is answered once, and the old one is not brought back
    assert said(resources.table_name) == ["hello again"]
    assert len(whasp.texts_to(MAYA)) == 2
    assert ledger(resources.table_name)[new["id"]]["status"] == "sent"
    assert old["id"] not in ledger(resources.table_name)


def test_kept_media_of_an_event_from_before_an_erasure_is_discarded(
    consumer, resources, whasp, lambda_context
):
    from datetime import datetime

    from memagent.lifecycle.rights import forget

    # given a voice note whose first attempt kept its file, and an erasure after it was sent
    voice = media_message("audio", whasp.add_media(b"O" * 99, "audio/ogg"), "audio/ogg", 0)
    store, media = consumer.consumer.agent.store, consumer.consumer.agent.media
    forget(store, AGENT, MAYA, at=datetime.fromisoformat(at(10)))
    pk = person_key(AGENT, MAYA)
    media.put(pk, voice["id"], b"O" * 99, "audio/ogg")  # the in-flight attempt kept it late
    # when the voice note is redelivered after the erasure
    assert failures(consumer.handler(sqs_batch(voice, receive_count=2), lambda_context)) == []
    # then nothing is stored and its kept file is gone
    assert said(resources.table_name) == []
    assert media.get(pk, voice["id"]) is None
