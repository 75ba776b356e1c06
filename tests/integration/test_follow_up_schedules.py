"""Follow-ups' plumbing (docs/follow-ups.md): a one-time EventBridge Scheduler schedule that puts
an event into the person's FIFO group at a wall-clock time in their zone, exactly once, through
the real boto3 clients against moto's Scheduler (made as strict as Scheduler: devstack.moto_fixes)
and the local stand-in for its firing (devstack.scheduler), on AWS's clock here (SQS_CLOCK)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import boto3
import pytest
from botocore.exceptions import ClientError

from devstack.clock import SQS_CLOCK
from devstack.scheduler import SchedulerFiring
from memagent.aws import FollowUpSchedules, schedule_name

ROLE = "arn:aws:iam::123456789012:role/whasp-agent-FollowUpSchedulerRole"


@pytest.fixture(autouse=True)
def aws_clock_kept():
    """These tests let AWS's clock run to tomorrow 9:00; the next test starts where it was."""
    with SQS_CLOCK.kept():
        yield


LONDON = "Europe/London"
GROUP_ID = "P#0123456789abcdef"  # the person's FIFO group, as the webhook names it


@pytest.fixture
def schedules(resources):
    scheduler = boto3.client("scheduler")
    group = f"g-{uuid.uuid4().hex[:10]}"
    scheduler.create_schedule_group(Name=group)
    queue = resources.queue_urls["EventQueue"]
    return FollowUpSchedules(group, ROLE, queue, client=scheduler)


@pytest.fixture
def firing(schedules):
    return SchedulerFiring(boto3.client("scheduler"), boto3.client("sqs"), schedules.group)


def tomorrow_at_nine(zone: str) -> datetime:
    """Tomorrow 09:00 on the person's wall clock, AWS time here."""
    local = datetime.fromtimestamp(SQS_CLOCK.now(), tz=UTC).astimezone(ZoneInfo(zone))
    return (local + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)


def received(queue_url: str) -> list[dict]:
    sqs = boto3.client("sqs")
    found = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    return found.get("Messages", [])


def advance_to(moment: datetime) -> None:
    SQS_CLOCK.advance(moment.timestamp() - SQS_CLOCK.now())


def test_a_follow_up_fires_once_at_nine_in_the_persons_zone(schedules, firing):
    # given a follow-up asked for tomorrow at 9 in London
    at = tomorrow_at_nine(LONDON)
    name = schedule_name("evt-1:tool:0:0")
    body = {"memagent": "follow_up", "id": name, "person": GROUP_ID}
    assert schedules.create(name, at, LONDON, body, GROUP_ID)
    # when the clock reaches one minute before 9:00 there, nothing fires
    advance_to(at - timedelta(minutes=1))
    assert firing.fire_due() == 0
    assert received(schedules.queue_url) == []
    # when it reaches 9:00 there, and Scheduler delivers the target twice (at least once)
    advance_to(at)
    assert firing.fire_due(repeat=2) == 1
    # then one message is in the person's group, deduplicated on the schedule's name
    messages = received(schedules.queue_url)
    assert len(messages) == 1
    assert json.loads(messages[0]["Body"]) == body
    assert messages[0]["Attributes"]["MessageGroupId"] == GROUP_ID
    assert messages[0]["Attributes"]["MessageDeduplicationId"] == name
    # and the schedule deleted itself (ActionAfterCompletion DELETE): it never fires again
    assert firing.pending() == []
    assert firing.fire_due() == 0


def test_the_same_request_twice_makes_one_schedule(schedules, firing):
    # given a turn that asked for a follow-up, redelivered after a crash: the same tool call key
    name = schedule_name("evt-2:tool:0:0")
    at = tomorrow_at_nine(LONDON)
    body = {"memagent": "follow_up", "id": name, "person": GROUP_ID}
    # when it asks again
    assert schedules.create(name, at, LONDON, body, GROUP_ID) is True
    assert schedules.create(name, at, LONDON, body, GROUP_ID) is False
    # then there is one schedule, and no identifier shows in its name
    assert [s["Name"] for s in firing.pending()] == [name]
    assert GROUP_ID not in name and len(name) <= 64


def test_a_cancelled_follow_up_never_fires(schedules, firing):
    # given a follow-up, then the person writes STOP (its schedule is cancelled)
    name = schedule_name("evt-3:tool:0:0")
    at = tomorrow_at_nine("America/New_York")
    body = {"memagent": "follow_up", "id": name, "person": GROUP_ID}
    schedules.create(name, at, "America/New_York", body, GROUP_ID)
    assert schedules.cancel(name) is True
    assert schedules.cancel(name) is False  # a repeat of the cancel: nothing left
    # when its time comes, nothing is sent
    advance_to(at + timedelta(minutes=5))
    assert firing.fire_due() == 0
    assert received(schedules.queue_url) == []


def refused(client, **changes) -> str:
    request = {
        "Name": "fu-ok",
        "ScheduleExpression": "at(2027-01-04T09:00:00)",
        "ScheduleExpressionTimezone": LONDON,
        "FlexibleTimeWindow": {"Mode": "OFF"},
        "Target": {"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": ROLE},
    }
    request["Target"]["Input"] = json.dumps({"QueueUrl": "q", "MessageBody": "{}"})
    request.update(changes)
    with pytest.raises(ClientError) as raised:
        client.create_schedule(**request)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    return raised.value.response["Error"]["Message"]


def test_the_scheduler_refuses_what_eventbridge_scheduler_refuses(resources):
    client = boto3.client("scheduler")
    queue_arn = resources.queue_arns["EventQueue"]
    # the templated SQS target on the event queue: FIFO without content-based deduplication
    message = refused(
        client,
        Target={"Arn": queue_arn, "RoleArn": ROLE, "SqsParameters": {"MessageGroupId": "g"}},
    )
    assert "content-based deduplication" in message
    assert "MessageGroupId" in refused(client, Target={"Arn": queue_arn, "RoleArn": ROLE})
    # a name with a character Scheduler does not take, a time zone that is none, a bad at()
    assert "Name" in refused(client, Name="fu:1")
    assert "time zone" in refused(client, ScheduleExpressionTimezone="Mars/Olympus")
    assert "at(" in refused(client, ScheduleExpression="at(2027-01-04 09:00)")
    # a role that is no IAM role's ARN; a universal target whose Input is not JSON
    bad_role = {"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": "me"}
    assert "RoleArn" in refused(client, Target={**bad_role, "Input": "{}"})
    not_json = {"Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage", "RoleArn": ROLE}
    assert "Input" in refused(client, Target={**not_json, "Input": "remind me"})


def test_a_kept_clock_forgets_the_jumps_made_inside():
    from devstack.clock import ScaledClock

    clock = ScaledClock()
    before = clock.now()
    with clock.kept():
        clock.advance(86400)
        assert clock.now() - before >= 86400
    assert 0 <= clock.now() - before < 60  # back on the time it kept, still running
