"""Meta payloads and media as public integrations' fixtures show them, through the webhook and
consumer handlers (moto's SQS and DynamoDB, the local Graph API and OpenAI stand-ins)."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.events import meta_contact, meta_message, meta_notification
from devstack.fake_whasp import FakeWhasp
from tests.integration import test_meta
from tests.integration.test_meta import MAYA_BSUID, MAYA_PHONE, NOW, memory_rows, post

# test_meta's fixtures: its webhook and consumer on provider meta, the Graph stand-in, the queue
webhook, consumer, queue = test_meta.webhook, test_meta.consumer, test_meta.queue
graph, graph_server = test_meta.graph, test_meta.graph_server


def notify(*messages: dict[str, Any]) -> dict[str, Any]:
    return meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], messages=list(messages)
    )


def user_turns(resources) -> list[str]:
    rows = memory_rows(resources, MAYA_BSUID)
    return [r["text"] for r in rows if r["sk"].startswith("MSG#") and r["role"] == "user"]


def voice_note(media_id: str) -> dict[str, Any]:
    body = {"mime_type": "audio/ogg; codecs=opus", "id": media_id, "voice": True}
    return meta_message(phone=MAYA_PHONE, bsuid=MAYA_BSUID, kind="audio", body=body, timestamp=NOW)


# ------------------------------------------------------------------ media


@pytest.fixture
def elsewhere() -> Any:
    """A host that is not Meta's and records every request it gets (the token, if sent)."""
    with FakeWhasp(api_key="unused") as server:
        yield server


def test_media_on_a_host_off_metas_list_is_not_fetched_and_gets_no_token(
    webhook, queue, consumer, graph, openai, resources, elsewhere, lambda_context
):
    # given a media lookup whose download URL points at a host that is not Meta's
    media_id = graph.add_media(b"OggS" + b"\x00" * 200)
    graph.download_base = elsewhere.url
    # when the voice note is handled
    assert post(webhook, notify(voice_note(media_id)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then that host saw no request (so never the token); the note is kept as unavailable
    assert elsewhere.requests == []
    assert user_turns(resources) == ["[sent a voice note that could not be played]"]
    assert len(graph.sent) == 1  # and the person is answered
