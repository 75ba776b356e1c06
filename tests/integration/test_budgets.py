"""What one person may cost: the reply's tokens and messages, the voice note's length, and a
daily limit past which the person gets one notice a day and is still remembered. Through the
consumer handler, moto's DynamoDB, the local OpenAI and whasp stand-ins."""

from __future__ import annotations

from typing import Any

from devstack.lambda_harness import reported_failures as failures
from memagent.provider import split_text
from tests.conftest import MAYA, load_function, sqs_batch, whasp_message
from tests.integration.test_consumer import at, media_message, message, turns

NOTICE = "Daily limit reached: back tomorrow!"


def test_a_50000_token_answer_becomes_at_most_max_reply_parts_messages(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given an operator's MaxReplyTokens and MaxReplyParts, and a model that writes a novel
    env = {**consumer_env, "MAX_REPLY_TOKENS": "800", "MAX_REPLY_PARTS": "2"}
    consumer = load_function("consumer", env, monkeypatch)
    novel = " ".join(f"word{n}" for n in range(50_000))  # ~50,000 tokens, ~73 messages
    openai.responder = lambda request: novel
    assert failures(consumer.handler(sqs_batch(message("Write me a novel")), lambda_context)) == []
    # then the request asked for at most 800 output tokens
    assert openai.calls()[-1]["max_output_tokens"] == 800
    # and the person got two messages: the start of it, shortened, not 73
    sent = whasp.texts_to(MAYA)
    assert len(sent) == 2 and all(len(part) <= 4096 for part in sent)
    assert sent[0].startswith("word0 word1") and sent[-1].endswith("\u2026")
    # and memory holds what they saw
    role, stored = turns(resources.table_name)[-1]
    assert role == "assistant" and split_text(stored) == sent


def ogg_voice_note(seconds: int) -> bytes:
    """An Ogg Opus file's first and last pages: OpusHead (pre-skip 312), then a last granule
    position of `seconds` at 48 kHz."""
    head = b"OggS\x00\x02" + bytes(20) + b"OpusHead\x01\x01" + (312).to_bytes(2, "little")
    last = b"OggS\x00\x04" + (seconds * 48_000 + 312).to_bytes(8, "little") + bytes(12)
    return head + bytes(200) + last + bytes(50)


def test_a_20_minute_voice_note_is_not_transcribed_and_the_person_is_told(
    consumer, resources, openai, whasp, lambda_context
):
    # given a 20-minute voice note (MaxAudioSeconds is 300 by default) and a 1-minute one
    long = whasp.add_media(ogg_voice_note(20 * 60), "audio/ogg")
    short = whasp.add_media(ogg_voice_note(60), "audio/ogg")
    events = [
        media_message("audio", long, "audio/ogg", 0, message_id="v1"),
        media_message("audio", short, "audio/ogg", 1, message_id="v2"),
    ]
    events[1]["id"] = "evt_short"
    for event in events:
        assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then only the short one went to transcription
    assert len(openai.calls("/v1/audio/transcriptions")) == 1
    said = [t for r, t in turns(resources.table_name) if r == "user"]
    assert said[0] == (
        "[sent a voice note of 20 minutes, longer than the 5 the agent listens to: not heard]"
    )
    assert said[1].startswith("[voice note] ")
    # and the model saw the note, so its reply tells the person; each got one reply
    assert "longer than the 5" in str(openai.calls()[0]["input"])
    assert len(whasp.texts_to(MAYA)) == 2


def written_on(day: int, text: str, minute: int, n: int) -> dict[str, Any]:
    """Maya's message `n`, written on 2026-11-`day`."""
    stamp = at(minute).replace("2026-11-29", f"2026-11-{day}")
    return whasp_message(text, created_at=stamp, event_id=f"evt_{n}")


def test_past_person_daily_turns_one_notice_no_model_call_and_tomorrow_in_context(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a limit of 2 model turns a day, with a configured notice
    env = {**consumer_env, "PERSON_DAILY_TURNS": "2", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    today = ["one", "two", "three", "four", "five"]
    for n, text in enumerate(today):
        event = written_on(29, text, n, n)
        assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then two model calls, then one notice, then nothing more that day
    assert len(openai.calls()) == 2
    sent = whasp.texts_to(MAYA)
    assert len(sent) == 3 and sent[2] == NOTICE
    # and every message was remembered, in order
    said = [t for r, t in turns(resources.table_name) if r == "user"]
    assert said == today
    # when Maya writes the next day
    event = written_on(30, "six", 0, 6)
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then she is answered by the model, with what she wrote over the limit in its context
    assert len(openai.calls()) == 3 and len(whasp.texts_to(MAYA)) == 4
    context = str(openai.calls()[-1]["input"])
    assert all(text in context for text in ("three", "four", "five", "six"))


def test_past_person_daily_tokens_the_same(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a daily token limit one reply's tokens already reach
    env = {**consumer_env, "PERSON_DAILY_TOKENS": "10", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    for n, text in enumerate(["one", "two", "three"]):
        event = written_on(29, text, n, n)
        assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then one model call, then the notice, then silence
    assert len(openai.calls()) == 1
    assert whasp.texts_to(MAYA)[1:] == [NOTICE]


def test_past_the_stacks_hard_limit_people_get_the_notice_and_no_model_call(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    from tests.integration.test_consumer import SAM

    # given a stack-wide hard limit that one reply's tokens already reach
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "10", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    for n, chat in enumerate((MAYA, SAM)):
        event = whasp_message("hello", chat=chat, created_at=at(n), event_id=f"evt_{n}")
        assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then Maya was answered by the model; Sam, after the limit, got the notice, no model call
    assert len(openai.calls()) == 1
    assert len(whasp.texts_to(MAYA)) == 1 and whasp.texts_to(MAYA)[0] != NOTICE
    assert whasp.texts_to(SAM) == [NOTICE]
