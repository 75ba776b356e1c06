"""Every file in events/ through its function's handler, as `sam local invoke -e` would run it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest

from memagent.whasp import sign
from tests.conftest import MAYA, TEST_SECRET, load_function, seed_turns

EVENTS = Path(__file__).resolve().parents[2] / "events"
WEBHOOK_EVENTS = sorted(EVENTS.glob("webhook-*.json"))


def resigned(path: Path) -> dict:
    """The sample event with a fresh signature (committed ones go stale after 5 minutes)."""
    event = json.loads(path.read_text())
    timestamp = int(time.time())
    headers = event["headers"]
    headers["webhook-timestamp"] = str(timestamp)
    headers["webhook-signature"] = sign(
        TEST_SECRET, headers["webhook-id"], timestamp, event["body"].encode()
    )
    return event


def test_every_function_has_sample_events():
    names = {p.name for p in EVENTS.glob("*.json")}
    assert len(WEBHOOK_EVENTS) >= 4
    assert "consumer-sqs-batch.json" in names
    assert "compactor-stream-record.json" in names


@pytest.mark.parametrize("path", WEBHOOK_EVENTS, ids=lambda p: p.name)
def test_webhook_events(path, resources, monkeypatch, lambda_context):
    webhook = load_function(
        "webhook",
        {
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "AGENT_ID": "coach",
            "WEBHOOK_SECRET": TEST_SECRET,
        },
        monkeypatch,
    )
    response = webhook.handler(resigned(path), lambda_context)
    assert response["statusCode"] == 200
    queued = (
        boto3.client("sqs")
        .receive_message(QueueUrl=resources.queue_urls["EventQueue"], MaxNumberOfMessages=10)
        .get("Messages", [])
    )
    assert len(queued) == (0 if "other-type" in path.name else 1)


def test_webhook_events_as_committed_are_refused_once_stale(resources, monkeypatch, lambda_context):
    webhook = load_function(
        "webhook",
        {
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "AGENT_ID": "coach",
            "WEBHOOK_SECRET": TEST_SECRET,
        },
        monkeypatch,
    )
    event = json.loads((EVENTS / "webhook-message-received.json").read_text())
    event["headers"]["webhook-timestamp"] = str(int(time.time()) - 3600)
    assert webhook.handler(event, lambda_context)["statusCode"] == 401


def test_consumer_batch_event(consumer, whasp, lambda_context):
    event = json.loads((EVENTS / "consumer-sqs-batch.json").read_text())
    response = consumer.handler(event, lambda_context)
    assert response == {"batchItemFailures": []}
    people = [json.loads(r["body"])["data"]["chat"] for r in event["Records"]]
    assert [s["to"] for s in whasp.sent] == people


def test_compactor_stream_event(compactor_env, monkeypatch, openai, lambda_context):
    compactor = load_function("compactor", compactor_env, monkeypatch)
    # given the person in the sample record has 45 turns waiting
    seed_turns(compactor.compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    openai.responder = lambda request: json.dumps({"summary": "Earlier chat.", "facts": []})
    event = json.loads((EVENTS / "compactor-stream-record.json").read_text())
    assert compactor.handler(event, lambda_context) == {"batchItemFailures": []}
    assert len(openai.calls()) == 1
