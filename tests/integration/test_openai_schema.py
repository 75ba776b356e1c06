"""Every request we send to the model is valid against OpenAI's published OpenAPI description:
the reply, the photo's description, the fold, the voice note's transcription, each made by the
handlers and recorded by the stand-in.

The check is devstack.openai_schema's, the one the fake applies to every request. The schema is
an extract (tests/schemas/openai-responses.json, source and commit in its
"$comment"): CreateResponse and CreateTranscriptionRequest with every schema they reference,
documentation keys removed. To refresh it, fetch github.com/openai/openai-openapi, load
openapi.json, walk the $refs from those two schemas, drop description, example(s), title,
deprecated, default and x-* keys, turn a oneOf with a discriminator into anyOf (see "$comment"),
and note the new commit there.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from devstack.events import sqs_batch
from devstack.fake_openai import RESPONSES, TRANSCRIPTIONS, upload_fields
from devstack.lambda_harness import retried
from devstack.openai_schema import problems as schema_problems
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function, seed_turns, whasp_message


def problems(name: str, body: dict[str, Any]) -> list[str]:
    """What OpenAI's API would refuse in `body`: the fake's own check (devstack.openai_schema),
    the schema closed as the API reads it (an unknown field, at any depth, is a 400)."""
    return [message for _, message in schema_problems(name, body)]


@pytest.fixture
def everything_sent(consumer_env, compactor_env, monkeypatch, openai, whasp, tap, lambda_context):
    """A text, a photo and a voice note answered, then a fold: every request the model got."""
    consumer = load_function("consumer", consumer_env, monkeypatch)
    compactor = load_function("compactor", compactor_env, monkeypatch)
    photo = whasp.add_media(b"\x89PNG....", "image/png")
    voice = whasp.add_media(b"O" * 100, "audio/ogg")
    media = [
        {"id": "m_p", "type": "image", "media": {"url": photo, "mime_type": "image/png"}},
        {"id": "m_v", "type": "audio", "media": {"url": voice, "mime_type": "audio/ogg"}},
    ]
    for event in [whasp_message("Hi, I'm Maya"), *(whasp_message("", message=m) for m in media)]:
        assert retried(consumer.handler, sqs_batch(event), lambda_context) == []
    seed_turns(compactor.compactor.store, MAYA, [f"I live in Leeds, {i}" for i in range(45)])
    assert compactor.compactor.compact(person_key(AGENT, MAYA)) == "compacted"
    return openai.requests


def test_every_request_we_send_validates_against_openais_published_schema(everything_sent):
    responses = [r["json"] for r in everything_sent if r["path"] == RESPONSES]
    kinds = {
        "fold": [r for r in responses if "text" in r],
        "photo": [r for r in responses if "input_image" in json.dumps(r["input"])],
        "reply": [r for r in responses if "prompt_cache_key" in r],
    }
    assert all(kinds.values()), {kind: len(found) for kind, found in kinds.items()}
    for body in responses:
        assert problems("CreateResponse", body) == [], body
    # the photo's image carries its detail, which the schema requires
    [image] = [p for p in kinds["photo"][0]["input"][0]["content"] if p["type"] == "input_image"]
    assert image["detail"] == "auto"
    # and the transcription's form fields are the upload's (the file itself as its name)
    [upload] = [r["json"] for r in everything_sent if r["path"] == TRANSCRIPTIONS]
    assert upload_fields(upload)["file"] == "voice.ogg"
    assert problems("CreateTranscriptionRequest", upload_fields(upload)) == []


def test_a_wrong_field_fails_the_check():
    # given a reply request with a misspelt field, one with an image without its detail, and a
    # function call sent back with a field no item has
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA=="}
    wrong = {"model": "m", "input": "hi", "prompt_cache_keys": "x"}
    no_detail = {"model": "m", "input": [{"role": "user", "content": [image]}]}
    call = {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}", "x": 1}
    nested = {"model": "m", "input": [call]}
    # then each is refused, as OpenAI's API words it
    assert problems("CreateResponse", wrong) == ["Unknown parameter: 'prompt_cache_keys'."]
    assert problems("CreateResponse", no_detail) == [
        "Invalid value for 'input[0].content[0]': 'detail' is a required property"
    ]
    assert problems("CreateResponse", nested) == ["Unknown parameter: 'input[0].x'."]


def test_the_reply_carries_per_person_cache_fields_without_the_phone(
    consumer_env, monkeypatch, openai, lambda_context
):
    # given the default settings, then the extras turned off
    for setting, expected in (("true", True), ("false", False)):
        consumer = load_function(
            "consumer", {**consumer_env, "OPENAI_CACHE_FIELDS": setting}, monkeypatch
        )
        consumer.handler(sqs_batch(whasp_message(f"hello {setting}")), lambda_context)
        body = openai.calls()[-1]
        # then the cache key and safety id are there, hashed, holding no part of the phone
        assert ("prompt_cache_key" in body) is expected
        assert ("safety_identifier" in body) is expected
        if expected:
            key, safety = body["prompt_cache_key"], body["safety_identifier"]
            assert MAYA.lstrip("+") not in key + safety and MAYA[-6:] not in key + safety
            assert len(safety) <= 64 and key != safety
            assert body["prompt_cache_retention"] == "24h"


def test_a_server_that_refuses_an_optional_field_still_answers_every_message(
    consumer_env, monkeypatch, openai, whasp, lambda_context, capsys
):
    # given an OpenAI-compatible server that answers 400 naming prompt_cache_key
    openai.unsupported_fields = frozenset({"prompt_cache_key"})
    consumer = load_function("consumer", consumer_env, monkeypatch)
    # when two messages come
    for text in ("hello", "still there?"):
        assert retried(consumer.handler, sqs_batch(whasp_message(text)), lambda_context) == []
    # then the first was asked once more without the optional fields, counted and logged; the
    # second left them out from the start; both replies went out (not the fallback)
    assert [r["status"] for r in openai.requests] == [400, 200, 200]
    optional = {"prompt_cache_key", "safety_identifier", "prompt_cache_retention", "include"}
    # (every turn offers request_human, so asks for the reasoning's encrypted content too)
    assert [sorted(optional & set(r["json"])) for r in openai.requests] == [
        ["include", "prompt_cache_key", "prompt_cache_retention", "safety_identifier"],
        [],
        [],
    ]
    assert '"ModelFieldRefused"' in capsys.readouterr().out
    assert [s["text"].startswith("[offline model]") for s in whasp.sent] == [True, True]
