"""The Meta WhatsApp Cloud API provider, end to end through the handlers: signed Meta-shaped
POSTs into the webhook handler, moto's SQS FIFO over HTTP, the consumer handler fed from that
queue, moto's DynamoDB, the local OpenAI stand-in and the local Graph API stand-in.

Payload shapes follow Meta's webhook reference and the `pywa` library's fixtures."""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stdout
from typing import Any

import boto3
import pytest

from devstack.events import (
    META_NUMBER_ID,
    http_event,
    meta_body,
    meta_challenge_event,
    meta_contact,
    meta_headers,
    meta_message,
    meta_notification,
    meta_status,
)
from devstack.lambda_harness import retried, sqs_message_record
from memagent.memory.person import person_key
from memagent.providers import TEST_PERSON
from tests.conftest import AGENT, dynamodb_table, load_function, reset_for_each_test
from tests.integration.faults import crash_after, crash_before
from tests.integration.test_lifecycle import only_the_mark

APP_SECRET = "meta-test-app-secret"
VERIFY_TOKEN = "meta-test-verify-token"
ACCESS_TOKEN = "meta-test-access-token"
MAYA_PHONE = "+447700900123"
MAYA_BSUID = "GB.13491208655302741918"
MAYA_NEW_BSUID = "GB.99491208655302741000"
SAM_PHONE = "+447700900456"
SAM_BSUID = "GB.55500011122233344455"
NOW = int(time.time()) - 3600  # an hour ago, in Unix seconds


@pytest.fixture(scope="session")
def graph_server() -> Any:
    from devstack.fake_meta import FakeGraph

    with FakeGraph(access_token=ACCESS_TOKEN, numbers={META_NUMBER_ID}) as server:
        yield server


graph = reset_for_each_test("graph_server", name="graph")


@pytest.fixture
def webhook(resources, monkeypatch) -> Any:
    return load_function(
        "webhook",
        {
            "PROVIDER": "meta",
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "AGENT_ID": AGENT,
            "META_APP_SECRET": APP_SECRET,
            "META_VERIFY_TOKEN": VERIFY_TOKEN,
        },
        monkeypatch,
    )


@pytest.fixture
def meta_consumer_env(resources, openai, graph) -> dict[str, str]:
    """A Meta stack's consumer environment (the voice and document tests add their settings)."""
    return {
        "PROVIDER": "meta",
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "META_GRAPH_URL": graph.url,
        "META_ACCESS_TOKEN": ACCESS_TOKEN,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_MODEL": "gpt-6-luna",
        "OPENAI_BASE_URL": f"{openai.url}/v1",
        "SYSTEM_PROMPT": "You are Coach, a warm running coach.",
        "PARKING_QUEUE_URL": resources.queue_urls["EventDeadLetterQueue"],
        "LEDGER_TTL_DAYS": "3650",
    }


@pytest.fixture
def consumer(meta_consumer_env, monkeypatch) -> Any:
    return load_function("consumer", meta_consumer_env, monkeypatch)


def post(webhook, notification: dict, lambda_context, *, body: bytes | None = None, **headers):
    body = meta_body(notification) if body is None else body
    signed = {**meta_headers(body, app_secret=APP_SECRET), **headers}
    response = webhook.handler(http_event(body, signed), lambda_context)
    return response["statusCode"]


