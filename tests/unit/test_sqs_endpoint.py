"""Where the webhook's SQS sender sends (memagent.aws.sqs.endpoint_for): boto3's endpoint
overrides first, else the queue URL's own origin, which is right in every partition."""

from __future__ import annotations

import pytest
from botocore.exceptions import NoRegionError

from memagent.aws.sqs import endpoint_for, region_from_env, signing_region

QUEUE = "https://sqs.eu-west-1.amazonaws.com/123456789012/whasp-agent-EventQueue.fifo"


@pytest.mark.parametrize(
    ("queue_url", "env", "endpoint"),
    [
        (QUEUE, {}, "https://sqs.eu-west-1.amazonaws.com"),
        (
            "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q.fifo",
            {},
            "https://sqs.cn-north-1.amazonaws.com.cn",
        ),
        # a legacy queue URL names no JSON endpoint: the region's own
        (
            "https://queue.amazonaws.com/123456789012/q.fifo",
            {},
            "https://sqs.eu-west-1.amazonaws.com",
        ),
        # boto3's overrides (moto in tests, the local stack): the service's own first
        (QUEUE, {"AWS_ENDPOINT_URL": "http://127.0.0.1:5000/"}, "http://127.0.0.1:5000"),
        (
            QUEUE,
            {
                "AWS_ENDPOINT_URL": "http://127.0.0.1:5000",
                "AWS_ENDPOINT_URL_SQS": "http://sqs.local",
            },
            "http://sqs.local",
        ),
    ],
    ids=["aws", "china", "legacy", "override", "service-override"],
)
def test_the_endpoint(queue_url, env, endpoint):
    assert endpoint_for(queue_url, "eu-west-1", env) == endpoint


def test_the_region_is_lambdas_then_the_default_and_never_guessed():
    assert region_from_env({"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "us-east-1"}) == (
        "eu-west-1"
    )
    assert region_from_env({"AWS_DEFAULT_REGION": "us-east-1"}) == "us-east-1"
    with pytest.raises(NoRegionError):
        region_from_env({})


def test_the_signature_names_the_queues_own_region():
    # a queue in another region than the function's is signed for the queue's region
    env = {"AWS_REGION": "us-east-1"}
    assert signing_region(QUEUE, env) == "eu-west-1"
    china = "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q.fifo"
    assert signing_region(china, env) == "cn-north-1"
    # an override (moto, the local stack) or a legacy URL: the environment's region
    assert (
        signing_region(QUEUE, {**env, "AWS_ENDPOINT_URL": "http://127.0.0.1:5000"}) == "us-east-1"
    )
    assert signing_region("https://queue.amazonaws.com/123456789012/q.fifo", env) == "us-east-1"


@pytest.mark.parametrize(
    "queue_url",
    [
        "https://sqs.evil.example/123456789012/q.fifo",
        "https://sqs.eu-west-1.amazonaws.com.evil.example/123456789012/q.fifo",
        "https://sqs.eu-west-1.amazonaws.com@evil.example/123456789012/q.fifo",
        "https://user@sqs.eu-west-1.amazonaws.com/123456789012/q.fifo",
        "https://sqs.eu-west-1.amazonaws.com:8443/123456789012/q.fifo",
        "http://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo",
    ],
    ids=["other-domain", "suffix", "userinfo-host", "credentials", "port", "plain-http"],
)
def test_a_queue_url_that_only_looks_like_sqs_gets_the_regions_own_endpoint(queue_url):
    # given a queue URL whose host merely starts with "sqs." (or carries credentials or a port)
    env = {"AWS_REGION": "eu-west-1"}
    # then the signed requests go to the region's real endpoint, signed for its region
    assert endpoint_for(queue_url, "eu-west-1", env) == "https://sqs.eu-west-1.amazonaws.com"
    assert signing_region(queue_url, {"AWS_REGION": "us-east-1"}) == "us-east-1"
