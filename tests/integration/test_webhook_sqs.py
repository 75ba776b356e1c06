"""The webhook's own SQS sender (memagent.aws.sqs), through the webhook handler: its requests land
in moto's FIFO queue over HTTP; against a local stand-in for SQS, a refused batch entry, a 5xx,
throttling and a timeout each become a 503 after at most one retry, and every request is
signed with SigV4 for `sqs` with the credentials of the moment."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

import memagent.aws.queue
import memagent.aws.sqs
from devstack import LoopbackServer, Reply, Request
from devstack.events import meta_body, meta_contact, meta_headers, meta_message, meta_notification
from memagent.aws.queue import deduplication_id
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, TEST_SECRET, http_event, load_function, whasp_message
from tests.integration.webhook_calls import call, signed_request

APP_SECRET = "meta-test-app-secret"
AWS_QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/whasp-agent-EventQueue.fifo"
HOLD = Reply(0)  # a stand-in reply meaning: read the request, then never answer


class StandInSqs(LoopbackServer):
    """Answers each request with the next scripted reply (the last one repeats) and keeps every
    request it saw."""

    def __init__(self, *replies: Reply) -> None:
        super().__init__()
        self.replies = list(replies)
        self.requests: list[Request] = []
        self.held = 0  # requests still unanswered (HOLD): the client hung up on them
        self._released = threading.Event()

    def handle(self, request: Request) -> Reply:
        with self._lock:
            self.requests.append(request)
            reply = self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]
            self.held += reply is HOLD
        if reply is HOLD:
            # unanswered until the test ends: only the client's read timeout ends its wait (a
            # client without one would hold the test here for a minute, then see the answer)
            self._released.wait(60)
            with self._lock:
                self.held -= 1
        return reply

    def stop(self) -> None:
        self._released.set()
        super().stop()


def sqs_error(status: int, code: str, query_error: str | None = None) -> Reply:
    """SQS's AWS JSON 1.0 error: the shape's id in __type, the text in message, and (as SQS
    sends it) the query-compatible code in x-amzn-query-error."""
    headers = {"Content-Type": "application/x-amz-json-1.0"}
    if query_error:
        headers["x-amzn-query-error"] = query_error
    return Reply(
        status,
        json.dumps({"__type": f"com.amazonaws.sqs#{code}", "message": code}).encode(),
        headers,
    )


def sqs_ok(payload: dict[str, Any]) -> Reply:
    return Reply(200, json.dumps(payload).encode(), {"Content-Type": "application/x-amz-json-1.0"})


SENT = sqs_ok({"MessageId": "5fea7756-0ea4-451a-a703-a558b933e274", "SequenceNumber": "1"})


@pytest.fixture
def pauses(monkeypatch) -> list[float]:
    """The sender's waits between attempts, recorded instead of slept."""
    recorded: list[float] = []
    monkeypatch.setattr(memagent.aws.sqs, "pause", recorded.append)
    return recorded


@pytest.fixture
def stand_in(monkeypatch) -> Any:
    """Start a stand-in SQS with the given replies and point the webhook's endpoint at it (with
    the read timeout halved, so a timeout costs 0.5 s, not 1 s: shorter, and a busy machine's
    pause before an ordinary answer could pass for one)."""
    servers: list[StandInSqs] = []
    scaled = Config(
        connect_timeout=memagent.aws.queue.DEADLINE_CONFIG.connect_timeout,
        read_timeout=memagent.aws.queue.DEADLINE_CONFIG.read_timeout / 2,
        retries=memagent.aws.queue.DEADLINE_CONFIG.retries,
    )
    monkeypatch.setattr(memagent.aws.queue, "_CONFIG", scaled)

    def start(*replies: Reply) -> StandInSqs:
        server = StandInSqs(*replies).start()
        servers.append(server)
        for key, value in {
            "AWS_ENDPOINT_URL_SQS": server.url,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "ASIASTANDIN000000000",
            "AWS_SECRET_ACCESS_KEY": "stand-in-secret",
            "AWS_SESSION_TOKEN": "stand-in-session-token",
        }.items():
            monkeypatch.setenv(key, value)
        monkeypatch.delenv("AWS_REGION", raising=False)
        return server

    yield start
    for server in servers:
        server.stop()


