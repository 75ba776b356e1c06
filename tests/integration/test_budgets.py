"""What one person may cost: the reply's tokens and messages, the voice note's length, and a
daily limit past which the person gets one notice a day and is still remembered. Through the
consumer handler, moto's DynamoDB, the local OpenAI and whasp stand-ins."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from devstack.lambda_harness import reported_failures as failures
from memagent.providers.seam import split_text
from memagent.turn.replies import built_in
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch, whasp_message
from tests.integration.test_consumer import at, media_message, message, state, turns

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


# ------------------------------------------------------------------ everything counts


def model_requests(openai) -> int:
    """Every request the model's endpoint got: replies, descriptions, transcriptions, folds."""
    from devstack.fake_openai import TRANSCRIPTIONS

    return len(openai.calls()) + len(openai.calls(TRANSCRIPTIONS))


def stack_tokens(table_name: str, day: str = "") -> int:
    """The stack's model tokens today (StackBudget's counter item)."""

    from memagent.memory.budget import day_of

    day = day or day_of(datetime.now(UTC))
    key = {"pk": f"STACK#{AGENT}", "sk": f"DAY#{day}"}
    item = dynamodb_table(table_name).get_item(Key=key).get("Item") or {}
    return int(item.get("tokens", 0))


def reply_tokens(table_name: str) -> int:
    """The tokens of the newest reply stored (its turn item's)."""
    from tests.integration.test_consumer import rows

    replies = [i for i in rows(table_name, MAYA, "MSG#") if i["role"] == "assistant"]
    return int(replies[-1].get("tokens", 0))


