"""Voice replies (issue 43), through the webhook and consumer handlers on Meta: Polly (moto with
devstack.moto_fixes' strict SynthesizeSpeech, which answers Ogg/Opus) speaks the reply, the Graph
stand-in takes the upload by Meta's type and size limits and the audio message; memory keeps the
text; a crash at any step still ends with one voice note; "text please" switches back; the day's
budget counts the synthesized characters."""

from __future__ import annotations

import dataclasses
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack.events import meta_contact, meta_message, meta_notification, meta_status
from devstack.fake_openai import OFFLINE
from devstack.ogg import opus_seconds, voice_note
from tests.conftest import load_function
from tests.integration import test_meta
from tests.integration.faults import crash_after
from tests.integration.test_meta import (
    ACCESS_TOKEN,
    MAYA_BSUID,
    MAYA_PHONE,
    NOW,
    memory_rows,
    post,
)

webhook, queue = test_meta.webhook, test_meta.queue
graph, graph_server = test_meta.graph, test_meta.graph_server


meta_consumer_env = test_meta.meta_consumer_env  # a fixture


@pytest.fixture
def consumer(meta_consumer_env, monkeypatch) -> Any:
    return load_function("consumer", {**meta_consumer_env, "VOICE_REPLIES": "mirror"}, monkeypatch)


def statuses(webhook, graph, lambda_context) -> None:
    """Meta's `sent` status for each message it accepted, with our send key: what records a
    part whose send a crash left unrecorded (memagent.turn.delivery)."""
    for sent in graph.sent:
        status = meta_status(
            sent["id"], phone=MAYA_PHONE, bsuid=MAYA_BSUID, callback=sent["callback"]
        )
        assert post(webhook, meta_notification(statuses=[status]), lambda_context) == 200


def notify(message: dict[str, Any]) -> dict[str, Any]:
    contacts = [meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)]
    return meta_notification(contacts=contacts, messages=[message])


def voice_in(graph, at: int = NOW) -> dict[str, Any]:
    media_id = graph.add_media(voice_note("how far should I run today"), "audio/ogg; codecs=opus")
    body = {"mime_type": "audio/ogg; codecs=opus", "id": media_id, "voice": True}
    return meta_message(phone=MAYA_PHONE, bsuid=MAYA_BSUID, kind="audio", body=body, timestamp=at)


def text_in(words: str, at: int) -> dict[str, Any]:
    return meta_message(words, phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=at)


def replies(resources) -> list[dict[str, Any]]:
    rows = memory_rows(resources, MAYA_BSUID)
    return [r for r in rows if r["sk"].startswith("MSG#") and r["role"] == "assistant"]


def state(resources) -> dict[str, Any]:
    return next(r for r in memory_rows(resources, MAYA_BSUID) if r["sk"] == "STATE")


def assert_one_voice_note(graph) -> None:
    [note] = graph.voice_notes_to(MAYA_PHONE)
    assert (opus_seconds(note) or 0) > 0  # ogg/opus, longer than nothing
    [sent] = graph.sent
    assert sent["text"].startswith(f"[voice note] {OFFLINE}")  # what Polly was given to say