def whasp_webhook(queue_url: str, monkeypatch) -> Any:
    env = {"QUEUE_URL": queue_url, "AGENT_ID": AGENT, "WEBHOOK_SECRET": TEST_SECRET}
    return load_function("webhook", env, monkeypatch)


def meta_webhook(queue_url: str, monkeypatch) -> Any:
    env = {
        "PROVIDER": "meta",
        "QUEUE_URL": queue_url,
        "AGENT_ID": AGENT,
        "META_APP_SECRET": APP_SECRET,
        "META_VERIFY_TOKEN": "meta-test-verify-token",
    }
    return load_function("webhook", env, monkeypatch)


def post_whasp(webhook, event: dict[str, Any], lambda_context) -> int:
    return call(webhook, signed_request(event), lambda_context)[0]


def post_meta(webhook, notification: dict[str, Any], lambda_context) -> int:
    body = meta_body(notification)
    request = http_event(body, meta_headers(body, app_secret=APP_SECRET))
    return webhook.handler(request, lambda_context)["statusCode"]


def people(count: int) -> list[str]:
    return [f"+4477009{n:05d}" for n in range(count)]


def messages_from(phones: list[str]) -> dict[str, Any]:
    return meta_notification(
        contacts=[meta_contact(phone=p) for p in phones],
        messages=[meta_message(f"hello {n}", phone=p) for n, p in enumerate(phones)],
    )


def read_queue(queue_url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        MessageSystemAttributeNames=["All"],
        WaitTimeSeconds=0,
    ).get("Messages", []):
        messages.extend(batch)
    return messages


# ------------------------------------------------------------------ into moto's FIFO queue


def test_a_whasp_event_lands_in_the_fifo_queue_in_the_persons_group(
    resources, monkeypatch, lambda_context
):
    queue_url = resources.queue_urls["EventQueue"]
    webhook = whasp_webhook(queue_url, monkeypatch)
    assert isinstance(webhook.queue._sqs, memagent.aws.sqs.SqsSender)  # not a boto3 client
    event = whasp_message(event_id="evt_sender_1")
    # when whasp delivers one event
    assert post_whasp(webhook, event, lambda_context) == 200
    # then boto3 reads it back from the FIFO queue: the event, in Maya's group, deduplicated
    # by the event id
    [message] = read_queue(queue_url)
    assert json.loads(message["Body"]) == event
    assert message["Attributes"]["MessageGroupId"] == person_key(AGENT, MAYA)
    assert message["Attributes"]["MessageDeduplicationId"] == deduplication_id("evt_sender_1")


def test_each_send_emits_botocores_before_and_after_call_events(
    resources, monkeypatch, lambda_context
):
    # what times or counts a boto3 client's calls (bench/webhook_bench.py) reads the sender too
    webhook = whasp_webhook(resources.queue_urls["EventQueue"], monkeypatch)
    seen: list[tuple[str, Any]] = []
    events = webhook.queue._sqs.meta.events
    events.register(
        "before-call.sqs",
        lambda event_name, params, **_: seen.append((event_name, params["QueueUrl"])),
    )
    events.register(
        "after-call.sqs",
        lambda event_name, parsed, **_: seen.append((event_name, parsed["MessageId"])),
    )
    assert post_whasp(webhook, whasp_message(), lambda_context) == 200
    [(before, queue_url), (after, message_id)] = seen
    assert (before, queue_url) == (
        "before-call.sqs.SendMessage",
        resources.queue_urls["EventQueue"],
    )
    assert after == "after-call.sqs.SendMessage" and message_id


