"""Every file in events/ through its function's handler, as `sam local invoke -e` would run it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import boto3
import pytest

from memagent.memory.person import person_key
from memagent.providers.whasp import sign
from tests.conftest import AGENT, MAYA, TEST_SECRET, load_function, seed_turns
from tests.integration.webhook_calls import webhook_env

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
    assert "compactor-retry-job.json" in names


@pytest.mark.parametrize("path", WEBHOOK_EVENTS, ids=lambda p: p.name)
def test_webhook_events(path, resources, monkeypatch, lambda_context):
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    response = webhook.handler(resigned(path), lambda_context)
    assert response["statusCode"] == 200
    queued = (
        boto3.client("sqs")
        .receive_message(QueueUrl=resources.queue_urls["EventQueue"], MaxNumberOfMessages=10)
        .get("Messages", [])
    )
    assert len(queued) == (0 if "other-type" in path.name else 1)


def test_webhook_events_as_committed_are_refused_once_stale(resources, monkeypatch, lambda_context):
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    event = json.loads((EVENTS / "webhook-message-received.json").read_text())
    event["headers"]["webhook-timestamp"] = str(int(time.time()) - 3600)
    assert webhook.handler(event, lambda_context)["statusCode"] == 401


def test_consumer_batch_event(consumer, whasp, lambda_context):
    event = json.loads((EVENTS / "consumer-sqs-batch.json").read_text())
    response = consumer.handler(event, lambda_context)
    assert response == {"batchItemFailures": []}
    people = [json.loads(r["body"])["data"]["chat"] for r in event["Records"]]
    # Maya's two lines in the batch are one burst: one reply to them, then one to Sam
    assert [s["to"] for s in whasp.sent] == list(dict.fromkeys(people))


def test_compactor_stream_event(compactor_env, monkeypatch, openai, lambda_context):
    compactor = load_function("compactor", compactor_env, monkeypatch)
    # given the person in the sample record has 45 turns waiting
    seed_turns(compactor.compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    openai.responder = lambda request: json.dumps({"summary": "Earlier chat.", "facts": []})
    event = json.loads((EVENTS / "compactor-stream-record.json").read_text())
    assert compactor.handler(event, lambda_context) == {"batchItemFailures": []}
    assert len(openai.calls()) == 1


def test_compactor_retry_job_event(compactor_env, monkeypatch, openai, lambda_context):
    compactor = load_function("compactor", compactor_env, monkeypatch)
    # given the person of the sample job has 45 turns waiting: their compaction failed earlier
    seed_turns(compactor.compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    openai.responder = lambda request: json.dumps({"summary": "Earlier chat.", "facts": []})
    # when their job comes back from CompactionFailureQueue, then it is folded now
    event = json.loads((EVENTS / "compactor-retry-job.json").read_text())
    assert compactor.handler(event, lambda_context) == {"batchItemFailures": []}
    assert len(openai.calls()) == 1
    assert compactor.compactor.store.load(person_key(AGENT, MAYA)).state.marker == 25


# ------------------------------------------------------------------ Meta samples

META_WEBHOOK_EVENTS = sorted(EVENTS.glob("meta-webhook-*.json"))
META_QUEUED = {  # sample -> events it queues (one per message; a `sent` status of ours)
    "meta-webhook-messages.json": 3,
    "meta-webhook-status-sent.json": 1,
    "meta-webhook-user-changed-user-id.json": 1,
    # Coexistence: what staff typed in the app (its edit is acknowledged, not queued), and the
    # app's history and contacts syncs (acknowledged, nothing queued)
    "meta-webhook-smb-message-echoes.json": 1,
    "meta-webhook-history.json": 0,
    "meta-webhook-smb-app-state-sync.json": 0,
}


def meta_webhook(resources, monkeypatch, app_secret: str) -> object:
    from devstack.events import META_TEST_VERIFY_TOKEN

    return load_function(
        "webhook",
        {
            "PROVIDER": "meta",
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "AGENT_ID": "coach",
            "META_APP_SECRET": app_secret,
            "META_VERIFY_TOKEN": META_TEST_VERIFY_TOKEN,
        },
        monkeypatch,
    )


def queued_count(resources) -> int:
    sqs = boto3.client("sqs")
    count = 0
    while batch := sqs.receive_message(
        QueueUrl=resources.queue_urls["EventQueue"], MaxNumberOfMessages=10
    ).get("Messages", []):
        count += len(batch)
    return count


def test_meta_samples_cover_notifications_and_the_subscription_check():
    assert {p.name for p in META_WEBHOOK_EVENTS} == {*META_QUEUED, "meta-webhook-verify.json"}


@pytest.mark.parametrize("name", sorted(META_QUEUED))
def test_meta_webhook_samples_as_committed(name, resources, monkeypatch, lambda_context):
    from devstack.events import META_TEST_APP_SECRET

    webhook = meta_webhook(resources, monkeypatch, META_TEST_APP_SECRET)
    event = json.loads((EVENTS / name).read_text())
    # Meta's signature has no timestamp: the committed sample stays valid
    assert webhook.handler(event, lambda_context)["statusCode"] == 200
    assert queued_count(resources) == META_QUEUED[name]


def test_meta_subscription_check_sample(resources, monkeypatch, lambda_context):
    from devstack.events import META_TEST_APP_SECRET

    webhook = meta_webhook(resources, monkeypatch, META_TEST_APP_SECRET)
    event = json.loads((EVENTS / "meta-webhook-verify.json").read_text())
    response = webhook.handler(event, lambda_context)
    assert (response["statusCode"], response["body"]) == (200, "1158201444")


def test_sign_events_signs_both_providers_samples(tmp_path, resources, monkeypatch, lambda_context):
    import shutil

    from scripts.sign_events import main as sign_events

    for path in [*WEBHOOK_EVENTS, *META_WEBHOOK_EVENTS]:
        shutil.copy(path, tmp_path / path.name)
    # when an operator re-signs the samples with their own secrets
    other_whasp = "whsec_" + __import__("base64").b64encode(b"an-operators-own-secret").decode()
    assert (
        sign_events(
            [
                "--secret",
                other_whasp,
                "--meta-app-secret",
                "their-app-secret",
                "--events-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    # then a Meta webhook with that app secret accepts them, and one with ours refuses them
    for name in META_QUEUED:
        event = json.loads((tmp_path / name).read_text())
        theirs = meta_webhook(resources, monkeypatch, "their-app-secret")
        assert theirs.handler(event, lambda_context)["statusCode"] == 200
        from devstack.events import META_TEST_APP_SECRET

        ours = meta_webhook(resources, monkeypatch, META_TEST_APP_SECRET)
        assert ours.handler(event, lambda_context)["statusCode"] == 401
    # and the whasp samples carry fresh signatures by the other secret
    event = json.loads((tmp_path / "webhook-message-received.json").read_text())
    headers = event["headers"]
    assert headers["webhook-signature"] == sign(
        other_whasp,
        headers["webhook-id"],
        int(headers["webhook-timestamp"]),
        event["body"].encode(),
    )
