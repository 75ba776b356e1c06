"""The webhook's worst case fits whasp's 10-second deadline: every AWS call on its path has a
bounded number of attempts and connect/read timeouts, and the worst case of all of them adds up
to less than the deadline and the function's timeout (template.yaml)."""

from __future__ import annotations

import boto3

from devstack.resources import load_template
from memagent.environment import Secret
from tests.conftest import AGENT, TEST_SECRET, load_function

WHASP_DEADLINE_SECONDS = 10
BACKOFF_SECONDS = 1  # botocore standard mode: rand(0, 1) x 1 s for a throttled first retry


def worst_case(client) -> float:
    config = client.meta.config
    attempts = config.retries["total_max_attempts"]
    per_attempt = config.connect_timeout + config.read_timeout
    return attempts * per_attempt + (attempts - 1) * BACKOFF_SECONDS


def test_every_aws_call_on_the_webhook_path_fits_the_deadline(
    resources, monkeypatch, lambda_context
):
    # given the webhook as deployed (its secret in Parameter Store), its secret read once
    boto3.client("ssm").put_parameter(
        Name="/deadline/webhook-secret", Value=TEST_SECRET, Type="SecureString", Overwrite=True
    )
    monkeypatch.delenv("WEBHOOK_SECRET", raising=False)
    webhook = load_function(
        "webhook",
        {
            "AGENT_ID": AGENT,
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "WEBHOOK_SECRET_PARAM": "/deadline/webhook-secret",
        },
        monkeypatch,
    )
    secret = webhook.settings.webhook_secret
    assert isinstance(secret, Secret)
    assert secret.get() == TEST_SECRET  # the SSM client now exists
    sqs = webhook.queue._sqs
    ssm = secret._provider.client
    # then both clients bound their attempts and their timeouts
    for client in (sqs, ssm):
        assert client.meta.config.retries["total_max_attempts"] <= 2
        assert client.meta.config.connect_timeout <= 1
        assert client.meta.config.read_timeout <= 2
    # and a cold start's worst case (the secret read, then the send) stays inside the deadline
    # and the function's timeout
    timeout = load_template()["Resources"]["WebhookFunction"]["Properties"]["Timeout"]
    assert worst_case(ssm) + worst_case(sqs) < min(WHASP_DEADLINE_SECONDS, int(timeout))