def test_a_redelivered_event_is_dropped_by_its_deduplication_id(
    resources, monkeypatch, lambda_context
):
    queue_url = resources.queue_urls["EventQueue"]
    webhook = whasp_webhook(queue_url, monkeypatch)
    event = whasp_message()
    assert post_whasp(webhook, event, lambda_context) == 200
    assert post_whasp(webhook, event, lambda_context) == 200  # whasp's retry of the same event
    assert len(read_queue(queue_url)) == 1


def test_twelve_meta_messages_land_in_two_batches_each_in_its_group(
    resources, monkeypatch, lambda_context
):
    queue_url = resources.queue_urls["EventQueue"]
    webhook = meta_webhook(queue_url, monkeypatch)
    phones = people(12)
    notification = messages_from(phones)
    wamids = [m["id"] for m in notification["entry"][0]["changes"][0]["value"]["messages"]]
    # when one POST carries twelve people's messages (SendMessageBatch takes ten at a time)
    assert post_meta(webhook, notification, lambda_context) == 200
    # then each is queued once, in its person's group, deduplicated by its wamid
    queued = {
        json.loads(m["Body"])["entry"][0]["changes"][0]["value"]["messages"][0]["id"]: m
        for m in read_queue(queue_url)
    }
    assert sorted(queued) == sorted(wamids)
    for wamid, phone in zip(wamids, phones, strict=True):
        attributes = queued[wamid]["Attributes"]
        assert attributes["MessageGroupId"] == person_key(AGENT, phone)
        assert attributes["MessageDeduplicationId"] == deduplication_id(wamid)


# ------------------------------------------------------------------ failures become 503