class Queue:
    """The event queue as the consumer's event source mapping sees it (moto over HTTP)."""

    def __init__(self, resources):
        self.sqs = boto3.client("sqs")
        self.url = resources.queue_urls["EventQueue"]
        self.arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        self.held: list[dict] = []  # failed records, invisible until `release`

    def peek(self) -> list[dict]:
        """Every visible message, left on the queue (visibility 0 again at once)."""
        seen = self._receive()
        for message in seen:
            self.sqs.change_message_visibility(
                QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        return seen

    def _receive(self) -> list[dict]:
        messages = []
        while batch := self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", []):
            messages.extend(batch)
        return messages

    def deliver(self, consumer, lambda_context) -> int:
        """Hand every visible message to the consumer in one batch, as Lambda would; delete the
        ones that succeeded; hold the failed ones (in flight) until `release`. Returns the
        number of failed records."""
        messages = self._receive()
        if not messages:
            return 0
        batch = {"Records": [sqs_message_record(m, self.arn) for m in messages]}
        failed = set(retried(consumer.handler, batch, lambda_context))
        for message in messages:
            if message["MessageId"] in failed:
                self.held.append(message)
            else:
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
        return len(failed)

    def release(self) -> None:
        """The failed records' retry time has come (the failure-timing backoff, scaled)."""
        for message in self.held:
            self.sqs.change_message_visibility(
                QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )
        self.held.clear()

    def drain(self, consumer, lambda_context, *, rounds: int = 6) -> int:
        """Deliver until nothing is left, releasing failures between rounds; return failures."""
        failures = 0
        for _ in range(rounds):
            failures += self.deliver(consumer, lambda_context)
            if not self.held and not self.peek():
                break
            self.release()
        return failures


@pytest.fixture
def queue(resources) -> Queue:
    return Queue(resources)


def text_from(text: str, *, phone=None, bsuid=None, at: int = NOW, wamid=None) -> dict:
    """A one-message notification from a person, with their contact entry."""
    return meta_notification(
        contacts=[meta_contact(phone=phone, bsuid=bsuid)],
        messages=[meta_message(text, phone=phone, bsuid=bsuid, timestamp=at, wamid=wamid)],
    )


def memory_rows(resources, identifier: str) -> list[dict]:
    table = dynamodb_table(resources.table_name)
    from boto3.dynamodb.conditions import Key

    pk = person_key(AGENT, identifier)
    return table.query(KeyConditionExpression=Key("pk").eq(pk), ConsistentRead=True)["Items"]


# ------------------------------------------------------------------ verification and signature


def test_subscription_check_answers_the_challenge_only_with_our_token(webhook, lambda_context):
    good = {
        "hub.mode": "subscribe",
        "hub.challenge": "1158201444",
        "hub.verify_token": VERIFY_TOKEN,
    }
    response = webhook.handler(meta_challenge_event(good), lambda_context)
    # then Meta gets its challenge back, raw, as plain text
    assert response["statusCode"] == 200
    assert response["body"] == "1158201444"
    assert response["headers"]["Content-Type"].startswith("text/plain")
    for params in (
        {**good, "hub.verify_token": "someone-elses-token"},
        {k: v for k, v in good.items() if k != "hub.verify_token"},
        {**good, "hub.mode": "unsubscribe"},
    ):
        response = webhook.handler(meta_challenge_event(params), lambda_context)
        assert response["statusCode"] in (401, 403)
        assert "1158201444" not in (response.get("body") or "")


def test_a_wrong_or_missing_signature_is_401_and_queues_nothing(webhook, queue, lambda_context):
    notification = text_from("hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID)
    body = meta_body(notification)
    wrong = "sha256=" + "0" * 64
    for headers in ({"x-hub-signature-256": wrong}, {}):
        response = webhook.handler(http_event(body, headers), lambda_context)
        assert response["statusCode"] == 401
    # signed with another app's secret
    from memagent.providers.meta import sign

    other = {"x-hub-signature-256": sign("another-apps-secret", body)}
    assert webhook.handler(http_event(body, other), lambda_context)["statusCode"] == 401
    assert queue.peek() == []


def test_a_body_reserialised_with_other_unicode_escaping_fails_the_check(
    webhook, queue, lambda_context
):
    # given Meta signs its body with non-ASCII escaped as \\uXXXX
    notification = text_from("Olá, ¿qué tal? 🏃", phone=MAYA_PHONE, bsuid=MAYA_BSUID)
    signed_body = meta_body(notification)
    assert b"\\u00e1" in signed_body
    signature = meta_headers(signed_body, app_secret=APP_SECRET)
    # when the same JSON arrives re-serialised with raw UTF-8, under Meta's signature
    reserialised = json.dumps(notification, ensure_ascii=False).encode()
    assert json.loads(reserialised) == json.loads(signed_body)
    response = webhook.handler(http_event(reserialised, signature), lambda_context)
    # then the check fails; the bytes Meta signed pass
    assert response["statusCode"] == 401
    assert queue.peek() == []
    assert webhook.handler(http_event(signed_body, signature), lambda_context)["statusCode"] == 200
    assert len(queue.peek()) == 1


# ------------------------------------------------------------------ fan-out and duplicates


def test_three_messages_from_two_people_are_three_events_in_two_groups_answered_once(
    webhook, queue, consumer, graph, openai, lambda_context
):
    notification = meta_notification(
        contacts=[
            meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID),
            meta_contact(phone=SAM_PHONE, bsuid=SAM_BSUID, name="Sam"),
        ],
        messages=[
            meta_message("Hi, I'm Maya", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW),
            meta_message("Hi, I'm Sam", phone=SAM_PHONE, bsuid=SAM_BSUID, timestamp=NOW + 1),
            meta_message("I run on Sundays", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 2),
        ],
    )
    # when Meta posts one notification carrying three messages
    assert post(webhook, notification, lambda_context) == 200
    queued = queue.peek()
    # then three events are queued, in two FIFO groups (one per person, by phone, hashed)
    assert len(queued) == 3
    groups = {m["Attributes"]["MessageGroupId"] for m in queued}
    assert groups == {person_key(AGENT, MAYA_PHONE), person_key(AGENT, SAM_PHONE)}
    for message in queued:  # each queued body is a one-message notification in Meta's shape
        value = json.loads(message["Body"])["entry"][0]["changes"][0]["value"]
        assert len(value["messages"]) == 1
        assert MAYA_PHONE.lstrip("+") not in message["Attributes"]["MessageGroupId"]
    assert queue.drain(consumer, lambda_context) == 0
    # Maya's two messages arrive in one batch: one burst, one reply to both (issue 15)
    assert sorted(s["to"] for s in graph.sent) == sorted(
        [MAYA_PHONE.lstrip("+"), SAM_PHONE.lstrip("+")]
    )
    model_calls = len(openai.calls())
    # when Meta delivers the same POST again (its retries can duplicate)
    assert post(webhook, notification, lambda_context) == 200
    queue.drain(consumer, lambda_context)
    # then no new turn and no new reply
    assert len(graph.sent) == 2
    assert len(openai.calls()) == model_calls


def test_statuses_errors_and_unknown_fields_are_acknowledged(webhook, queue, lambda_context):
    delivered = meta_notification(
        statuses=[meta_status("wamid.ours1", "delivered", phone=MAYA_PHONE, callback="reply:x:0")]
    )
    unknown = meta_notification(field="account_update")
    unknown["entry"][0]["changes"][0]["value"] = {"phone_number": "x", "event": "VERIFIED"}
    failed = meta_notification(
        statuses=[meta_status("wamid.f", "failed", phone=MAYA_PHONE, error_code=131047)]
    )
    out = io.StringIO()
    with redirect_stdout(out):
        for notification in (delivered, unknown, failed):
            assert post(webhook, notification, lambda_context) == 200
    assert queue.peek() == []  # nothing to do for them
    # the failed reply is counted, with its code, not lost silently
    metrics = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    failures = [m for m in metrics if "ProviderDeliveryFailed" in m]
    assert [m["code"] for m in failures] == ["131047"]


# ------------------------------------------------------------------ replies and identity


def test_a_text_gets_one_reply_from_the_receiving_number_to_the_phone(
    webhook, queue, consumer, graph, lambda_context
):
    assert (
        post(webhook, text_from("Hello coach", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
        == 200
    )
    assert queue.drain(consumer, lambda_context) == 0
    [sent] = graph.sent
    assert (sent["from"], sent["field"], sent["to"]) == (META_NUMBER_ID, "to", "447700900123")
    [request] = [r for r in graph.requests if r["method"] == "POST" and "status" not in r["json"]]
    assert request["path"] == f"/{META_NUMBER_ID}/messages"
    # the stand-in refuses any other token (Meta's code 190), so this also proves the Bearer
    assert sent["callback"].startswith("reply:wamid.")


def test_a_bsuid_only_message_gets_one_reply_to_the_recipient(
    webhook, queue, consumer, graph, lambda_context
):
    # given a person with a username, whose message carries no wa_id and no from
    assert post(webhook, text_from("Hi there", bsuid=MAYA_BSUID), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    [sent] = graph.sent
    assert (sent["field"], sent["to"]) == ("recipient", MAYA_BSUID)


def test_phone_then_phone_and_bsuid_then_bsuid_only_is_one_memory(
    webhook, queue, consumer, openai, graph, lambda_context
):
    steps = [
        text_from("My dog is called Biscuit", phone=MAYA_PHONE, at=NOW),
        text_from("I run every Sunday", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 60),
        text_from("What's my dog's name?", bsuid=MAYA_BSUID, at=NOW + 120),
    ]
    for notification in steps:
        assert post(webhook, notification, lambda_context) == 200
        assert queue.drain(consumer, lambda_context) == 0
    # then the model's context for the third message holds the first
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == ["My dog is called Biscuit", "I run every Sunday", "What's my dog's name?"]
    assert len(graph.sent) == 3


def test_user_changed_user_id_moves_the_memory_to_the_new_id(
    webhook, queue, consumer, openai, graph, lambda_context
):
    assert (
        post(webhook, text_from("I'm training for Berlin", bsuid=MAYA_BSUID), lambda_context) == 200
    )
    queue.drain(consumer, lambda_context)
    # when Meta reports that Maya's BSUID was regenerated (a system message: no contacts)
    change = meta_notification(
        messages=[
            {
                "from_user_id": MAYA_BSUID,
                "id": "wamid.SYSTEM0001",
                "timestamp": str(NOW + 30),
                "type": "system",
                "system": {
                    "body": "User A changed their business-scoped user ID",
                    "type": "user_changed_user_id",
                    "user_id": MAYA_NEW_BSUID,
                    "previous_user_id": MAYA_BSUID,
                },
            }
        ]
    )
    assert post(webhook, change, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert len(graph.sent) == 1  # a system message gets no reply
    # and she writes under the new id only
    assert (
        post(
            webhook,
            text_from("Which race again?", bsuid=MAYA_NEW_BSUID, at=NOW + 60),
            lambda_context,
        )
        == 200
    )
    assert queue.drain(consumer, lambda_context) == 0
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == ["I'm training for Berlin", "Which race again?"]
    assert graph.sent[-1]["to"] == MAYA_NEW_BSUID


def number_change(wamid: str, *, at: int) -> dict[str, Any]:
    """Meta's `user_changed_number` system message for Maya, +447700900123 -> +447700900999
    (the shape in pywa's fixtures, system.json)."""
    return meta_notification(
        messages=[
            {
                "from": MAYA_PHONE.lstrip("+"),
                "id": wamid,
                "timestamp": str(at),
                "type": "system",
                "system": {
                    "body": "User A changed from 447700900123 to 447700900999",
                    "wa_id": "447700900999",
                    "type": "user_changed_number",
                },
            }
        ]
    )


def test_user_changed_number_keeps_the_memory_for_the_new_phone(
    webhook, queue, consumer, openai, lambda_context
):
    assert post(webhook, text_from("I'm Maya", phone=MAYA_PHONE, at=NOW), lambda_context) == 200
    queue.drain(consumer, lambda_context)
    change = number_change("wamid.SYSTEM0002", at=NOW + 30)
    assert post(webhook, change, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert (
        post(webhook, text_from("Still me", phone="+447700900999", at=NOW + 60), lambda_context)
        == 200
    )
    assert queue.drain(consumer, lambda_context) == 0
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == ["I'm Maya", "Still me"]


def test_forget_and_export_accept_either_identifier(
    webhook, queue, consumer, resources, lambda_context
):
    from memagent.lifecycle.rights import export, forget

    for notification in (
        text_from("I live in Leeds", phone=MAYA_PHONE, at=NOW),
        text_from("And I run", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 60),
    ):
        post(webhook, notification, lambda_context)
        queue.drain(consumer, lambda_context)
    store = consumer.consumer.agent.store
    by_bsuid = export(store, AGENT, MAYA_BSUID)
    assert [m["text"] for m in by_bsuid["messages"] if m["role"] == "user"] == [
        "I live in Leeds",
        "And I run",
    ]
    assert export(store, AGENT, MAYA_PHONE)["person"] == by_bsuid["person"]
    # when she asks to be forgotten by her BSUID
    forget(store, AGENT, MAYA_BSUID)
    # then nothing is left under either identifier but content-free erasure marks
    for identifier in (MAYA_PHONE, MAYA_BSUID):
        rows = memory_rows(resources, identifier)
        assert [only_the_mark(r) for r in rows] in ([], [True])
    assert export(store, AGENT, MAYA_BSUID)["messages"] == []


def test_after_an_erasure_a_new_memory_is_found_by_either_identifier_again(
    webhook, queue, consumer, resources, lambda_context
):
    from datetime import UTC, datetime

    from memagent.lifecycle.rights import export, forget

    post(webhook, text_from("I live in Leeds", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    queue.drain(consumer, lambda_context)
    store = consumer.consumer.agent.store
    forget(store, AGENT, MAYA_BSUID, at=datetime.fromtimestamp(NOW + 30, UTC))
    # when she writes again after the erasure, with both identifiers
    again = text_from("Starting over", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 60)
    post(webhook, again, lambda_context)
    assert queue.drain(consumer, lambda_context) == 0
    # then her new memory is exported and erased by her phone as by her BSUID
    for identifier in (MAYA_PHONE, MAYA_BSUID):
        said = [m["text"] for m in export(store, AGENT, identifier)["messages"]]
        assert said[0] == "Starting over"
    forget(store, AGENT, MAYA_PHONE)
    for identifier in (MAYA_PHONE, MAYA_BSUID):
        rows = memory_rows(resources, identifier)
        assert [only_the_mark(r) for r in rows] in ([], [True])


def test_the_admin_api_exports_and_forgets_by_bsuid(
    webhook, queue, consumer, resources, monkeypatch, lambda_context
):
    from tests.integration.test_lifecycle import admin_event

    admin = load_function(
        "admin", {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT}, monkeypatch
    )
    post(webhook, text_from("I live in Leeds", phone=MAYA_PHONE, at=NOW), lambda_context)
    post(webhook, text_from("Hi", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 9), lambda_context)
    queue.drain(consumer, lambda_context)
    response = admin.handler(admin_event("GET", MAYA_BSUID), lambda_context)
    assert response["statusCode"] == 200
    said = [m["text"] for m in json.loads(response["body"])["messages"] if m["role"] == "user"]
    assert said == ["I live in Leeds", "Hi"]
    response = admin.handler(admin_event("DELETE", MAYA_BSUID), lambda_context)
    assert response["statusCode"] == 200
    assert json.loads(response["body"])["removed"] > 4
    for identifier in (MAYA_PHONE, MAYA_BSUID):
        assert all(only_the_mark(r) for r in memory_rows(resources, identifier))
    # something that is neither a phone nor a BSUID is refused
    assert admin.handler(admin_event("GET", "gb.123"), lambda_context)["statusCode"] == 400


# ------------------------------------------------------------------ errors and the send window


def test_rate_limited_send_is_retried_and_answered_once(
    webhook, queue, consumer, graph, openai, lambda_context
):
    graph.fail_next(1, code=130429, status=400)  # Meta's rate limit, decided on the code
    post(webhook, text_from("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    # the first attempt fails (retried after the failure-timing backoff), the second succeeds
    assert queue.deliver(consumer, lambda_context) == 1
    assert graph.sent == []
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    assert len(graph.sent) == 1
    assert len(openai.calls()) == 1  # the reply was stored once and re-sent, not regenerated


def test_a_closed_24_hour_window_parks_the_reply_with_a_metric_and_no_retry(
    webhook, queue, consumer, graph, resources, lambda_context
):
    graph.fail_next(1, code=131047, status=400)
    post(webhook, text_from("Hello again", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    out = io.StringIO()
    with redirect_stdout(out):
        failed = queue.deliver(consumer, lambda_context)
    assert failed == 0  # not retried: retrying cannot help
    assert graph.sent == []
    [entry] = [r for r in memory_rows(resources, MAYA_BSUID) if r["sk"].startswith("EVT#")]
    assert (entry["status"], int(entry["error_code"])) == ("parked", 131047)
    assert '"ReplyParked"' in out.getvalue()
    assert queue.peek() == []


def test_a_crash_after_meta_answered_then_a_sent_status_does_not_send_again(
    webhook, queue, consumer, graph, monkeypatch, lambda_context
):
    # given Meta accepts and delivers the reply, and the Lambda dies before our bookkeeping
    provider = consumer.consumer.agent.provider
    crash_after(provider, "send_text", monkeypatch, fault=RuntimeError)
    post(webhook, text_from("Are you there?", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    assert queue.deliver(consumer, lambda_context) == 1  # the record failed; it will come back
    [sent] = graph.sent
    # when Meta's `sent` status arrives (with our callback data) before the retry
    status = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)],
        statuses=[
            meta_status(
                sent["id"], "sent", phone=MAYA_PHONE, bsuid=MAYA_BSUID, callback=sent["callback"]
            )
        ],
    )
    assert post(webhook, status, lambda_context) == 200
    assert queue.deliver(consumer, lambda_context) == 0  # the status runs in its own group
    # and the message is redelivered
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    # then it is not sent again
    assert len(graph.sent) == 1


def test_an_operator_reply_whose_sent_status_arrived_is_not_sent_again_by_the_retry(
    webhook, queue, consumer, graph, resources, monkeypatch, lambda_context
):
    """The operator's send keys (memagent.operator.handoff.reply_event: the person and the
    Idempotency-Key) come back in Meta's status webhooks and find the reply's ledger entry."""
    from devstack.lambda_harness import LambdaContext
    from memagent.providers.meta import GraphClient
    from tests.integration.test_operator import call, person

    # given Maya talked to the agent, and an operator took her chat over
    post(webhook, text_from("Is anyone there?", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    assert queue.deliver(consumer, lambda_context) == 0
    admin = load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": AGENT,
            "PROVIDER": "meta",
            "META_GRAPH_URL": graph.url,
            "META_ACCESS_TOKEN": ACCESS_TOKEN,
        },
        monkeypatch,
    )
    assert call(admin, lambda_context, "POST", f"{person(MAYA_PHONE)}/handoff")[0] == 200
    # when the operator's request dies at its deadline just after Meta accepted the reply
    crash_after(GraphClient, "send_text", monkeypatch, fault=RuntimeError)
    reply, key = {"text": "Yes, Sam here"}, {"idempotency-key": "sam-1"}
    with pytest.raises(RuntimeError):
        call(
            admin, LambdaContext(timeout=0), "POST", f"{person(MAYA_PHONE)}/messages", reply, **key
        )
    sent = graph.sent[-1]
    assert sent["text"] == "Yes, Sam here"
    # and Meta's `sent` status (with our callback data) arrives before the retry
    status = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)],
        statuses=[
            meta_status(
                sent["id"], "sent", phone=MAYA_PHONE, bsuid=MAYA_BSUID, callback=sent["callback"]
            )
        ],
    )
    assert post(webhook, status, lambda_context) == 200
    assert queue.deliver(consumer, lambda_context) == 0
    answer = call(admin, lambda_context, "POST", f"{person(MAYA_PHONE)}/messages", reply, **key)
    # then the retry answers sent, and Maya got the words once
    assert answer[0] == 200
    assert [s["text"] for s in graph.sent].count("Yes, Sam here") == 1


def test_without_a_status_the_crash_window_resends_once(
    webhook, queue, consumer, graph, monkeypatch, lambda_context
):
    """The documented window: Meta has no idempotency key, so a crash between its answer and
    our bookkeeping, with no status webhook before the retry, repeats the reply once."""
    provider = consumer.consumer.agent.provider
    crash_after(provider, "send_text", monkeypatch, fault=RuntimeError)  # after Meta answered
    post(webhook, text_from("Are you there?", phone=MAYA_PHONE), lambda_context)
    queue.deliver(consumer, lambda_context)
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    assert len(graph.sent) == 2
    assert graph.sent[0]["text"] == graph.sent[1]["text"]


def test_a_refused_token_is_alarmed_and_the_reply_retried_not_parked(
    webhook, queue, consumer, graph, lambda_context
):
    graph.fail_next(2, code=190, status=401)  # revoked: refused again after a fresh read
    post(webhook, text_from("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    out = io.StringIO()
    with redirect_stdout(out):
        assert queue.deliver(consumer, lambda_context) == 1
    assert '"ProviderAuthFailed"' in out.getvalue()
    # once an operator renewed it, the retry answers
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    assert len(graph.sent) == 1


def test_131050_records_the_opt_out(webhook, queue, consumer, graph, resources, lambda_context):
    graph.fail_next(1, code=131050, status=400)
    post(webhook, text_from("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID), lambda_context)
    assert queue.deliver(consumer, lambda_context) == 0
    state = next(r for r in memory_rows(resources, MAYA_BSUID) if r["sk"] == "STATE")
    assert state["opted_out"] is True


def test_a_long_reply_is_split_and_a_crash_between_parts_resends_only_the_rest(
    webhook, queue, consumer, graph, openai, monkeypatch, lambda_context
):
    openai.responder = lambda request: " ".join(["stride"] * 1200)  # 8,399 characters
    provider = consumer.consumer.agent.provider
    # Meta takes part 2 of 3; we die before recording it
    crash_after(provider, "send_text", monkeypatch, nth=2, fault=RuntimeError)
    post(webhook, text_from("Tell me everything", phone=MAYA_PHONE), lambda_context)
    assert queue.deliver(consumer, lambda_context) == 1
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    # then every part fits Meta's limit and carries its own send key; part 1 (recorded when Meta
    # answered) is not sent again, part 2 (unrecorded: the window) is, part 3 once
    # (a part ends at the last space within 4,096 characters: 585 words, 4,094 characters)
    full, rest = " ".join(["stride"] * 585), " ".join(["stride"] * 30)
    assert [s["text"] for s in graph.sent] == [full, full, full, rest]
    keys = [s["callback"].rsplit(":", 1)[1] for s in graph.sent]
    assert keys == ["0", "1", "1", "2"]


def test_reactions_and_other_system_messages_are_acknowledged_not_queued(
    webhook, queue, lambda_context
):
    reaction = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)],
        messages=[
            meta_message(
                phone=MAYA_PHONE,
                bsuid=MAYA_BSUID,
                kind="reaction",
                body={"message_id": "wamid.ours", "emoji": "\U0001f44d"},
            )
        ],
    )
    identity = meta_notification(  # pywa's system.json "identity_change"
        contacts=[meta_contact(phone=MAYA_PHONE)],
        messages=[
            {
                "from": MAYA_PHONE.lstrip("+"),
                "id": "wamid.IDENTITY",
                "timestamp": str(NOW),
                "identity": {"acknowledged": True, "created_timestamp": str(NOW), "hash": "xyz"},
                "system": {"body": "User identity changed", "type": "customer_identity_changed"},
                "type": "system",
            }
        ],
    )
    for notification in (reaction, identity):
        assert post(webhook, notification, lambda_context) == 200
    assert queue.peek() == []


# ------------------------------------------------------------------ media and typing


def test_a_voice_note_is_fetched_through_its_media_id_and_transcribed(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    audio = b"OggS" + b"\x00" * 2000
    media_id = graph.add_media(audio, "audio/ogg; codecs=opus")
    voice = meta_message(
        phone=MAYA_PHONE,
        bsuid=MAYA_BSUID,
        kind="audio",
        body={
            "mime_type": "audio/ogg; codecs=opus",
            "sha256": "E3dxS/PdYZE7ppA3pQ4mpCFaXBJ8pX4SRN/dsfvds/iPGA=",
            "id": media_id,
            "voice": True,
        },
        timestamp=NOW,
    )
    notification = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], messages=[voice]
    )
    post(webhook, notification, lambda_context)
    assert queue.drain(consumer, lambda_context) == 0
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == [f"[voice note] [offline transcription of {len(audio)} bytes]"]
    # the media id was looked up, then the short-lived URL downloaded with the token
    paths = [r["path"] for r in graph.requests if r["method"] == "GET"]
    assert paths[0] == f"/{media_id}" and paths[1].startswith("/download/")
    assert len(graph.sent) == 1


def test_typing_indicator_once_per_turn_and_its_failure_does_not_fail_the_turn(
    webhook, queue, consumer, graph, lambda_context
):
    notification = text_from("Morning!", phone=MAYA_PHONE, bsuid=MAYA_BSUID)
    wamid = notification["entry"][0]["changes"][0]["value"]["messages"][0]["id"]
    post(webhook, notification, lambda_context)
    queue.drain(consumer, lambda_context)
    assert [(r["message_id"], r["typing_indicator"]) for r in graph.reads] == [
        (wamid, {"type": "text"})
    ]
    assert graph.reads[0]["from"] == META_NUMBER_ID
    # a redelivery is no new turn: no second indicator
    post(webhook, notification, lambda_context)
    queue.drain(consumer, lambda_context)
    assert len(graph.reads) == 1
    # when the indicator call fails, the reply still goes out
    graph.fail_next(1, code=131000, status=500, kind="read")
    post(
        webhook,
        text_from("Still there?", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 5),
        lambda_context,
    )
    assert queue.drain(consumer, lambda_context) == 0
    assert len(graph.sent) == 2


def test_memory_reads_stay_one_query_and_one_more_only_for_a_linked_identifier(
    webhook, queue, consumer, lambda_context
):
    client = consumer.consumer.agent.store._client
    calls: list[str] = []
    client.meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
    )

    def reads(notification) -> list[str]:
        calls.clear()
        post(webhook, notification, lambda_context)
        queue.drain(consumer, lambda_context)
        return [c for c in calls if c in ("Query", "GetItem", "Scan", "BatchGetItem")]

    # a person who has always had a BSUID: one Query per turn, as with whasp
    reads(text_from("first", phone=SAM_PHONE, bsuid=SAM_BSUID, at=NOW))
    assert reads(text_from("second", phone=SAM_PHONE, bsuid=SAM_BSUID, at=NOW + 9)) == ["Query"]
    # a person whose BSUID arrived after their phone: their BSUID's key links to their memory,
    # one small Query to follow the link, then the one Query for the memory
    reads(text_from("first", phone=MAYA_PHONE, at=NOW))
    reads(text_from("second", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 9))
    assert reads(text_from("third", bsuid=MAYA_BSUID, at=NOW + 18)) == ["Query", "Query"]


def test_a_marketing_preference_is_recorded_for_a_known_person_only(
    webhook, queue, consumer, graph, resources, lambda_context
):
    post(webhook, text_from("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW), lambda_context)
    queue.drain(consumer, lambda_context)

    def preference(phone: str, bsuid: str | None, value: str, at: int) -> dict:
        notification = meta_notification(  # pywa's user_marketing_preferences.json shape
            contacts=[meta_contact(phone=phone, bsuid=bsuid)], field="user_preferences"
        )
        notification["entry"][0]["changes"][0]["value"]["user_preferences"] = [
            {
                "wa_id": phone.lstrip("+"),
                "detail": "User requested to stop marketing messages",
                "category": "marketing_messages",
                "value": value,
                "timestamp": at,
            }
        ]
        return notification

    assert (
        post(webhook, preference(MAYA_PHONE, MAYA_BSUID, "stop", NOW + 60), lambda_context) == 200
    )
    assert post(webhook, preference(SAM_PHONE, SAM_BSUID, "stop", NOW + 60), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    state = next(r for r in memory_rows(resources, MAYA_BSUID) if r["sk"] == "STATE")
    assert state["marketing"] == "stop"
    assert state["opted_out"] is False  # marketing only: her chat goes on
    # nothing is written for someone who never wrote to us
    assert memory_rows(resources, SAM_BSUID) == [] and memory_rows(resources, SAM_PHONE) == []
    # a later "resume" replaces her "stop"; a "stop" from before it, delivered late, does not
    for value, at in (("resume", NOW + 120), ("stop", NOW + 100)):
        post(webhook, preference(MAYA_PHONE, MAYA_BSUID, value, at), lambda_context)
        assert queue.drain(consumer, lambda_context) == 0
    state = next(r for r in memory_rows(resources, MAYA_BSUID) if r["sk"] == "STATE")
    assert state["marketing"] == "resume"
    post(
        webhook,
        text_from("Still here", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 90),
        lambda_context,
    )
    queue.drain(consumer, lambda_context)
    assert len(graph.sent) == 2


def test_a_marketing_preference_leaves_no_phone_or_bsuid_in_the_logs(
    webhook, queue, consumer, monkeypatch, lambda_context
):
    post(webhook, text_from("Hello", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW), lambda_context)
    queue.drain(consumer, lambda_context)
    notification = meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], field="user_preferences"
    )
    notification["entry"][0]["changes"][0]["value"]["user_preferences"] = [
        {
            "wa_id": MAYA_PHONE.lstrip("+"),
            "detail": "User requested to stop marketing messages",
            "category": "marketing_messages",
            "value": "stop",
            "timestamp": NOW + 60,
        }
    ]
    from memagent.observability import logger

    out = io.StringIO()
    # the Powertools handler's own stream: its JSON lines, with every appended key
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    assert post(webhook, notification, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    logs = out.getvalue()
    assert '"webhook accepted"' in logs and '"marketing preference"' in logs
    assert MAYA_PHONE.lstrip("+") not in logs
    assert MAYA_BSUID not in logs


def test_a_late_identity_change_from_before_an_erasure_links_nothing(
    webhook, queue, consumer, resources, lambda_context
):
    from datetime import UTC, datetime

    from memagent.lifecycle.rights import forget

    post(webhook, text_from("I'm Maya", phone=MAYA_PHONE, at=NOW), lambda_context)
    queue.drain(consumer, lambda_context)
    forget(
        consumer.consumer.agent.store, AGENT, MAYA_PHONE, at=datetime.fromtimestamp(NOW + 60, UTC)
    )
    # when Meta's number change, made before the erasure, arrives after it
    change = number_change("wamid.SYSTEM0003", at=NOW + 30)
    assert post(webhook, change, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then nothing is written: the erased person keeps only the mark, the new phone nothing
    assert [only_the_mark(r) for r in memory_rows(resources, MAYA_PHONE)] == [True]
    assert memory_rows(resources, "+447700900999") == []


def test_messages_with_and_without_the_bsuid_share_the_persons_fifo_group(
    webhook, queue, lambda_context
):
    # a person's messages, with the phone alone, then with the phone and the BSUID
    post(webhook, text_from("first", phone=MAYA_PHONE, at=NOW), lambda_context)
    post(
        webhook, text_from("second", phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=NOW + 1), lambda_context
    )
    # then they wait in one FIFO group, so they are processed one at a time, in order
    groups = {m["Attributes"]["MessageGroupId"] for m in queue.peek()}
    assert groups == {person_key(AGENT, MAYA_PHONE)}


def test_no_memory_is_started_in_a_key_linked_to_another_person(resources):
    from datetime import UTC, datetime, timedelta

    import pytest

    from memagent.errors import ConcurrentUpdate
    from memagent.memory.types import PersonState, Turn
    from memagent.store.memory_store import MemoryStore

    store = MemoryStore(resources.table_name)
    phone, bsuid = person_key(AGENT, MAYA_PHONE), person_key(AGENT, MAYA_BSUID)
    # given the phone's key became a link to the BSUID's memory after a turn read it as empty
    store.attach(phone, bsuid, own=PersonState())
    turn = Turn(seq=1, role="user", text="hi", at=datetime.now(UTC), event_id="wamid.race")
    # then the turn's first write is refused (the retry reads again and follows the link)
    with pytest.raises(ConcurrentUpdate):
        store.remember_inbound(
            phone,
            previous=PersonState(),
            turn=turn,
            event_time=turn.at,
            compact=False,
            ledger_ttl=timedelta(days=1),
        )
    assert [r["sk"] for r in memory_rows(resources, MAYA_PHONE)] == ["STATE"]


def test_a_crash_after_the_goodbye_erases_on_retry_without_a_second_goodbye(
    webhook, queue, consumer, graph, resources, monkeypatch, lambda_context
):
    from memagent.turn.replies import built_in

    goodbye = built_in().text("forgotten", "en")

    post(webhook, text_from("forget me", phone=MAYA_PHONE, at=NOW), lambda_context)
    queue.drain(consumer, lambda_context)
    died = RuntimeError("the Lambda died after Meta took the goodbye")
    crash_before(consumer.consumer.agent, "_forget", monkeypatch, died)
    post(webhook, text_from("yes", phone=MAYA_PHONE, at=NOW + 10), lambda_context)
    assert queue.deliver(consumer, lambda_context) == 1
    # when the confirmation is redelivered
    queue.release()
    assert queue.deliver(consumer, lambda_context) == 0
    # then Maya is forgotten, and got the goodbye once (Meta has no idempotency key)
    assert [s["text"] for s in graph.sent].count(goodbye) == 1
    assert [only_the_mark(r) for r in memory_rows(resources, MAYA_PHONE)] == [True]


# ------------------------------------------------------------------ queueing a POST


def many_messages(count: int) -> dict:
    people = [(f"+4477009{n:05d}", f"GB.{n:020d}") for n in range(count)]
    return meta_notification(
        contacts=[meta_contact(phone=p, bsuid=b) for p, b in people],
        messages=[
            meta_message(f"hello {n}", phone=p, bsuid=b, timestamp=NOW + n)
            for n, (p, b) in enumerate(people)
        ],
    )


def test_a_post_of_twelve_messages_is_queued_in_two_batch_calls(
    webhook, queue, monkeypatch, lambda_context
):
    calls: list[str] = []
    sqs = webhook.queue._sqs  # the webhook's own sender (memagent.aws.sqs): boto3's call shapes

    def counting(name: str) -> Any:
        send = getattr(sqs, name)

        def counted(**members: Any) -> Any:
            calls.append(name)
            return send(**members)

        return counted

    for name in ("send_message", "send_message_batch"):
        monkeypatch.setattr(sqs, name, counting(name))
    assert post(webhook, many_messages(12), lambda_context) == 200
    assert calls == ["send_message_batch", "send_message_batch"]
    assert len(queue.peek()) == 12


def test_an_entry_sqs_refuses_is_a_503_and_metas_retry_queues_each_message_once(
    webhook, queue, monkeypatch, lambda_context
):
    sqs = webhook.queue._sqs
    original = sqs.send_message_batch

    def refuse_the_last(**kwargs):
        *taken, last = kwargs["Entries"]
        response = original(**{**kwargs, "Entries": taken})
        monkeypatch.setattr(sqs, "send_message_batch", original)
        return {**response, "Failed": [{"Id": last["Id"], "Code": "InternalError"}]}

    monkeypatch.setattr(sqs, "send_message_batch", refuse_the_last)
    notification = many_messages(3)
    # when SQS takes two of the three messages
    assert post(webhook, notification, lambda_context) == 503
    # then Meta retries the POST, and each message is queued once
    assert post(webhook, notification, lambda_context) == 200
    bodies = [json.loads(m["Body"]) for m in queue.peek()]
    texts = sorted(
        b["entry"][0]["changes"][0]["value"]["messages"][0]["text"]["body"] for b in bodies
    )
    assert texts == ["hello 0", "hello 1", "hello 2"]


def test_an_unsigned_post_is_a_401_before_the_app_secret_is_read(
    resources, queue, monkeypatch, lambda_context, aws_retry_pauses
):
    # given an app secret in a parameter that cannot be read (every read would be a 503)
    monkeypatch.delenv("META_APP_SECRET", raising=False)
    webhook = load_function(
        "webhook",
        {
            "PROVIDER": "meta",
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "AGENT_ID": AGENT,
            "META_APP_SECRET_PARAM": "/missing/meta-app-secret",
            "META_VERIFY_TOKEN": VERIFY_TOKEN,
        },
        monkeypatch,
    )
    body = meta_body(text_from("hello", phone=MAYA_PHONE))
    # then an unsigned request is refused as unsigned, without touching the secret store
    assert webhook.handler(http_event(body, {}), lambda_context)["statusCode"] == 401
    # while a signed one does need the secret, and fails closed
    assert post(webhook, text_from("hello", phone=MAYA_PHONE), lambda_context) == 503
    assert queue.peek() == []


def test_with_meta_the_test_person_gets_no_send_no_read_receipt_and_no_typing(
    webhook, resources, consumer, graph, openai, lambda_context
):
    # given the reserved test person and Maya write through Meta (wa_id form, without a "+")
    queue = Queue(resources)
    wamids = {TEST_PERSON: "wamid.TESTPERSON0001", MAYA_PHONE: "wamid.MAYA0001"}
    for phone, wamid in wamids.items():
        notification = text_from("Hello, is this thing on?", phone=phone, wamid=wamid)
        assert post(webhook, notification, lambda_context) == 200
    # when the consumer handles them
    assert queue.deliver(consumer, lambda_context) == 0
    # then both were answered in memory
    for phone in wamids:
        stored = memory_rows(resources, phone)
        assert [r["role"] for r in stored if r["sk"].startswith("MSG#")] == ["user", "assistant"]
    # and the Graph API saw one reply and one read receipt (with its typing indicator): Maya's
    assert [sent["to"] for sent in graph.sent] == [MAYA_PHONE.lstrip("+")]
    assert [read["message_id"] for read in graph.reads] == [wamids[MAYA_PHONE]]


# ------------------------------------------------------------------ what the console shows


def test_the_console_shows_the_profile_name_and_the_window_and_forgets_the_name_with_her(
    webhook, queue, consumer, graph, resources, monkeypatch, lambda_context
):
    from memagent.lifecycle.rights import export, forget
    from memagent.observability import logger
    from tests.integration.test_follow_ups import conforms
    from tests.integration.test_operator import call

    admin = load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": AGENT,
            "PROVIDER": "meta",
            "META_GRAPH_URL": graph.url,
            "META_ACCESS_TOKEN": ACCESS_TOKEN,
        },
        monkeypatch,
    )
    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    # given Maya wrote an hour ago from a profile named "Maya Okafor", then renamed it
    for name, text, at in (("Maya Okafor", "Hello", NOW), ("Maya O.", "Still there?", NOW + 60)):
        notification = meta_notification(
            contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID, name=name)],
            messages=[meta_message(text, phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=at)],
        )
        post(webhook, notification, lambda_context)
        assert queue.drain(consumer, lambda_context) == 0
    # when the console reads her conversation
    status, seen = call(admin, lambda_context, "GET", f"/people/{MAYA_BSUID}/conversation")
    # then it has her profile's newest name, each message's time and Meta's window: open until
    # 24 hours after she last wrote
    assert status == 200
    conforms(seen, "Conversation")
    assert seen["name"] == "Maya O."
    said = [m for m in seen["messages"] if m["by"] == "person"]
    assert [(m["text"], m["at"]) for m in said] == [
        ("Hello", f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(NOW))}+00:00"),
        ("Still there?", f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(NOW + 60))}+00:00"),
    ]
    closes = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(NOW + 60 + 24 * 3600))
    assert seen["reply_window"] == {"open": True, "closes_at": f"{closes}+00:00"}
    # and the name is in her export, never in a log line
    assert export(consumer.consumer.agent.store, AGENT, MAYA_PHONE)["state"]["profile_name"] == (
        "Maya O."
    )
    assert "Maya O" not in out.getvalue() and '"message remembered"' in out.getvalue()
    # when she is forgotten, the name goes with her
    forget(consumer.consumer.agent.store, AGENT, MAYA_BSUID)
    for identifier in (MAYA_PHONE, MAYA_BSUID):
        rows = memory_rows(resources, identifier)
        assert all(only_the_mark(r) for r in rows)
        assert not any("profile_name" in r for r in rows)


def test_someone_elses_contact_entry_names_nobody(webhook, queue, consumer, lambda_context):
    # given a notification whose only contact entry is not the sender's (Sam's name)
    notification = meta_notification(
        contacts=[meta_contact(phone=SAM_PHONE, name="Sam")],
        messages=[meta_message("Hi", phone=MAYA_PHONE, timestamp=NOW)],
    )
    post(webhook, notification, lambda_context)
    assert queue.drain(consumer, lambda_context) == 0
    # then Maya's state holds no name at all
    state = consumer.consumer.agent.store.load(person_key(AGENT, MAYA_PHONE)).state
    assert state.profile_name is None
