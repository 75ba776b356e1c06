"""Figure 8: failure timing on AWS's clock, measured through the handlers and the queue.

1. The delay before the retry of a record that failed once: a message goes through the webhook
   handler into the FIFO queue (moto, from template.yaml); the consumer handler (its template
   settings) meets a model 500 on the first attempt and reports the record failed; the event
   source mapping (devstack.delivery.QueueDelivery: failed records are left alone, as Lambda
   leaves them) receives it again when its visibility ends. Measured in AWS seconds on the
   queue's clock (devstack.clock, which skips idle time instead of sleeping). Ours: the backoff
   the consumer sets. Baseline: the same consumer without it (no QUEUE_URL), so the record waits
   for the queue's VisibilityTimeout, as it did before.
2. The outage survived before any dead letter: the model answers 500 to everything; the record
   is retried on our schedule until SQS moves it to the dead-letter queue (maxReceiveCount from
   template.yaml). Measured: AWS hours from the first receive to the dead-letter queue. Also
   given: the schedule's worst-case arithmetic (memagent.aws.backoff, every delay at its shortest),
   and what a fixed retry delay as quick as our first one would survive with the same receives.
"""

from __future__ import annotations

import os
import statistics
from typing import Any

import boto3
import harness

from devstack import moto_fixes
from devstack.clock import SQS_CLOCK
from devstack.delivery import QueueDelivery, in_process
from devstack.resources import load_template, max_receive_count
from memagent.aws.backoff import RetrySchedule, outage_survived_seconds

HOUR = 3600.0


def _template_consumer_settings(template: dict[str, Any]) -> dict[str, str]:
    """The consumer's retry settings as it runs: the template's value, else the code's default
    (the template leaves out what equals it: Lambda allows 4 KB for all the variables)."""
    from memagent.turn import ConsumerSettings

    env = template["Resources"]["ConsumerFunction"]["Properties"]["Environment"]["Variables"]
    fields = {
        "RETRY_BASE_SECONDS": "retry_base_seconds",
        "RETRY_MAX_SECONDS": "retry_max_seconds",
        "RETRY_JITTER": "retry_jitter",
        "DEFER_SECONDS": "defer_seconds",
    }
    return {
        name: str(env[name] if name in env else getattr(ConsumerSettings, field))
        for name, field in fields.items()
    } | {"OPENAI_MAX_RETRIES": str(env["OPENAI_MAX_RETRIES"])}


class _Pipe:
    """webhook -> SQS FIFO (moto) -> event source mapping -> consumer, all in this process."""

    def __init__(self, stack: harness.Stack, prefix: str, *, backoff: bool):
        template = load_template()
        self.resources = stack.resources(prefix)
        self.context = harness.LambdaContext()
        self.webhook = harness.load_function("webhook", stack.webhook_env(self.resources))
        env = stack.consumer_env(self.resources) | _template_consumer_settings(template)
        if backoff:
            env["QUEUE_URL"] = self.resources.queue_urls["EventQueue"]
        else:
            env.pop("QUEUE_URL", None)
            os.environ.pop("QUEUE_URL", None)  # left by an earlier load
        self.consumer = harness.load_function("consumer", env)
        # read at import: the next benchmark starts from the stack's own (the compactor reads
        # RETRY_BASE_SECONDS too, as whole seconds, in its own function in AWS)
        for name in _template_consumer_settings(template):
            os.environ.pop(name, None)
        self.delivery = QueueDelivery(
            sqs=boto3.client("sqs"),
            queue_url=self.resources.queue_urls["EventQueue"],
            queue_arn=self.resources.queue_arns["EventQueue"],
            invoke=in_process(self.consumer.handler, self.context),
            batch_size=10,
            concurrency=1,
            idle_jump=True,
        )

    def post(self, phone: str, text: str) -> None:
        event = harness.whasp_message(text, chat=phone, created_at=harness.iso_now(1))
        response = self.webhook.handler(harness.signed_request(event), self.context)
        assert response["statusCode"] == 200, response

    def dead_letters(self) -> int:
        attributes = boto3.client("sqs").get_queue_attributes(
            QueueUrl=self.resources.queue_urls["EventDeadLetterQueue"],
            AttributeNames=["ApproximateNumberOfMessages"],
        )["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"])


def first_retry(stack: harness.Stack, *, backoff: bool, samples: int) -> dict[str, Any]:
    """Seconds (AWS time) a record that failed once waits before its next attempt."""
    pipe = _Pipe(stack, "rt" if backoff else "rb", backoff=backoff)
    replies = 0
    for n in range(samples):
        phone = f"+44770090{8 if backoff else 7}{n:03d}"
        stack.openai.fail_next(2, status=500)  # the first attempt: the call and its one retry
        pipe.post(phone, "how far today?")
        pipe.delivery.drain()
        replies += len(stack.whasp.texts_to(phone))
    delays = pipe.delivery.stats.retry_delays
    return {
        "samples": samples,
        "delays_seconds": delays,
        "median_seconds": statistics.median(delays),
        "max_seconds": max(delays),
        "replies": replies,
    }


def outage(stack: harness.Stack) -> dict[str, Any]:
    """How long a record failing on every attempt stays out of the dead-letter queue."""
    template = load_template()
    receives = max_receive_count(template)
    env = _template_consumer_settings(template)
    schedule = RetrySchedule(
        base_seconds=float(env["RETRY_BASE_SECONDS"]),
        cap_seconds=float(env["RETRY_MAX_SECONDS"]),
        jitter=float(env["RETRY_JITTER"]),
    )
    pipe = _Pipe(stack, "ro", backoff=True)
    stack.openai.outage = lambda: 500
    try:
        started = SQS_CLOCK.now()
        pipe.post("+447700900899", "is anyone there?")
        pipe.delivery.drain()
        survived = SQS_CLOCK.now() - started
    finally:
        stack.openai.outage = None
    return {
        "max_receive_count": receives,
        "attempts": pipe.delivery.stats.batches,
        "dead_letters": pipe.dead_letters(),
        "survived_hours": survived / HOUR,
        "worst_case_hours": outage_survived_seconds(schedule, receives) / HOUR,
        "fixed_delay_seconds": schedule.nominal(1),
        "fixed_delay_hours": schedule.nominal(1) * receives / HOUR,
    }


def run(stack: harness.Stack, *, samples: int = 5) -> dict[str, Any]:
    moto_fixes.make_sqs_faithful()  # moto's SQS on the queue clock, its 12-hour limit as AWS's
    template = load_template()
    stack.openai.reset()
    stack.whasp.reset()
    return {
        "visibility_timeout_seconds": int(
            template["Resources"]["EventQueue"]["Properties"]["VisibilityTimeout"]
        ),
        "ours": first_retry(stack, backoff=True, samples=samples),
        "baseline": first_retry(stack, backoff=False, samples=max(1, samples // 5)),
        "outage": outage(stack),
    }
