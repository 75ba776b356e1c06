"""The webhook, through its handler, with HTTP API v2 events and moto's SQS over HTTP."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook

from memagent.aws.queue import deduplication_id
from memagent.memory.person import LOCAL_PERSON_KEY, agent_key, person_key
from tests.conftest import (
    AGENT,
    MAYA,
    OTHER_SECRET,
    TEST_SECRET,
    http_event,
    load_function,
    signed_headers,
    to_bytes,
    whasp_message,
)
from tests.integration.webhook_calls import call, post_signed, webhook_env


@pytest.fixture
def webhook(resources, monkeypatch) -> Any:
    return load_function("webhook", webhook_env(resources), monkeypatch)


@pytest.fixture
def queued(resources) -> Any:
    import boto3

    sqs = boto3.client("sqs")

    def read() -> list[dict[str, Any]]:
        messages = []
        while True:
            batch = sqs.receive_message(
                QueueUrl=resources.queue_urls["EventQueue"],
                MaxNumberOfMessages=10,
                MessageSystemAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
            if not batch:
                return messages
            messages.extend(batch)

    return read


# ------------------------------------------------------------------ accepted


def test_valid_signature_queues_one_message_per_person(webhook, queued, lambda_context):
    # given a message.received event signed with our secret
    event = whasp_message(event_id="evt_2f9c1d7e5a")
    # when whasp delivers it
    status, answer = post_signed(webhook, event, lambda_context)
    # then it is accepted and queued once, grouped by the hashed person, deduplicated by event id
    assert (status, answer) == (200, {"ok": True})
    [message] = queued()
    assert json.loads(message["Body"]) == event
    assert message["Attributes"]["MessageGroupId"] == person_key(AGENT, MAYA)
    assert MAYA not in message["Attributes"]["MessageGroupId"]
    assert message["Attributes"]["MessageDeduplicationId"] == deduplication_id("evt_2f9c1d7e5a")
    assert len(message["Attributes"]["MessageDeduplicationId"]) <= 128


def test_a_request_signed_by_the_standardwebhooks_package_is_accepted(
    webhook, queued, lambda_context
):
    # given an independent implementation of the scheme signs the request
    event = whasp_message()
    payload = json.dumps(event)
    now = datetime.now(UTC)
    signature = Webhook(TEST_SECRET).sign(event["id"], now, payload)
    headers = {
        "webhook-id": event["id"],
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    # when it reaches the webhook, then it is accepted
    status, _ = call(webhook, http_event(payload, headers), lambda_context)
    assert status == 200
    assert len(queued()) == 1


def test_second_of_two_signatures_matching_is_accepted(webhook, queued, lambda_context):
    # given whasp signs with two secrets during a rotation, ours being the second
    event = whasp_message()
    body = to_bytes(event)
    ours = signed_headers(body, event["id"])
    theirs = signed_headers(
        body, event["id"], secret=OTHER_SECRET, timestamp=int(ours["webhook-timestamp"])
    )
    ours["webhook-signature"] = f"{theirs['webhook-signature']} {ours['webhook-signature']}"
    status, _ = call(webhook, http_event(body, ours), lambda_context)
    assert status == 200
    assert len(queued()) == 1


def test_two_configured_secrets_accept_either(resources, queued, monkeypatch, lambda_context):
    # given we are rotating: both secrets configured, whitespace separated
    env = webhook_env(resources, secret=f"{OTHER_SECRET} {TEST_SECRET}")
    webhook = load_function("webhook", env, monkeypatch)
    # when whasp signs with either, then both are accepted
    for secret in (TEST_SECRET, OTHER_SECRET):
        status, _ = post_signed(webhook, whasp_message(), lambda_context, secret=secret)
        assert status == 200
    assert len(queued()) == 2


def test_base64_encoded_body_verifies(webhook, queued, lambda_context):
    event = whasp_message("Ça va? 👋")
    body = to_bytes(event)
    request = http_event(body, signed_headers(body, event["id"]), base64_encoded=True)
    status, _ = call(webhook, request, lambda_context)
    assert status == 200
    assert json.loads(queued()[0]["Body"]) == event


def test_upper_case_header_names_work(webhook, queued, lambda_context):
    event = whasp_message()
    body = to_bytes(event)
    headers = {key.title(): value for key, value in signed_headers(body, event["id"]).items()}
    assert "Webhook-Signature" in headers
    status, _ = call(webhook, http_event(body, headers), lambda_context)
    assert status == 200
    assert len(queued()) == 1


def test_number_replaced_gets_a_group_of_its_own(webhook, queued, lambda_context):
    event = {
        "id": "evt_91c0",
        "type": "number.replaced",
        "created_at": "2026-11-29T10:00:00Z",
        "data": {"old_number": "+14155550100", "new_number": "+14155550199", "label": "Coach"},
    }
    status, _ = post_signed(webhook, event, lambda_context)
    assert status == 200
    [message] = queued()
    assert message["Attributes"]["MessageGroupId"] == agent_key(AGENT)


def test_opt_out_is_queued_in_the_persons_group(webhook, queued, lambda_context):
    event = {
        "id": "evt_7d3e",
        "type": "chat.opted_out",
        "created_at": "2026-11-29T11:00:00Z",
        "data": {"number": "+14155550100", "chat": MAYA},
    }
    status, _ = post_signed(webhook, event, lambda_context)
    assert status == 200
    assert queued()[0]["Attributes"]["MessageGroupId"] == person_key(AGENT, MAYA)


def test_unknown_type_is_acknowledged_and_not_queued(webhook, queued, lambda_context):
    event = {
        "id": "evt_s1",
        "type": "message.status",
        "created_at": "2026-11-29T10:00:00Z",
        "data": {"status": "delivered"},
    }
    status, _ = post_signed(webhook, event, lambda_context)
    assert status == 200
    assert queued() == []


# ------------------------------------------------------------------ rejected: 401


def _tampered(body: bytes, headers: dict) -> tuple[bytes, dict]:
    return body.replace(b"Monday", b"Friday"), headers


def _wrong_secret(body: bytes, headers: dict) -> tuple[bytes, dict]:
    event_id = headers["webhook-id"]
    return body, signed_headers(body, event_id, secret=OTHER_SECRET)


def _old(body: bytes, headers: dict) -> tuple[bytes, dict]:
    return body, signed_headers(body, headers["webhook-id"], timestamp=int(time.time()) - 301)


def _ahead(body: bytes, headers: dict) -> tuple[bytes, dict]:
    return body, signed_headers(body, headers["webhook-id"], timestamp=int(time.time()) + 301)


def _with_signature(value: str):
    def change(body: bytes, headers: dict) -> tuple[bytes, dict]:
        return body, {**headers, "webhook-signature": value}

    return change


def _without(header: str):
    def change(body: bytes, headers: dict) -> tuple[bytes, dict]:
        return body, {k: v for k, v in headers.items() if k != header}

    return change


@pytest.mark.parametrize(
    "spoil",
    [
        _tampered,
        _wrong_secret,
        _old,
        _ahead,
        _with_signature("v1" + base64.b64encode(b"x" * 32).decode()),  # no comma
        _with_signature("v1,not base64!!"),
        _with_signature(""),
        _with_signature("v1a,abc v1a,def"),
        _without("webhook-signature"),
        _without("webhook-id"),
        _without("webhook-timestamp"),
    ],
    ids=lambda f: f.__name__,
)
def test_bad_signatures_get_401_and_nothing_is_queued(webhook, queued, lambda_context, spoil):
    event = whasp_message()
    body = to_bytes(event)
    body, headers = spoil(body, signed_headers(body, event["id"]))
    status, answer = call(webhook, http_event(body, headers), lambda_context)
    assert status == 401
    assert answer == {"error": "invalid signature"}
    assert queued() == []


def test_only_v1a_entries_with_a_valid_v1_digest_are_still_refused(webhook, queued, lambda_context):
    # the right digest under the wrong version tag must not pass
    event = whasp_message()
    body = to_bytes(event)
    headers = signed_headers(body, event["id"])
    headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v1a,")
    status, _ = call(webhook, http_event(body, headers), lambda_context)
    assert status == 401
    assert queued() == []


# ------------------------------------------------------------------ rejected: 400 and 503


def test_oversized_body_gets_413(webhook, queued, lambda_context):
    event = whasp_message("x" * (256 * 1024))
    status, _ = post_signed(webhook, event, lambda_context)
    assert status == 413
    assert queued() == []


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",
        b'{"type": "message.received"}',
        b'{"id": "evt_1"}',
        b'{"id": "evt_1", "type": "message.received", "data": {"chat": "447700900123"}}',
    ],
)
def test_signed_but_unacceptable_bodies_get_400(webhook, queued, lambda_context, body):
    status, _ = call(webhook, http_event(body, signed_headers(body, "evt_1")), lambda_context)
    assert status == 400
    assert queued() == []


def test_sqs_outage_gets_503_so_whasp_retries(webhook, lambda_context, monkeypatch):
    def outage(**kwargs):
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:1")

    monkeypatch.setattr(webhook.queue._sqs, "send_message", outage)
    status, answer = post_signed(webhook, whasp_message(), lambda_context)
    assert status == 503
    assert answer == {"error": "temporarily unavailable"}


def test_unreadable_secret_fails_closed_with_503(
    resources, queued, monkeypatch, lambda_context, aws_retry_pauses
):
    # given the secret lives in SSM, which is unreachable (the client's retries do not wait)
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    env = webhook_env(
        resources,
        secret=None,
        WEBHOOK_SECRET_PARAM="/whasp-agent/webhook-secret",
        AWS_ENDPOINT_URL_SSM="http://127.0.0.1:9",
    )
    webhook = load_function("webhook", env, monkeypatch)
    # when whasp delivers a signed message
    status, _ = post_signed(webhook, whasp_message(), lambda_context)
    # then it is refused for now (whasp retries), and nothing is queued
    assert status == 503
    assert queued() == []


def test_secret_read_from_ssm_parameter(resources, queued, monkeypatch, lambda_context):
    import boto3

    boto3.client("ssm").put_parameter(
        Name="/whasp-agent/test/webhook-secret",
        Value=TEST_SECRET,
        Type="SecureString",
        Overwrite=True,
    )
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    env = webhook_env(
        resources, secret=None, WEBHOOK_SECRET_PARAM="/whasp-agent/test/webhook-secret"
    )
    webhook = load_function("webhook", env, monkeypatch)
    status, _ = post_signed(webhook, whasp_message(), lambda_context)
    assert status == 200
    assert len(queued()) == 1


def test_missing_setting_is_a_clear_error_naming_it(monkeypatch):
    from memagent.errors import ConfigurationError
    from memagent.webhook import WebhookSettings

    with pytest.raises(ConfigurationError, match="QUEUE_URL"):
        WebhookSettings.from_env({"AGENT_ID": AGENT, "WEBHOOK_SECRET": TEST_SECRET})
    with pytest.raises(ConfigurationError, match="WEBHOOK_SECRET_PARAM"):
        WebhookSettings.from_env({"AGENT_ID": AGENT, "QUEUE_URL": "https://q"})


# ------------------------------------------------------------------ property: never a 500


header_values = st.one_of(
    st.text(max_size=60), st.from_regex(r"v1,[A-Za-z0-9+/=]{0,50}", fullmatch=True)
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    headers=st.dictionaries(
        st.sampled_from(
            [
                "webhook-id",
                "webhook-timestamp",
                "webhook-signature",
                "Webhook-Id",
                "WEBHOOK-SIGNATURE",
                "content-type",
                "x-other",
            ]
        ),
        header_values,
        max_size=6,
    ),
    body=st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)),
    base64_encoded=st.booleans(),
    fresh_timestamp=st.booleans(),
)
def test_arbitrary_requests_never_500_and_never_enqueue_unsigned(
    webhook, queued, lambda_context, headers, body, base64_encoded, fresh_timestamp
):
    if fresh_timestamp:
        headers["webhook-timestamp"] = str(int(time.time()))
    try:
        request = http_event(body, headers, base64_encoded=base64_encoded)
    except UnicodeDecodeError:
        request = http_event(base64.b64encode(body), headers, base64_encoded=False)
    response = webhook.handler(request, lambda_context)
    # nothing here carries a valid signature, so the only right answer is 401
    assert response["statusCode"] == 401
    assert queued() == []


def _envelope(event_id: str) -> Any:
    """A whasp envelope with arbitrary parts, its id the one the request is signed for."""
    text, phone = st.text(max_size=80), st.from_regex(r"\+[1-9][0-9]{6,14}", fullmatch=True)
    message = st.fixed_dictionaries({"id": text, "type": st.just("text"), "text": text})
    data = st.fixed_dictionaries(
        {"number": st.one_of(phone, text), "chat": st.one_of(phone, text), "message": message}
    )
    kinds = st.sampled_from(["message.received", "chat.opted_out", "number.replaced"])
    return st.fixed_dictionaries(
        {
            "id": st.just(event_id),
            "type": st.one_of(kinds, text),
            "created_at": st.just(datetime.now(UTC).isoformat()),
            "data": st.one_of(data, st.dictionaries(text, text, max_size=3), text),
        }
    ).map(lambda value: json.dumps(value).encode())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    body=st.one_of(_envelope("evt_fuzz"), st.binary(max_size=300), st.text().map(str.encode)),
    base64_encoded=st.booleans(),
)
def test_correctly_signed_arbitrary_bodies_never_500(webhook, lambda_context, body, base64_encoded):
    # whatever a correctly signed body holds, the answer is never a server error
    headers = signed_headers(body, "evt_fuzz")
    try:
        request = http_event(body, headers, base64_encoded=base64_encoded)
    except UnicodeDecodeError:
        request = http_event(body, headers, base64_encoded=True)
    assert webhook.handler(request, lambda_context)["statusCode"] < 500


def test_the_webhook_cold_path_loads_no_model_code_no_pydantic_no_xray_sdk_and_no_boto3_client():
    # given a fresh interpreter in a Lambda-like environment (a cold start; with
    # AWS_LAMBDA_FUNCTION_NAME set, a Powertools Tracer would load the X-Ray SDK and patch
    # botocore; the role's credentials in the environment, where Lambda puts them)
    import subprocess
    import sys
    from pathlib import Path

    app = Path(__file__).resolve().parents[2] / "functions" / "webhook" / "app.py"
    code = (
        "import importlib.util, sys;"
        f"spec = importlib.util.spec_from_file_location('app', {str(app)!r});"
        "module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module);"
        "print(sorted(sys.modules))"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo",
        "AGENT_ID": AGENT,
        "WEBHOOK_SECRET": TEST_SECRET,
        "MEMAGENT_LOCAL_STACK": "1",
        "PERSON_KEY": LOCAL_PERSON_KEY,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "ASIAPROBEONLY0000000",
        "AWS_SECRET_ACCESS_KEY": "probe-only",
        "AWS_SESSION_TOKEN": "probe-only",
        "AWS_LAMBDA_FUNCTION_NAME": "whasp-agent-WebhookFunction",
        "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
        "LAMBDA_TASK_ROOT": str(app.parent),
    }
    # when the webhook module loads
    result = subprocess.run(  # noqa: S603 (our own interpreter and code)
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    modules = set(eval(result.stdout))  # noqa: S307 (a list of names printed by our own code)
    loaded = {m.split(".")[0] for m in modules}
    # then neither the model client and its HTTP stack, nor pydantic, nor the X-Ray SDK is loaded
    assert "memagent.aws.sqs" in modules  # the probe saw the real module load
    for heavy in ("openai", "httpx", "httpx2", "pydantic", "pydantic_core", "aws_xray_sdk"):
        assert heavy not in loaded, f"the webhook's cold path imports {heavy}"
    # and no boto3 client is built: SQS is reached with botocore's signer alone (memagent.aws.sqs),
    # without boto3, botocore's client and session, or its endpoint and service data
    assert "botocore.auth" in modules
    for machinery in ("boto3", "botocore.client", "botocore.session", "botocore.regions"):
        assert machinery not in modules, f"the webhook's cold path imports {machinery}"


def test_a_request_to_another_route_is_a_404_and_queues_nothing(webhook, queued, lambda_context):
    event = whasp_message()
    body = to_bytes(event)
    request = http_event(body, signed_headers(body, event["id"]), path="/other")
    status, answer = call(webhook, request, lambda_context)
    assert (status, answer) == (404, {"error": "not found"})
    assert queued() == []


def test_an_absurdly_long_timestamp_is_a_401_not_a_500(webhook, queued, lambda_context):
    event = whasp_message()
    body = to_bytes(event)
    headers = signed_headers(body, event["id"])
    headers["webhook-timestamp"] = "9" * 5000
    status, _ = call(webhook, http_event(body, headers), lambda_context)
    assert status == 401
    assert queued() == []