def test_a_batch_entry_sqs_refuses_is_a_503(stand_in, monkeypatch, lambda_context, pauses):
    # given SQS takes two entries of a batch and refuses the third (HTTP 200, "Failed")
    sqs = stand_in(
        sqs_ok(
            {
                "Successful": [
                    {"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "x", "SequenceNumber": "1"},
                    {"Id": "1", "MessageId": "m1", "MD5OfMessageBody": "x", "SequenceNumber": "2"},
                ],
                "Failed": [
                    {"Id": "2", "SenderFault": False, "Code": "InternalError", "Message": "x"}
                ],
            }
        )
    )
    webhook = meta_webhook(AWS_QUEUE_URL, monkeypatch)
    # when Meta posts three messages
    status = post_meta(webhook, messages_from(people(3)), lambda_context)
    # then the webhook answers 503 (Meta retries the POST; the two queued entries are then
    # dropped as duplicates), after one call: a partial failure is not the sender's to retry
    assert status == 503
    assert [r.headers["x-amz-target"] for r in sqs.requests] == ["AmazonSQS.SendMessageBatch"]
    entries = sqs.requests[0].json()["Entries"]
    assert [e["Id"] for e in entries] == ["0", "1", "2"]
    assert pauses == []


@pytest.mark.parametrize(
    "failure",
    [sqs_error(500, "InternalError"), Reply(502, b"<html>bad gateway</html>"), HOLD],
    ids=["500", "502-not-json", "read-timeout"],
)
def test_a_failing_sqs_is_tried_twice_then_a_503(
    stand_in, failure, monkeypatch, lambda_context, pauses
):
    sqs = stand_in(failure)
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    status = post_whasp(webhook, whasp_message(), lambda_context)
    # two attempts in all, one pause between them (recorded: botocore standard mode's jitter,
    # under 1 s), then 503 so that whasp retries
    assert status == 503
    assert len(sqs.requests) == 2
    assert len(pauses) == 1 and 0 <= pauses[0] < 1
    # and a request SQS never answers was given up by the client's own read timeout: both still
    # unanswered when the webhook answered (no wall-clock bound: a busy machine is slow)
    assert sqs.held == (2 if failure is HOLD else 0)


def test_throttling_is_retried_once_and_then_succeeds(
    stand_in, monkeypatch, lambda_context, pauses
):
    sqs = stand_in(sqs_error(400, "RequestThrottled"), SENT)
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    assert post_whasp(webhook, whasp_message(), lambda_context) == 200
    assert len(sqs.requests) == 2
    assert sqs.requests[0].body == sqs.requests[1].body  # the same message, deduplicated by SQS
    assert len(pauses) == 1


def test_an_error_a_retry_cannot_fix_is_a_503_at_once(
    stand_in, monkeypatch, lambda_context, pauses
):
    sqs = stand_in(sqs_error(400, "QueueDoesNotExist"))
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    assert post_whasp(webhook, whasp_message(), lambda_context) == 503
    assert len(sqs.requests) == 1
    assert pauses == []


def test_a_batch_answer_that_leaves_entries_unaccounted_for_is_a_503(
    stand_in, monkeypatch, lambda_context, pauses
):
    # given SQS answers 200 to a batch of three but names only two entries, neither failed
    ok = {"MD5OfMessageBody": "x", "SequenceNumber": "1"}
    stand_in(
        sqs_ok(
            {
                "Successful": [
                    {"Id": "0", "MessageId": "m0", **ok},
                    {"Id": "1", "MessageId": "m1", **ok},
                ],
                "Failed": [],
            }
        )
    )
    webhook = meta_webhook(AWS_QUEUE_URL, monkeypatch)
    # when Meta posts three messages, then the third is not taken for queued: Meta retries
    assert post_meta(webhook, messages_from(people(3)), lambda_context) == 503


@pytest.mark.parametrize(
    ("code", "query_error"),
    [
        ("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue;Sender"),
        ("InvalidAddress", None),
        ("ThrottlingException", "AWS.SimpleQueueService.RequestThrottled;Sender"),
    ],
    ids=["query-compatible", "json-only", "throttled"],
)
def test_an_error_answer_raises_what_a_boto3_client_raises(
    stand_in, monkeypatch, pauses, code, query_error
):
    # given SQS answers an error, as its JSON protocol writes it
    stand_in(sqs_error(400, code, query_error))
    sender = memagent.aws.sqs.SqsSender(
        AWS_QUEUE_URL, config=Config(retries={"total_max_attempts": 1})
    )
    client = boto3.client(
        "sqs", region_name="us-east-1", config=Config(retries={"total_max_attempts": 1})
    )
    # when the sender and a boto3 client make the same call
    raised = []
    for caller in (sender, client):
        with pytest.raises(ClientError) as error:
            caller.send_message(QueueUrl=AWS_QUEUE_URL, MessageBody="x", MessageGroupId="g")
        raised.append(error.value.response["Error"])
    # then the error carries the same code, query code and kind (what callers compare against)
    ours, theirs = raised
    for key in ("Code", "QueryErrorCode", "Type"):
        assert ours.get(key) == theirs.get(key), key


def test_an_unreachable_endpoint_is_tried_twice_then_a_503(
    stand_in, monkeypatch, lambda_context, pauses
):
    stand_in(SENT)
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", "http://127.0.0.1:9")  # nothing listens
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    assert post_whasp(webhook, whasp_message(), lambda_context) == 503
    assert len(pauses) == 1  # the one retry's pause


# ------------------------------------------------------------------ signed for sqs


def signature_checks_out(request: Request, credentials: Credentials, region: str) -> bool:
    """Recompute the SigV4 signature of the request as the server received it (botocore's
    signer, with the request's own X-Amz-Date): a header or body changed after signing, or a
    wrong key, service or region, gives another signature."""
    authorization = request.headers["authorization"]
    signed_names = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    copy = AWSRequest(
        method=request.method,
        url=f"http://{request.headers['host']}{request.path}",
        data=request.body,
        headers={name: request.headers[name] for name in signed_names},
    )
    signer = SigV4Auth(credentials, "sqs", region)
    copy.context["timestamp"] = request.headers["x-amz-date"]
    canonical = signer.canonical_request(copy)
    expected = signer.signature(signer.string_to_sign(copy, canonical), copy)
    return authorization.endswith(f"Signature={expected}")


def test_the_request_is_signed_with_sigv4_for_sqs_with_the_session_token(
    stand_in, monkeypatch, lambda_context
):
    sqs = stand_in(SENT)
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    assert post_whasp(webhook, whasp_message(), lambda_context) == 200
    [request] = sqs.requests
    today = datetime.now(UTC).strftime("%Y%m%d")
    authorization = request.headers["authorization"]
    assert authorization.startswith(
        f"AWS4-HMAC-SHA256 Credential=ASIASTANDIN000000000/{today}/us-east-1/sqs/aws4_request,"
    )
    signed = authorization.split("SignedHeaders=")[1].split(",")[0].split(";")
    assert {"host", "x-amz-date", "x-amz-security-token", "x-amz-target"} <= set(signed)
    assert request.headers["x-amz-security-token"] == "stand-in-session-token"
    assert request.headers["x-amz-target"] == "AmazonSQS.SendMessage"
    assert request.headers["content-type"] == "application/x-amz-json-1.0"
    assert request.headers["x-amzn-query-mode"] == "true"  # as botocore sends it to SQS
    assert request.headers["user-agent"].startswith("memagent-webhook Botocore/")
    assert request.json()["QueueUrl"] == AWS_QUEUE_URL
    credentials = Credentials("ASIASTANDIN000000000", "stand-in-secret", "stand-in-session-token")
    assert signature_checks_out(request, credentials, "us-east-1")
    assert not signature_checks_out(
        request, Credentials("ASIASTANDIN000000000", "other"), "us-east-1"
    )


def test_long_term_keys_sign_without_a_session_token(stand_in, monkeypatch, lambda_context):
    sqs = stand_in(SENT)
    monkeypatch.delenv("AWS_SESSION_TOKEN")
    webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)
    assert post_whasp(webhook, whasp_message(), lambda_context) == 200
    [request] = sqs.requests
    assert "x-amz-security-token" not in request.headers
    assert "x-amz-security-token" not in request.headers["authorization"]
    assert signature_checks_out(
        request, Credentials("ASIASTANDIN000000000", "stand-in-secret"), "us-east-1"
    )


