"""What a follow-up may still do when its time comes, and what may ask for one (issue 39's
findings, each through the handlers): Meta's signed POSTs to the webhook handler, the event queue
into the consumer handler, moto's Scheduler fired on AWS's clock (devstack.scheduler), the admin
handler, and DynamoDB's TTL (devstack.ttl) with the compactor handler."""

from __future__ import annotations

import io
import json
from datetime import datetime

import boto3
import pytest

from devstack.clock import SQS_CLOCK
from devstack.scheduler import SchedulerFiring
from tests.integration.test_follow_ups import (
    REMINDER,
    Model,
    _meta_consumer,
    due_items,
    tomorrow_at_nine,
)
from tests.integration.test_meta import (  # noqa: F401 (fixtures)
    MAYA_BSUID,
    MAYA_PHONE,
    NOW,
    graph,
    graph_server,
    post,
    queue,
    text_from,
    webhook,
)

NEW_BSUID = "GB.77700011122233344400"  # the recycled number's new owner


@pytest.fixture(autouse=True)
def aws_clock_kept():
    """These tests let AWS's clock run to tomorrow 9:00; the next test starts where it was."""
    with SQS_CLOCK.kept():
        yield


@pytest.fixture
def meta_stack(resources, openai, graph, monkeypatch):
    """Meta's consumer with follow-ups on, and Scheduler's firing of its schedule group."""
    agent, env = _meta_consumer(resources, openai, graph, monkeypatch)
    firing = SchedulerFiring(
        boto3.client("scheduler"), boto3.client("sqs"), env["FOLLOW_UP_SCHEDULE_GROUP"]
    )
    return agent, firing, env


@pytest.fixture
def logs(monkeypatch) -> io.StringIO:
    from memagent.observability import logger

    out = io.StringIO()
    monkeypatch.setattr(logger.registered_handler, "stream", out)
    return out


def exchange(webhook, queue, consumer, lambda_context, *notifications) -> None:
    """Meta POSTs each notification to the webhook; the queue is drained into the consumer."""
    for notification in notifications:
        assert post(webhook, notification, lambda_context) == 200
        assert queue.drain(consumer, lambda_context) == 0


def its_time_comes(firing, queue, consumer, lambda_context, at: datetime) -> None:
    """AWS's clock reaches `at`; Scheduler fires what is due into the event queue; the consumer
    gets it, as Lambda's mapping hands it over."""
    SQS_CLOCK.advance(at.timestamp() - SQS_CLOCK.now())
    assert firing.fire_due() >= 1
    assert queue.drain(consumer, lambda_context) == 0


# ------------------------------------------------------------------ whose address it is now


def test_a_recycled_numbers_new_owner_never_gets_the_previous_owners_follow_up(
    meta_stack, webhook, queue, graph, openai, lambda_context, logs
):
    consumer, firing, _env = meta_stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    # given Maya (her phone, her BSUID) asked to be reminded tomorrow at 9
    exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from(
            "Remind me tomorrow at 9 to call the dentist", phone=MAYA_PHONE, bsuid=MAYA_BSUID
        ),
    )
    assert len(firing.pending()) == 1
    # and her number now belongs to someone else (a new BSUID on it), who writes, then STOP
    for seconds, text in ((60, "hello, who is this?"), (90, "STOP")):
        exchange(
            webhook,
            queue,
            consumer,
            lambda_context,
            text_from(text, phone=MAYA_PHONE, bsuid=NEW_BSUID, at=NOW + seconds),
        )
    sent = list(graph.texts_to(MAYA_PHONE))
    # when Maya's follow-up comes due
    its_time_comes(firing, queue, consumer, lambda_context, at)
    # then nothing written from her memory reaches her old number's new owner: no model call
    # for it, nothing sent; the follow-up is dropped with one recorded reason
    assert graph.texts_to(MAYA_PHONE) == sent and REMINDER not in json.dumps(graph.sent)
    assert model.due_requests == []
    assert due_items(_env["TABLE_NAME"]) == []
    dropped = [json.loads(line) for line in logs.getvalue().splitlines() if "dropped" in line]
    assert [line.get("reason") for line in dropped if "follow-up" in line["message"]] == [
        "address_moved"
    ]


def test_a_follow_up_to_a_person_still_at_their_address_is_sent(
    meta_stack, webhook, queue, graph, openai, lambda_context
):
    consumer, firing, _env = meta_stack
    at = tomorrow_at_nine()
    openai.responder = Model(at)
    exchange(
        webhook,
        queue,
        consumer,
        lambda_context,
        text_from(
            "Remind me tomorrow at 9 to call the dentist", phone=MAYA_PHONE, bsuid=MAYA_BSUID
        ),
    )
    its_time_comes(firing, queue, consumer, lambda_context, at)
    assert graph.texts_to(MAYA_PHONE)[-1] == REMINDER
