"""The webhook refuses weak signing secrets at cold start, requests whose signed id is not the
body's, phones that only look like E.164, and headers that cannot be signed bytes; the cheap
checks run before the secret is read. Through the handler, with moto's SQS and SSM over HTTP."""

from __future__ import annotations

import base64
import json
import re
import time
from typing import Any

import boto3
import pytest

from memagent.errors import ConfigurationError
from tests.conftest import TEST_SECRET, http_event, load_function, to_bytes, whasp_message
from tests.integration.webhook_calls import call, post_signed, signed_request, webhook_env

STRONG = "whsec_" + base64.b64encode(b"k" * 32).decode()


@pytest.fixture
def queued(resources) -> Any:
    sqs = boto3.client("sqs")

    def read() -> list[dict[str, Any]]:
        return sqs.receive_message(
            QueueUrl=resources.queue_urls["EventQueue"], MaxNumberOfMessages=10, WaitTimeSeconds=0
        ).get("Messages", [])

    return read


@pytest.fixture
def webhook(resources, monkeypatch) -> Any:
    return load_function("webhook", webhook_env(resources, secret=STRONG), monkeypatch)


def signed(event: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return signed_request(event, secret=STRONG, **kwargs)


# ------------------------------------------------------------------ secrets at cold start


@pytest.mark.parametrize(
    ("secret", "problem"),
    [
        ("whsec_", "empty|0 bytes"),
        ("whsec_" + base64.b64encode(b"s" * 16).decode(), "16 bytes"),
        ("whsec_" + base64.b64encode(b"s" * 23).decode(), "23 bytes"),
        ("whsec_not base64!", "base64"),
        (f"{STRONG} whsec_", "secret 2 of 2"),  # rotation does not let a weak one slip in
    ],
    ids=["bare-prefix", "16-bytes", "23-bytes", "not-base64", "weak-second"],
)
def test_cold_start_refuses_a_weak_secret_naming_the_setting(
    resources, monkeypatch, secret, problem
):
    with pytest.raises(ConfigurationError, match="WEBHOOK_SECRET") as refused:
        load_function("webhook", webhook_env(resources, secret=secret), monkeypatch)
    message = str(refused.value)
    assert re.search(problem, message)
    key = secret.split()[-1].removeprefix("whsec_")
    assert not key or key not in message  # the error never carries the secret


def test_cold_start_refuses_the_test_only_secret_outside_a_local_run(resources, monkeypatch):
    # given a deployed function: neither the local stack's flag nor sam local's is set
    monkeypatch.delenv("MEMAGENT_LOCAL_STACK", raising=False)
    monkeypatch.delenv("AWS_SAM_LOCAL", raising=False)
    with pytest.raises(ConfigurationError, match=r"WEBHOOK_SECRET.*test-only"):
        load_function("webhook", webhook_env(resources, secret=TEST_SECRET), monkeypatch)


def test_cold_start_refuses_the_test_only_secret_padded_with_nuls(resources, monkeypatch):
    import base64

    # given a deployed function whose secret is the test-only key with NUL bytes after it (HMAC
    # pads a short key with NULs: it verifies exactly what the published secret signs)
    monkeypatch.delenv("MEMAGENT_LOCAL_STACK", raising=False)
    monkeypatch.delenv("AWS_SAM_LOCAL", raising=False)
    key = base64.b64decode(TEST_SECRET.removeprefix("whsec_")) + b"\0" * 4
    padded = "whsec_" + base64.b64encode(key).decode()
    # then it is refused as the published secret is
    with pytest.raises(ConfigurationError, match=r"WEBHOOK_SECRET.*test-only"):
        load_function("webhook", webhook_env(resources, secret=padded), monkeypatch)


@pytest.mark.parametrize("flag", ["MEMAGENT_LOCAL_STACK", "AWS_SAM_LOCAL"])
def test_the_test_only_secret_works_in_a_local_run(
    resources, queued, monkeypatch, lambda_context, flag
):
    monkeypatch.delenv("MEMAGENT_LOCAL_STACK", raising=False)
    env = webhook_env(resources, secret=TEST_SECRET, **{flag: "true"})
    webhook = load_function("webhook", env, monkeypatch)
    status, _ = post_signed(webhook, whasp_message(), lambda_context)
    assert status == 200
    assert len(queued()) == 1


def test_a_weak_secret_in_ssm_fails_closed_naming_the_parameter(
    resources, queued, monkeypatch, lambda_context, caplog
):
    # given the stored secret is 16 bytes (the cold start cannot see it: it is read lazily)
    name = f"/whasp-agent/{resources.table_name}/webhook-secret"
    weak = "whsec_" + base64.b64encode(b"s" * 16).decode()
    boto3.client("ssm").put_parameter(Name=name, Value=weak, Type="SecureString")
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    env = webhook_env(resources, secret="", WEBHOOK_SECRET_PARAM=name)
    webhook = load_function("webhook", env, monkeypatch)
    # when whasp delivers, then the answer is a 503 (whasp retries once the secret is fixed)
    status, _ = post_signed(webhook, whasp_message(), lambda_context, secret=weak)
    assert status == 503
    assert queued() == []
    # and the log names the parameter and the reason, not the value
    logged = " ".join(json.dumps(vars(record), default=str) for record in caplog.records)
    assert "WEBHOOK_SECRET_PARAM" in logged
    assert "16 bytes" in logged
    assert weak.removeprefix("whsec_") not in logged


def test_cheap_checks_run_before_the_secret_is_read(resources, monkeypatch, lambda_context):
    # given a secret parameter that cannot be read (every read would be a 503)
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    env = webhook_env(resources, secret="", WEBHOOK_SECRET_PARAM="/missing/webhook-secret")
    webhook = load_function("webhook", env, monkeypatch)
    event = whasp_message()
    stale = signed(event, timestamp=int(time.time()) - 3600)
    unsigned = http_event(to_bytes(event), {})
    # then junk and replays are refused as unsigned (401) without touching the secret store
    assert call(webhook, stale, lambda_context)[0] == 401
    assert call(webhook, unsigned, lambda_context)[0] == 401
    # while a fresh, well-formed request does need the secret, and fails closed
    assert call(webhook, signed(event), lambda_context)[0] == 503


# ------------------------------------------------------------------ requests


def test_a_webhook_id_other_than_the_bodys_id_is_a_401(webhook, queued, lambda_context):
    # given a correctly signed request whose header id is not the event's id (a replay of the
    # body under a fresh id would otherwise dodge the dedupe on the id)
    request = signed(whasp_message(), webhook_id="evt_someone_else")
    # then it is refused as unsigned, and nothing is queued
    assert call(webhook, request, lambda_context) == (401, {"error": "invalid signature"})
    assert queued() == []


@pytest.mark.parametrize(
    "chat",
    [
        "+447700900123\n",  # a trailing newline
        "+" + "".join(chr(0x0660 + int(d)) for d in "447700900123"),  # Arabic-Indic digits
        "+" + "".join(chr(0xFF10 + int(d)) for d in "447700900123"),  # full-width digits
        "+447700900123 ",
    ],
    ids=["newline", "arabic-indic-digits", "fullwidth-digits", "trailing-space"],
)
def test_phones_that_only_look_like_e164_are_refused(webhook, queued, lambda_context, chat):
    status, _ = call(webhook, signed(whasp_message(chat=chat)), lambda_context)
    assert status == 400
    assert queued() == []


def test_e164_pattern_needs_ascii_digits_and_a_full_match():
    from memagent.providers.whasp import E164

    assert E164.match("+447700900123")
    for phone in (
        "+447700900123\n",
        "+\u0664\u0664\u0667\u0667\u0660\u0660\u0669\u0660\u0660\u0661\u0662\u0663",
        "+447700900123x",
        "447700900123",
    ):
        assert not E164.match(phone)
        assert not E164.fullmatch(phone)


@pytest.mark.parametrize(
    "header",
    ["webhook-id", "webhook-signature", "webhook-timestamp"],
)
@pytest.mark.parametrize(
    "value",
    ["evt_\ud800", "\udcff\udcfe", "évènement"],
    ids=["lone-high-surrogate", "surrogate-escaped-bytes", "non-ascii"],
)
def test_undecodable_header_text_is_a_401_not_a_500(webhook, queued, lambda_context, header, value):
    event = whasp_message()
    request = signed(event)
    request["headers"][header] = value
    response = webhook.handler(request, lambda_context)
    assert response["statusCode"] == 401
    assert json.loads(response["body"]) == {"error": "invalid signature"}
    assert queued() == []
