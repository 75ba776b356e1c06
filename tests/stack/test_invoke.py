"""`make invoke`: one function on one sample event, on the local stack, no Docker: its logs and
response printed as `sam local invoke` prints them (scripts/invoke.py, docs/local-stack.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import load_function
from tests.integration.webhook_calls import webhook_env

ROOT = Path(__file__).resolve().parents[2]


def invoke(function: str, event: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(  # noqa: S603 - our interpreter, our script
        [sys.executable, "scripts/invoke.py", function, event, "--log", str(tmp_path / "l.log")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1"},  # no OPENAI_*: the offline model
    )


def log_lines(stderr: str) -> list[dict]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]


@pytest.mark.slow  # a stack in a process of its own (6 s of CPU): the handler's answer to this
# sample is make test's, in tests/integration/test_events.py (test_consumer_batch_event)
def test_the_consumers_sample_batch_prints_its_batch_response_and_its_log(tmp_path):
    # when the consumer runs on the sample SQS batch
    run = invoke("consumer", "events/consumer-sqs-batch.json", tmp_path)
    # then it prints its partial batch response (nothing to retry) on stdout
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout) == {"batchItemFailures": []}
    # and the function's own JSON log lines, then a REPORT line, on stderr
    logged = log_lines(run.stderr)
    assert {line["function_name"].rsplit("-", 1)[1] for line in logged} == {"ConsumerFunction"}
    records = json.loads((ROOT / "events/consumer-sqs-batch.json").read_text())["Records"]
    handled = [line["decision"] for line in logged if line["message"] == "event handled"]
    assert len(handled) == len(records) and "sent" in handled
    assert "REPORT Duration:" in run.stderr


@pytest.mark.slow  # a second stack in a process of its own: the sample's signing is checked below
def test_the_webhooks_stale_sample_is_signed_afresh_and_answered_200(tmp_path):
    # given the committed sample, signed long ago (its signature expires after 5 minutes)
    # when the webhook runs on it
    run = invoke("WebhookFunction", "events/webhook-message-received.json", tmp_path)
    # then it was re-signed on the fly and accepted
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["statusCode"] == 200
    assert [line["message"] for line in log_lines(run.stderr)] == ["webhook accepted"]


def test_the_webhook_accepts_the_stale_sample_as_make_invoke_prepares_it(
    resources, monkeypatch, lambda_context
):
    # given the committed sample, signed long ago, as make invoke prepares it
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # the script's own imports (sign_events)
    from invoke import prepared

    event = prepared(ROOT / "events/webhook-message-received.json")
    # when the webhook, holding the documented test secret, runs on it
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    # then it was signed afresh and is accepted (the stale one is refused)
    assert webhook.handler(event, lambda_context)["statusCode"] == 200
    stale = json.loads((ROOT / "events/webhook-message-received.json").read_text())
    assert webhook.handler(stale, lambda_context)["statusCode"] == 401


def test_an_unknown_function_is_refused_with_the_templates_names(tmp_path):
    # (before any stack starts)
    run = invoke("nosuch", "events/consumer-sqs-batch.json", tmp_path)
    assert run.returncode != 0
    assert "no function 'nosuch'" in run.stderr and "ConsumerFunction" in run.stderr
    assert not (tmp_path / "l.log").exists()
