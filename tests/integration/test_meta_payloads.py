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
meta_consumer_env = test_meta.meta_consumer_env  # a fixture (the consumer's)
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


# ------------------------------------------------------------------ what people send


def said(openai) -> list[str]:
    """What the last model call saw the person say."""
    return [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]


def one_turn(webhook, queue, consumer, message: dict[str, Any], lambda_context) -> None:
    assert post(webhook, notify(message), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0


def test_a_flow_answer_reaches_the_model_as_the_persons_answers(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given the answers to a WhatsApp Flow, as Meta delivers them (response_json a JSON string)
    flow = meta_message(
        phone=MAYA_PHONE,
        bsuid=MAYA_BSUID,
        kind="interactive",
        body={
            "type": "nfm_reply",
            "nfm_reply": {
                "name": "flow",
                "body": "Sent",
                "response_json": '{"flow_token": "tok-1", "goal": "10k in May", "days": "3"}',
            },
        },
        timestamp=NOW,
    )
    one_turn(webhook, queue, consumer, flow, lambda_context)
    # then the model reads the answers (not "[sent an empty message]"), the token left out
    assert said(openai) == ["[filled in Sent] goal: 10k in May; days: 3"]
    assert len(graph.sent) == 1


@pytest.mark.parametrize(
    ("kind", "body", "seen"),
    [
        (
            "location",
            {"latitude": 51.5, "longitude": -0.12, "name": "Parkrun", "address": "Hyde Park"},
            "[shared a location: Parkrun, Hyde Park]",
        ),
        (
            "contacts",
            [{"name": {"formatted_name": "Ana Lima", "first_name": "Ana"}, "phones": []}],
            "[shared a contact: Ana Lima]",
        ),
        (
            "order",
            {
                "catalog_id": "cat-1",
                "text": "for Saturday",
                "product_items": [
                    {
                        "product_retailer_id": "shoe-42",
                        "quantity": 2,
                        "item_price": 60,
                        "currency": "GBP",
                    }
                ],
            },
            "[sent an order: 2 x shoe-42 (60 GBP); for Saturday]",
        ),
        ("unsupported", {"errors": [{"code": 131051}]}, "[sent an unsupported message]"),
    ],
    ids=["location", "contacts", "order", "unsupported"],
)
def test_shared_things_reach_the_model_with_their_useful_content(
    webhook, queue, consumer, graph, openai, lambda_context, kind, body, seen
):
    message = meta_message(phone=MAYA_PHONE, bsuid=MAYA_BSUID, kind=kind, body=body, timestamp=NOW)
    one_turn(webhook, queue, consumer, message, lambda_context)
    assert said(openai) == [seen]


def test_a_group_message_is_acknowledged_counted_and_never_answered_or_remembered(
    webhook, queue, consumer, graph, openai, resources, lambda_context, capsys
):
    # given a message Maya wrote in a Cloud API group, beside one she wrote to us in private
    grouped = meta_message("hi all", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW)
    grouped["group_id"] = "120363041234567890"
    private = meta_message("hi coach", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 1)
    capsys.readouterr()
    assert post(webhook, notify(grouped, private), lambda_context) == 200
    # then the webhook acknowledged it and counted it
    assert '"GroupMessagesIgnored":[1' in capsys.readouterr().out.replace(" ", "")
    assert queue.drain(consumer, lambda_context) == 0
    # and only the private message was remembered and answered, in private
    assert user_turns(resources) == ["hi coach"]
    assert len(graph.sent) == 1


@pytest.mark.parametrize("code", [613, 80008], ids=["613", "unknown-code"])
def test_any_http_429_is_retried_with_backoff_never_parked(
    webhook, queue, consumer, graph, openai, lambda_context, code
):
    # given Meta answers the send with HTTP 429 and code 613 ("calls to this api have exceeded
    # the rate limit"), or a 429 under a code we do not know
    graph.fail_next(1, code=code, status=429)
    post(webhook, notify(meta_message("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID)), lambda_context)
    # then the first attempt fails (retried on the backoff) and the second is answered once
    assert queue.deliver(consumer, lambda_context) == 1
    assert graph.sent == []
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    assert len(graph.sent) == 1