def test_in_mirror_mode_a_voice_note_is_answered_with_one_voice_note_and_memory_keeps_the_text(
    webhook, queue, consumer, graph, resources, lambda_context
):
    # given VoiceReplies=mirror on Meta; when Maya sends a voice note
    assert post(webhook, notify(voice_in(graph)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then she gets exactly one voice note, an Ogg/Opus stream of some length, uploaded first
    assert_one_voice_note(graph)
    uploads = [r for r in graph.requests if r["method"] == "POST" and r["path"].endswith("/media")]
    assert len(uploads) == 1
    # and memory keeps the reply's text, marked as spoken
    [reply] = replies(resources)
    assert reply["text"].startswith(OFFLINE) and reply.get("voice") is True


def test_in_mirror_mode_a_text_message_is_answered_in_text(
    webhook, queue, consumer, graph, lambda_context
):
    assert post(webhook, notify(text_in("Hello coach", NOW)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert graph.voice_notes_to(MAYA_PHONE) == []
    assert len(graph.texts_to(MAYA_PHONE)) == 1


@pytest.mark.parametrize(
    ("target", "method"),
    [
        ("speech", "synthesize"),
        ("provider", "upload_voice"),
        ("store", "record_voice"),
        ("provider", "send_voice"),
        ("store", "finish_event"),
    ],
)
def test_whatever_step_crashes_she_gets_exactly_one_voice_note(
    webhook, queue, consumer, graph, resources, lambda_context, monkeypatch, target, method
):
    # given a turn that crashes right after `method`
    agent = consumer.consumer.agent
    crash_after(getattr(agent, target), method, monkeypatch)
    # when Maya's voice note is delivered, fails, and is redelivered
    assert post(webhook, notify(voice_in(graph)), lambda_context) == 200
    assert queue.deliver(consumer, lambda_context) == 1
    statuses(webhook, graph, lambda_context)  # what Meta says of what it accepted
    assert queue.drain(consumer, lambda_context) == 0
    # then exactly one voice note reached her, and memory holds one reply, its text
    assert_one_voice_note(graph)
    [reply] = replies(resources)
    assert reply["text"].startswith(OFFLINE)


def test_text_please_switches_her_back_and_answer_in_voice_switches_her_on(
    webhook, queue, consumer, graph, resources, lambda_context
):
    # given Maya asked for text
    assert post(webhook, notify(text_in("Text please", NOW)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert "answer in text" in graph.texts_to(MAYA_PHONE)[-1]
    assert state(resources)["voice_choice"] == "text"
    # when she sends a voice note
    assert post(webhook, notify(voice_in(graph, NOW + 60)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then the answer is text
    assert graph.voice_notes_to(MAYA_PHONE) == []
    assert len(graph.texts_to(MAYA_PHONE)) == 2
    # when she asks for voice again (in Spanish), the confirmation itself is spoken
    assert post(webhook, notify(text_in("Audio por favor", NOW + 120)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert len(graph.voice_notes_to(MAYA_PHONE)) == 1
    assert state(resources)["voice_choice"] == "voice"


def test_the_days_budget_counts_synthesized_characters_and_past_it_replies_go_as_text(
    webhook, queue, consumer, graph, resources, lambda_context
):
    # given two voice notes answered with voice notes
    for n in range(2):
        assert post(webhook, notify(voice_in(graph, NOW + 60 * n)), lambda_context) == 200
        assert queue.drain(consumer, lambda_context) == 0
    assert len(graph.voice_notes_to(MAYA_PHONE)) == 2
    spoken = sum(len(r["text"]) for r in replies(resources))
    # and a day's voice budget of just those characters
    agent = consumer.consumer.agent
    agent.settings = dataclasses.replace(agent.settings, voice_daily_chars=spoken)
    # when her third voice note comes
    assert post(webhook, notify(voice_in(graph, NOW + 120)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then the day's count holds both spoken replies' characters, and the answer is text
    assert int(state(resources)["day_voice_chars"]) == spoken
    assert len(graph.voice_notes_to(MAYA_PHONE)) == 2
    assert graph.sent[-1]["text"].startswith(OFFLINE)


# ------------------------------------------------------------------ the stand-ins


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"Text": "x" * 3001}, "TextLengthExceededException"),  # billed characters
        # 6,000 characters in all, though few are billed
        (
            {"Text": f"<speak>{'<break/>' * 750}hi</speak>", "TextType": "ssml"},
            "TextLengthExceededException",
        ),
        ({"Text": "<speak>hi</speak></speak>", "TextType": "ssml"}, "InvalidSsmlException"),
        ({"Text": "<p>hi</p>", "TextType": "ssml"}, "InvalidSsmlException"),
        ({"Text": "<speak>hi", "TextType": "ssml"}, "InvalidSsmlException"),
        ({"Engine": "generative"}, "EngineNotSupportedException"),
        ({"VoiceId": "Nobody"}, "ValidationException"),
    ],
)
def test_the_polly_stand_in_refuses_what_polly_refuses(resources, params, code):
    polly = boto3.client("polly")
    request = {"Text": "hi", "OutputFormat": "ogg_opus", "VoiceId": "Joanna", "Engine": "neural"}
    with pytest.raises(ClientError) as refused:
        polly.synthesize_speech(**{**request, **params})
    assert refused.value.response["Error"]["Code"] == code


def test_the_polly_stand_in_speaks_ssml_whose_tags_are_not_billed(resources):
    polly = boto3.client("polly")
    text = "<speak>" + "<break time='1ms'/>" * 100 + "x" * 2900 + "</speak>"  # > 3,000 in all
    spoken = polly.synthesize_speech(
        Text=text, TextType="ssml", OutputFormat="ogg_opus", VoiceId="Joanna", Engine="neural"
    )
    assert (opus_seconds(spoken["AudioStream"].read()) or 0) > 0


def test_the_graph_stand_in_takes_only_ogg_opus_as_a_voice_note_and_within_meta_limits(graph):
    from memagent.errors import SendRejected
    from memagent.providers.meta.graph import GraphClient
    from tests.integration.test_meta import META_NUMBER_ID

    client = GraphClient(graph.url, ACCESS_TOKEN)
    assert client.upload_voice(sender=META_NUMBER_ID, audio=voice_note("hello there"))
    with pytest.raises(SendRejected) as refused:
        client.upload_voice(sender=META_NUMBER_ID, audio=b"OggS" + b"\0" * 100)  # no Opus
    assert refused.value.code == 131053
    with pytest.raises(SendRejected):
        client.upload_voice(sender=META_NUMBER_ID, audio=voice_note("x") + b"\0" * (16 << 20))


# ------------------------------------------------------------------ OpenAI's speech endpoint


@pytest.fixture
def openai_voice(consumer, monkeypatch) -> Any:
    """The consumer of this module with VOICE_SPEECH=openai (and `more`): the model's own
    OpenAI endpoint speaks."""

    def load(**more: str) -> Any:
        # the module's consumer has set the rest of its environment
        return load_function("consumer", {"VOICE_SPEECH": "openai", **more}, monkeypatch)

    return load


def test_with_openai_speech_in_mirror_mode_a_voice_note_gets_one_ogg_opus_voice_note(
    webhook, queue, openai_voice, openai, graph, resources, lambda_context
):
    # given VoiceReplies=mirror with VOICE_SPEECH=openai
    consumer = openai_voice()
    # when Maya sends a voice note
    assert post(webhook, notify(voice_in(graph)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then she gets exactly one Ogg/Opus voice note: what OpenAI's endpoint spoke, asked once
    assert_one_voice_note(graph)
    [spoken] = openai.calls("/v1/audio/speech")
    assert spoken == {
        "model": "gpt-4o-mini-tts",
        "voice": "coral",
        "input": spoken["input"],
        "response_format": "opus",
    }
    assert graph.voice_notes_to(MAYA_PHONE) == [voice_note(spoken["input"])]
    # and memory keeps the reply's text, marked as spoken
    [reply] = replies(resources)
    assert reply["text"] == spoken["input"] and reply.get("voice") is True


def test_with_openai_speech_a_reply_the_endpoint_refuses_goes_as_text(
    webhook, queue, openai_voice, openai, graph, lambda_context
):
    # given a speech model the endpoint does not have (404: refused for good)
    consumer = openai_voice(VOICE_OPENAI_MODEL="tts-0")
    assert post(webhook, notify(voice_in(graph)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then the reply goes once, as text
    assert len(openai.calls("/v1/audio/speech")) == 1
    assert graph.voice_notes_to(MAYA_PHONE) == []
    assert len(graph.texts_to(MAYA_PHONE)) == 1


@pytest.mark.parametrize(
    ("change", "status", "param"),
    [
        ({"input": "x" * 4097}, 400, "input"),  # maxLength 4096
        ({"voice": "robot"}, 400, "voice"),  # not a built-in voice
        ({"model": "tts-9"}, 404, None),  # no such model
        ({"response_format": "ogg"}, 400, "response_format"),
        ({"speed": 5}, 400, "speed"),
        ({"language": "en"}, 400, None),  # a field the request does not declare
        ({"model": "tts-1", "instructions": "cheerful"}, 400, None),
    ],
)
def test_the_openai_stand_in_refuses_what_the_speech_endpoint_refuses(
    openai, change, status, param
):
    import openai as sdk

    client = sdk.OpenAI(base_url=f"{openai.url}/v1", api_key="sk-test", max_retries=0)
    request = {
        "model": "gpt-4o-mini-tts",
        "voice": "coral",
        "input": "hi",
        "response_format": "opus",
    }
    extra = {k: change.pop(k) for k in list(change) if k == "language"}
    with pytest.raises(sdk.APIStatusError) as refused:
        client.audio.speech.create(**{**request, **change}, extra_body=extra or None)
    assert refused.value.status_code == status
    if param is not None:
        assert refused.value.body["param"] == param
    # and what it takes is an Ogg/Opus stream
    spoken = client.audio.speech.create(**request)
    assert (opus_seconds(spoken.content) or 0) > 0