class ContainerCredentials(LoopbackServer):
    """Lambda's credentials endpoint (AWS_CONTAINER_CREDENTIALS_FULL_URI, as with SnapStart):
    hands out the next key each time it is asked, each expiring in `lifetime`."""

    def __init__(self, lifetime: timedelta) -> None:
        super().__init__()
        self.lifetime = lifetime
        self.handed_out: list[str] = []

    def handle(self, request: Request) -> Reply:
        assert request.headers.get("authorization") == "container-token"
        with self._lock:
            key = f"ASIAROTATED{len(self.handed_out):09d}"
            self.handed_out.append(key)
        expiry = datetime.now(UTC) + self.lifetime
        return Reply.json(
            200,
            {
                "AccessKeyId": key,
                "SecretAccessKey": f"secret-of-{key}",
                "Token": f"token-of-{key}",
                "Expiration": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        )


def test_container_credentials_about_to_expire_are_renewed_before_a_send(
    stand_in, monkeypatch, lambda_context, tmp_path
):
    # given no keys in the environment, only Lambda's container credentials endpoint, whose
    # credentials expire within botocore's advisory refresh window (15 minutes; under 10, its
    # mandatory one, botocore would refuse them as still expired after a refresh)
    sqs = stand_in(SENT)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    for key in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(key, str(tmp_path / "absent"))  # no developer profile wins
    with ContainerCredentials(lifetime=timedelta(minutes=12)) as endpoint:
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", f"{endpoint.url}/creds")
        monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-token")
        webhook = whasp_webhook(AWS_QUEUE_URL, monkeypatch)  # init: the first key
        # when two events are sent
        assert post_whasp(webhook, whasp_message(), lambda_context) == 200
        assert post_whasp(webhook, whasp_message(), lambda_context) == 200
    # then each send was signed with a key fetched after the one before had come near expiry
    used = [r.headers["authorization"].split("Credential=")[1].split("/")[0] for r in sqs.requests]
    assert used == endpoint.handed_out[1:3]
    assert [r.headers["x-amz-security-token"] for r in sqs.requests] == [
        f"token-of-{key}" for key in used
    ]