def test_photos_and_voice_notes_after_the_notice_make_no_model_call(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a limit of one model turn a day, reached, and the notice sent
    env = {**consumer_env, "PERSON_DAILY_TURNS": "1", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    for n, text in enumerate(["hello", "again"]):
        assert failures(consumer.handler(sqs_batch(message(text, n)), lambda_context)) == []
    assert whasp.texts_to(MAYA)[-1] == NOTICE
    asked = model_requests(openai)
    # when Maya sends five photos and two voice notes that day
    photo = whasp.add_media(b"\x89PNG....", "image/png")
    voice = whasp.add_media(ogg_voice_note(30), "audio/ogg")
    media = [("image", photo, "image/png")] * 5 + [("audio", voice, "audio/ogg")] * 2
    for n, (kind, url, mime) in enumerate(media, start=2):
        event = media_message(kind, url, mime, n, message_id=f"m{n}", caption="look")
        assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then the model was asked nothing: no description, no transcription, no reply
    assert model_requests(openai) == asked
    # and each is remembered, in order, as what it was, its caption kept; nothing more is sent
    said = [t for r, t in turns(resources.table_name) if r == "user"][2:]
    assert said == [
        *["[sent a photo, not looked at: the day's limit was reached] look"] * 5,
        *["[sent a voice note, not listened to: the day's limit was reached] look"] * 2,
    ]
    assert len(whasp.texts_to(MAYA)) == 2


def test_past_the_stacks_hard_limit_a_photo_is_not_described(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    from tests.integration.test_consumer import SAM

    # given a stack-wide hard limit that Maya's one reply reaches
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "10", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    assert failures(consumer.handler(sqs_batch(message("hello", 0)), lambda_context)) == []
    asked = model_requests(openai)
    # when Sam sends a photo
    photo = whasp.add_media(b"\x89PNG....", "image/png")
    event = media_message("image", photo, "image/png", 1, message_id="m1")
    event["data"]["chat"] = SAM
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then it is neither described nor answered by the model: Sam gets the notice
    assert model_requests(openai) == asked
    assert whasp.texts_to(SAM) == [NOTICE]


def test_a_description_and_a_transcription_count_on_the_persons_and_the_stacks_day(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a stack that counts its day (a hard limit far off) and no limit for Maya
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "100000000"}
    consumer = load_function("consumer", env, monkeypatch)
    table = resources.table_name
    # when Maya sends a photo
    photo = whasp.add_media(b"\x89PNG....", "image/png")
    event = media_message("image", photo, "image/png", 0, message_id="m0")
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then its description's tokens are on her day, in the write that stored it, and on the
    # stack's with the reply's
    described, first_reply = int(state(table)["day_tokens"]), reply_tokens(table)
    assert described > 0
    assert stack_tokens(table) == described + first_reply
    # when she sends a voice note
    voice = whasp.add_media(ogg_voice_note(30), "audio/ogg")
    event = media_message("audio", voice, "audio/ogg", 1, message_id="m1")
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then its transcription's tokens count too: on the stack's day, and on hers, with the
    # reply to the photo
    transcribed = stack_tokens(table) - described - first_reply - reply_tokens(table)
    assert transcribed > 0
    assert int(state(table)["day_tokens"]) == described + first_reply + transcribed


def test_a_folds_tokens_count_on_the_persons_and_the_stacks_day(
    consumer_env, compactor_env, resources, openai, whasp, tap, monkeypatch, lambda_context
):
    from tests.integration.test_compactor import run

    # given a stack that counts its day, and a memory folded after every two exchanges
    limits = {
        "STACK_DAILY_TOKENS_HARD_LIMIT": "100000000",
        "COMPACT_THRESHOLD": "4",
        "COMPACT_KEEP": "2",
    }
    consumer = load_function("consumer", {**consumer_env, **limits}, monkeypatch)
    compactor = load_function(
        "compactor", {**compactor_env, **limits, "COMPACT_KEEP": "2"}, monkeypatch
    )

    def respond(request: dict[str, Any]) -> str:
        if "format" in (request.get("text") or {}):  # the fold's structured output
            return json.dumps({"summary": "Maya runs on Sundays.", "facts": []})
        return "Noted!"

    openai.responder = respond
    table = resources.table_name
    for n, text in enumerate(["I run on Sundays", "and swim on Mondays"]):
        assert failures(consumer.handler(sqs_batch(message(text, n)), lambda_context)) == []
    before = int(state(table)["day_tokens"]), stack_tokens(table)
    last_reply = reply_tokens(table)
    # when the compactor folds her memory
    assert run(compactor, tap.matching(), lambda_context) == []
    folded = stack_tokens(table) - before[1]
    # then the fold's tokens are on the stack's day at once
    assert folded > 0
    # and on Maya's with her next message, beside the reply it follows
    assert failures(consumer.handler(sqs_batch(message("thanks", 2)), lambda_context)) == []
    assert int(state(table)["day_tokens"]) == before[0] + last_reply + folded


def test_forget_me_keeps_the_days_counters(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a limit of two model turns a day
    env = {**consumer_env, "PERSON_DAILY_TURNS": "2", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    # when Maya says hello, then has herself forgotten, three times in one day (tomorrow's:
    # written after each erasure's mark, which is the time it ran)
    day = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0) + timedelta(days=1)
    minute = 0
    for _cycle in range(3):
        for text in ("hello", "forget me", "yes"):
            written = (day + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
            event = whasp_message(text, created_at=written)
            assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
            minute += 1
    # then the model answered two hellos; the third got the notice (the counters outlived
    # each erasure, which took everything she said)
    assert len(openai.calls()) == 2
    forgetting = (built_in().text("forget_question"), built_in().text("forgotten"))
    hellos = [t for t in whasp.texts_to(MAYA) if t not in forgetting]
    assert hellos[2:] == [NOTICE]
    mark = state(resources.table_name)
    assert int(mark["day_turns"]) == 2 and "last_seq" not in mark


# ------------------------------------------------------------------ the stack's day, shared


def spent_elsewhere(table_name: str, tokens: int) -> None:
    """Another Lambda environment's replies on the stack's day: the ADD its StackBudget makes."""

    from memagent.memory.budget import day_of

    key = {"pk": f"STACK#{AGENT}", "sk": f"DAY#{day_of(datetime.now(UTC))}"}
    dynamodb_table(table_name).update_item(
        Key=key, UpdateExpression="ADD tokens :n", ExpressionAttributeValues={":n": tokens}
    )


def hello(consumer: Any, chat: str, n: int, lambda_context: Any) -> None:
    event = whasp_message("hello", chat=chat, created_at=at(n), event_id=f"evt_{n}")
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []


def test_another_environments_spending_is_seen_within_a_minute_not_on_every_message(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    import time as real_time
    from types import SimpleNamespace

    from memagent.memory import budget
    from tests.integration.test_consumer import SAM

    # given one environment, on a clock we move, whose first reply read the stack's day
    clock = {"offset": 0.0}
    moved = SimpleNamespace(
        monotonic=lambda: real_time.monotonic() + clock["offset"], time=real_time.time
    )
    monkeypatch.setattr(budget, "time", moved)
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "100000", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    hello(consumer, MAYA, 0, lambda_context)
    # when other environments spend the rest of the day's tokens
    spent_elsewhere(resources.table_name, 100_000)
    # then within the minute this one still answers from what it read (one read a minute)
    hello(consumer, SAM, 1, lambda_context)
    assert whasp.texts_to(SAM) != [NOTICE]
    # and a minute later it has read the day again: the next person gets the notice
    clock["offset"] = 61.0
    hello(consumer, "+447700900333", 2, lambda_context)
    assert whasp.texts_to("+447700900333") == [NOTICE]
    assert len(openai.calls()) == 2


def test_an_environments_own_replies_count_at_once(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    from tests.integration.test_consumer import SAM

    # given a stack one token short of its limit when this environment first reads its day
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "100000", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    spent_elsewhere(resources.table_name, 99_999)
    # when Maya is answered, then Sam writes within the minute
    hello(consumer, MAYA, 0, lambda_context)
    hello(consumer, SAM, 1, lambda_context)
    # then Maya's reply reached the limit here at once: Sam gets the notice, no model call
    assert whasp.texts_to(MAYA) != [NOTICE]
    assert whasp.texts_to(SAM) == [NOTICE]
    assert len(openai.calls()) == 1


def test_a_stack_that_spent_exactly_its_limit_answers_no_more(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a day on which the stack spent exactly its hard limit
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "5000", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    spent_elsewhere(resources.table_name, 5000)
    # when Maya writes, then she gets the notice and the model is not asked
    hello(consumer, MAYA, 0, lambda_context)
    assert whasp.texts_to(MAYA) == [NOTICE]
    assert openai.calls() == []


def test_a_person_who_spent_exactly_their_daily_tokens_gets_the_notice(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given Maya's first reply of the day, and a daily token limit of exactly its tokens
    consumer = load_function("consumer", consumer_env, monkeypatch)
    assert failures(consumer.handler(sqs_batch(written_on(29, "one", 0, 0)), lambda_context)) == []
    spent = reply_tokens(resources.table_name)
    env = {**consumer_env, "PERSON_DAILY_TOKENS": str(spent), "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    # when she writes again that day
    assert failures(consumer.handler(sqs_batch(written_on(29, "two", 1, 1)), lambda_context)) == []
    # then she gets the notice: the limit is reached, not only passed
    assert whasp.texts_to(MAYA)[-1] == NOTICE
    assert len(openai.calls()) == 1


def test_without_a_hard_limit_the_stack_keeps_no_counter(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given no StackDailyTokensHardLimit (the default)
    env = {k: v for k, v in consumer_env.items() if k != "STACK_DAILY_TOKENS_HARD_LIMIT"}
    consumer = load_function("consumer", env, monkeypatch)
    # when Maya is answered, then nothing is written for the stack's day (no write a reply)
    hello(consumer, MAYA, 0, lambda_context)
    assert len(openai.calls()) == 1
    assert stack_tokens(resources.table_name) == 0


def test_the_stacks_day_counter_expires_three_days_on(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    import time

    from memagent.memory.budget import day_of

    # given a stack with a hard limit
    env = {**consumer_env, "STACK_DAILY_TOKENS_HARD_LIMIT": "100000"}
    consumer = load_function("consumer", env, monkeypatch)
    # when Maya is answered
    before = int(time.time())
    hello(consumer, MAYA, 0, lambda_context)
    after = int(time.time())
    # then the day's counter item is set to expire (DynamoDB's TTL) three days on, so the
    # table keeps no more than a few days' counters
    key = {"pk": f"STACK#{AGENT}", "sk": f"DAY#{day_of(datetime.now(UTC))}"}
    item = dynamodb_table(resources.table_name).get_item(Key=key)["Item"]
    assert before + 3 * 86_400 <= int(item["expires_at"]) <= after + 3 * 86_400


def test_a_photo_right_after_the_days_last_turn_is_not_described(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    # given a limit of one model turn a day, and Maya answered once (not yet counted on her
    # state: her next message's write counts it)
    env = {**consumer_env, "PERSON_DAILY_TURNS": "1", "BUDGET_NOTICE": NOTICE}
    consumer = load_function("consumer", env, monkeypatch)
    assert failures(consumer.handler(sqs_batch(message("hello", 0)), lambda_context)) == []
    asked = model_requests(openai)
    # when she sends a photo
    photo = whasp.add_media(b"\x89PNG....", "image/png")
    event = media_message("image", photo, "image/png", 1, message_id="m1")
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # then it is not described (the answered turn counts) and she gets the notice
    assert model_requests(openai) == asked
    assert whasp.texts_to(MAYA)[-1] == NOTICE
