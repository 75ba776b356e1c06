"""The webhook's edge under abuse: an unsigned flood of big bodies costs no HMAC, a signed body
nested past the parser's depth is a 400, and a signed POST that fans out into many messages
queues them concurrently within the provider's deadline. Through the handler, moto's SQS."""

from __future__ import annotations

import hmac
import threading
from typing import Any

import pytest

from devstack.events import http_event, meta_body, meta_headers
from tests.conftest import AGENT, load_function, signed_headers, whasp_message
from tests.integration.test_meta import APP_SECRET, VERIFY_TOKEN, Queue, many_messages
from tests.integration.webhook_calls import call, signed_request, webhook_env

SIX_MIB = 6 * 1024 * 1024


@pytest.fixture
def whasp_webhook(resources, monkeypatch) -> Any:
    return load_function("webhook", webhook_env(resources), monkeypatch)


@pytest.fixture
def meta_webhook(resources, monkeypatch) -> Any:
    env = {
        "PROVIDER": "meta",
        "QUEUE_URL": resources.queue_urls["EventQueue"],
        "AGENT_ID": AGENT,
        "META_APP_SECRET": APP_SECRET,
        "META_VERIFY_TOKEN": VERIFY_TOKEN,
    }
    return load_function("webhook", env, monkeypatch)


def refuse_hmac(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From now on hmac.new refuses to run (and records that it was asked)."""
    calls: list[int] = []

    def refused(key: Any, message: Any = None, digestmod: Any = None) -> Any:
        calls.append(len(message or b""))
        raise AssertionError("a signature was computed")

    monkeypatch.setattr(hmac, "new", refused)
    return calls


@pytest.mark.parametrize("base64_encoded", [False, True], ids=["text", "base64"])
def test_an_unsigned_6_mib_body_is_refused_before_it_is_hashed(
    whasp_webhook, meta_webhook, resources, monkeypatch, lambda_context, base64_encoded
):
    # given a 6 MiB body under signature headers that look right (whasp's and Meta's)
    body = b'{"id":"evt_big","pad":"' + b"x" * SIX_MIB + b'"}'
    whasp = http_event(body, signed_headers(b"{}", "evt_big"), base64_encoded=base64_encoded)
    meta = http_event(body, meta_headers(b"{}", app_secret=APP_SECRET), base64_encoded=True)
    no_hmac = refuse_hmac(monkeypatch)
    # then both are a 413, no HMAC runs over them, and nothing is queued
    assert call(whasp_webhook, whasp, lambda_context) == (413, {"error": "body too large"})
    assert call(meta_webhook, meta, lambda_context) == (413, {"error": "body too large"})
    assert no_hmac == []
    assert Queue(resources).peek() == []


def test_a_signed_body_nested_past_the_parsers_depth_is_a_400(
    whasp_webhook, meta_webhook, resources, lambda_context
):
    # given signed bodies nested 50,000 deep (RecursionError in json.loads)
    nested = b'{"id":"evt_deep","type":"message.received","data":' + b"[" * 50_000 + b"]" * 50_000
    whasp = http_event(nested + b"}", signed_headers(nested + b"}", "evt_deep"))
    meta = meta_body({"object": "whatsapp_business_account", "entry": []})
    meta = meta[:-1] + b',"x":' + b"[" * 50_000 + b"]" * 50_000 + b"}"
    # then each is a 400 that names no detail, never a 500
    assert call(whasp_webhook, whasp, lambda_context)[0] == 400
    signed = http_event(meta, meta_headers(meta, app_secret=APP_SECRET))
    assert call(meta_webhook, signed, lambda_context)[0] == 400
    assert Queue(resources).peek() == []


def test_a_post_of_many_messages_sends_its_batches_concurrently(
    meta_webhook, resources, monkeypatch, lambda_context
):
    # given a POST of 40 messages (4 batch calls) and an SQS that answers a call only once
    # all four are in flight at once (a sequential sender would wait on the first for good)
    sqs = meta_webhook.queue._sqs
    send, together = sqs.send_message_batch, threading.Barrier(4, timeout=30)
    overlapped: list[bool] = []

    def once_all_in_flight(**members: Any) -> Any:
        try:
            together.wait()
            overlapped.append(True)
        except threading.BrokenBarrierError:
            overlapped.append(False)
        return send(**members)

    monkeypatch.setattr(sqs, "send_message_batch", once_all_in_flight)
    body = meta_body(many_messages(40))
    request = http_event(body, meta_headers(body, app_secret=APP_SECRET))
    # then the webhook answers 200 with all 40 queued, the four calls having overlapped
    assert call(meta_webhook, request, lambda_context)[0] == 200
    assert overlapped == [True] * 4
    assert len(Queue(resources).peek()) == 40


def test_batches_that_cannot_start_before_the_deadline_are_a_503(
    meta_webhook, resources, monkeypatch, lambda_context
):
    # given a POST whose batches would all start past the fan-out deadline (a slow SQS)
    import memagent.aws.queue

    monkeypatch.setattr(memagent.aws.queue, "FANOUT_DEADLINE_SECONDS", -1.0)
    body = meta_body(many_messages(25))
    request = http_event(body, meta_headers(body, app_secret=APP_SECRET))
    # then the provider hears 503 at once and retries later, instead of waiting past its timeout
    assert call(meta_webhook, request, lambda_context)[0] == 503
    assert Queue(resources).peek() == []


def test_an_ordinary_signed_event_still_queues(whasp_webhook, resources, lambda_context):
    assert call(whasp_webhook, signed_request(whasp_message()), lambda_context)[0] == 200
    assert len(Queue(resources).peek()) == 1
