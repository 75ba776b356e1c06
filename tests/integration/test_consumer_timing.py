"""The consumer on AWS's clock: a batch whose every record fails is a partial response (never a
function error), a watchdog settles the batch shortly before the invocation's deadline, and the
visibility-change client has its own attempts. Through the consumer handler, moto's SQS FIFO."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from devstack.lambda_harness import LambdaContext, reported_failures, sqs_message_record
from tests.conftest import MAYA, load_function, whasp_message
from tests.integration.faults import Died
from tests.integration.test_consumer import SAM, at
from tests.integration.webhook_calls import post_signed, webhook_env

ZOE = "+447700900789"


class EventQueue:
    """The event queue as the consumer's mapping reads it: received records are in flight."""

    def __init__(self, resources: Any) -> None:
        self.sqs = boto3.client("sqs")
        self.url = resources.queue_urls["EventQueue"]
        self.arn = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]

    def batch(self) -> dict[str, Any]:
        messages = []
        while got := self.sqs.receive_message(
            QueueUrl=self.url,
            MaxNumberOfMessages=10,
            MessageSystemAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", []):
            messages.extend(got)
        return {"Records": [sqs_message_record(m, self.arn) for m in messages]}

    def counts(self) -> tuple[int, int]:
        """(visible, in flight) messages."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        found = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=names)
        return tuple(int(found["Attributes"][n]) for n in names)  # type: ignore[return-value]


@pytest.fixture
def queued(resources, monkeypatch, lambda_context) -> EventQueue:
    """Maya, Sam and Zoe each wrote once, through the webhook."""
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    for n, chat in enumerate((MAYA, SAM, ZOE)):
        event = whasp_message(f"hello {n}", chat=chat, created_at=at(n), event_id=f"evt_{n}")
        assert post_signed(webhook, event, lambda_context)[0] == 200
    return EventQueue(resources)


def test_a_batch_whose_every_record_fails_returns_them_all(
    consumer, queued, openai, whasp, lambda_context
):
    # given the model is down for all three people (each call and the client's one retry)
    openai.fail_next(100, status=500)
    batch = queued.batch()
    # then the handler answers (no function error) with every record in batchItemFailures
    response = consumer.handler(batch, lambda_context)
    assert reported_failures(response) == [r["messageId"] for r in batch["Records"]]
    assert whasp.sent == []
    # and each one's retry delay was set on the queue: none is visible now
    assert queued.counts() == (0, 3)


class InternalError:
    """The raw body of SQS's answer to a call it could not serve."""

    def stream(self, **_: Any) -> Any:
        yield b'{"__type":"com.amazonaws.sqs#InternalError","message":"try again"}'


class ManualTimer:
    """threading.Timer whose moment the test chooses (fire), not the wall clock."""

    made: list[ManualTimer] = []

    def __init__(self, interval: float, function: Any, args: tuple = ()) -> None:
        self.interval, self.function, self.args, self.daemon = interval, function, args, False
        ManualTimer.made.append(self)

    def start(self) -> None: ...

    def cancel(self) -> None: ...

    def fire(self) -> None:
        self.function(*self.args)


def test_an_invocation_that_reaches_its_deadline_leaves_no_answered_record_undeleted(
    consumer_env, queued, whasp, monkeypatch, lambda_context
):
    import memagent.turn.consumer

    monkeypatch.setattr(memagent.turn.consumer, "Timer", ManualTimer)
    ManualTimer.made.clear()
    consumer = load_function("consumer", {**consumer_env, "WATCHDOG_SECONDS": "10"}, monkeypatch)
    handle = consumer.consumer.agent.handle
    seen: list[str] = []

    def dies_on_the_second(event: Any, **kwargs: Any) -> Any:
        seen.append(event.event_id)
        if len(seen) == 2:  # Sam's turn runs when the deadline comes; Lambda then ends it
            ManualTimer.made[-1].fire()
            raise Died("timed out")
        return handle(event, **kwargs)

    monkeypatch.setattr(consumer.consumer.agent, "handle", dies_on_the_second)
    retry_queue = consumer.consumer.retries.queue
    postpone, postponed = retry_queue.postpone, []

    def recorded(delays: list[tuple[str, int]]) -> int:
        postponed.extend(delays)
        return postpone(delays)

    monkeypatch.setattr(retry_queue, "postpone", recorded)
    batch = queued.batch()
    # when an invocation handles Maya, is cut off during Sam's turn, never reaches Zoe's
    with pytest.raises(Died):
        consumer.handler(batch, LambdaContext(timeout=420))
    # then the watchdog was set 10 s before the deadline, and Maya, answered, was deleted:
    # only Sam's and Zoe's records are left, in flight on their backoff, not the 42 minutes
    assert 405 < ManualTimer.made[-1].interval <= 410
    assert len(whasp.texts_to(MAYA)) == 1
    assert queued.counts() == (0, 2)
    sam, zoe = (r["receiptHandle"] for r in batch["Records"][1:])
    assert [handle for handle, _ in postponed] == [sam, zoe]
    # (Sam's at least the watchdog's lead, so his turn cannot start again while this one may
    # still run; Zoe's after her deferral, never before)
    assert all(11 <= seconds <= 900 for _, seconds in postponed)


def test_the_visibility_change_has_its_own_attempts(
    consumer, queued, openai, whasp, lambda_context, aws_retry_pauses
):
    # given SQS refuses the first three ChangeMessageVisibilityBatch calls (HTTP 500)
    sqs = consumer.consumer.retries.queue._sqs
    refusals = {"left": 3}

    def refuse(request: Any, **kwargs: Any) -> AWSResponse | None:
        if refusals["left"]:
            refusals["left"] -= 1
            return AWSResponse(request.url, 500, {}, InternalError())
        return None

    sqs.meta.events.register("before-send.sqs.ChangeMessageVisibilityBatch", refuse)
    openai.fail_next(100, status=500)
    # when every record fails and its retry delay is set
    consumer.handler(queued.batch(), lambda_context)
    # then the client tried again past the refusals (the webhook's 2 attempts would not have)
    # and the delays were set: nothing is visible, nothing waits for the visibility timeout
    assert refusals["left"] == 0
    assert len(aws_retry_pauses) == 3
    assert queued.counts() == (0, 3)
