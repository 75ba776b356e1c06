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
from botocore.config import Config
from botocore.exceptions import ClientError

from devstack.clock import SQS_CLOCK
from devstack.scheduler import SchedulerFiring
from memagent.aws import FollowUpSchedules, schedule_name
from memagent.aws.scheduler import RETRY_POLICY

ROLE = "arn:aws:iam::123456789012:role/whasp-agent-FollowUpSchedulerRole"


LONDON = "Europe/London"
GROUP_ID = "P#0123456789abcdef"  # the person's FIFO group, as the webhook names it


@pytest.fixture
def schedules(resources):
    scheduler = boto3.client("scheduler")
    group = f"g-{uuid.uuid4().hex[:10]}"
    scheduler.create_schedule_group(Name=group)
    queue = resources.queue_urls["EventQueue"]
    dead_letters = resources.queue_arns["FollowUpDeadLetterQueue"]
    return FollowUpSchedules(group, ROLE, queue, dead_letter_arn=dead_letters, client=scheduler)


@pytest.fixture
def firing(schedules):
    # one request per invocation, as Scheduler makes: the retries are the stand-in's to make
    sqs = boto3.client("sqs", config=Config(retries={"total_max_attempts": 1}))
    return SchedulerFiring(boto3.client("scheduler"), sqs, schedules.group)


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
    # a FIFO queue as the dead-letter queue; a retry policy past Scheduler's bounds
    ok = {**not_json, "Input": json.dumps({"QueueUrl": "q", "MessageBody": "{}"})}
    fifo = {"Arn": resources.queue_arns["EventQueue"]}
    assert "DeadLetterConfig" in refused(client, Target={**ok, "DeadLetterConfig": fifo})
    too_many = {"MaximumRetryAttempts": 186}
    assert "MaximumRetryAttempts" in refused(client, Target={**ok, "RetryPolicy": too_many})
    too_old = {"MaximumEventAgeInSeconds": 86401}
    assert "MaximumEventAgeInSeconds" in refused(client, Target={**ok, "RetryPolicy": too_old})


def test_a_kept_clock_forgets_the_jumps_made_inside():
    from devstack.clock import ScaledClock

    clock = ScaledClock()
    before = clock.now()
    with clock.kept():
        clock.advance(86400)
        assert clock.now() - before >= 86400
    assert 0 <= clock.now() - before < 60  # back on the time it kept, still running


# ------------------------------------------------------------------ a delivery that fails


def refuse_sends(monkeypatch, queue_url: str, code: str, *, times: int | None = None) -> list:
    """SQS refuses SendMessage to `queue_url` with `code` (`times` times; None: always), as moto
    answers it over HTTP; returns the refusals made."""
    from moto.sqs.exceptions import SQSException
    from moto.sqs.models import SQSBackend

    refused: list[str] = []
    send = SQSBackend.send_message
    name = queue_url.rsplit("/", 1)[-1]

    def refusing(self, queue_name, *args, **kwargs):
        if queue_name == name and (times is None or len(refused) < times):
            refused.append(code)
            raise SQSException(code, f"refused: {code}")
        return send(self, queue_name, *args, **kwargs)

    monkeypatch.setattr(SQSBackend, "send_message", refusing)
    return refused


# SQS answers a denied send with AccessDenied, which its service model has no shape for
DENIED_IS_NO_SHAPE = pytest.mark.filterwarnings(
    "ignore:Exception\\(SQSException\\) with code AccessDenied"
)


def dead_letters(resources) -> list[dict]:
    sqs = boto3.client("sqs")
    found = sqs.receive_message(
        QueueUrl=resources.queue_urls["FollowUpDeadLetterQueue"],
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
    )
    return found.get("Messages", [])


def attributes(message: dict) -> dict[str, str]:
    return {k: v["StringValue"] for k, v in message.get("MessageAttributes", {}).items()}


def a_follow_up(schedules, n: int) -> tuple[str, datetime, dict]:
    name = schedule_name(f"evt-f{n}:tool:0:0")
    at = tomorrow_at_nine(LONDON)
    body = {"memagent": "follow_up", "name": name, "person": GROUP_ID}
    assert schedules.create(name, at, LONDON, body, GROUP_ID)
    return name, at, body


def test_every_schedule_names_its_retry_policy_and_dead_letter_queue(schedules, resources):
    name, _at, _body = a_follow_up(schedules, 1)
    target = boto3.client("scheduler").get_schedule(Name=name, GroupName=schedules.group)["Target"]
    assert target["RetryPolicy"] == RETRY_POLICY
    assert target["DeadLetterConfig"] == {"Arn": resources.queue_arns["FollowUpDeadLetterQueue"]}


def test_a_throttled_delivery_is_retried_on_awss_clock_and_arrives_once(
    schedules, firing, resources, monkeypatch
):
    # given a follow-up whose first three sends SQS throttles
    _name, at, body = a_follow_up(schedules, 2)
    refused = refuse_sends(monkeypatch, schedules.queue_url, "RequestThrottled", times=3)
    # when its time comes: refused, and kept for a retry, not before its backoff
    advance_to(at)
    assert firing.fire_due() == 0 and len(refused) == 1
    assert firing.fire_due() == 0 and len(refused) == 1
    # when AWS's clock runs on: retried after 1 s, 2 s, then 4 s, and delivered
    for wait in (1, 2, 4):
        advance_to(firing.now() + timedelta(seconds=wait))
        firing.fire_due()
    assert len(refused) == 3
    # then it arrived once, in the person's group, and nothing is dead-lettered or gone
    [message] = received(schedules.queue_url)
    assert json.loads(message["Body"]) == body
    assert firing.dead_lettered == [] and firing.gone == [] and firing.retrying == {}
    assert dead_letters(resources) == []
    assert firing.pending() == []  # done: it deleted itself


def test_a_delivery_failing_for_24_hours_goes_to_its_dead_letter_queue_as_scheduler_sends_it(
    schedules, firing, resources, monkeypatch
):
    # given a follow-up SQS throttles on every attempt
    name, at, body = a_follow_up(schedules, 3)
    refused = refuse_sends(monkeypatch, schedules.queue_url, "RequestThrottled")
    # when it is retried for not quite its 24 hours, every 8 minutes at most
    advance_to(at)
    while firing.now() < at + timedelta(hours=24) - timedelta(minutes=8):
        firing.fire_due()
        advance_to(firing.now() + timedelta(minutes=8))
    firing.fire_due()
    # then it is still being retried, and nothing is in the dead-letter queue yet
    assert len(refused) > 100 and dead_letters(resources) == []
    assert firing.pending() != []
    # when its age passes the policy's 24 hours
    advance_to(at + timedelta(seconds=RETRY_POLICY["MaximumEventAgeInSeconds"]))
    firing.fire_due()
    # then the dead-letter queue holds the SendMessage request it could not make, with
    # Scheduler's attributes saying why ("Configuring a dead-letter queue": Retrieve the event)
    [message] = dead_letters(resources)
    request = json.loads(message["Body"])
    assert json.loads(request["MessageBody"]) == body
    assert (request["MessageGroupId"], request["MessageDeduplicationId"]) == (GROUP_ID, name)
    assert request["QueueUrl"] == schedules.queue_url
    why = attributes(message)
    assert why["ERROR_CODE"] == "RequestThrottled"
    assert why["EXHAUSTED_RETRY_CONDITION"] == "MaximumEventAgeInSeconds"
    assert int(why["RETRY_ATTEMPTS"]) == len(refused) - 1
    assert why["SCHEDULE_ARN"].endswith(f":schedule/{schedules.group}/{name}")
    assert why["TARGET_ARN"] == "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
    assert why["SCHEDULED_TIME"] == at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert why["IS_PAYLOAD_TRUNCATED"] == "false" and why["EXECUTION_ID"]
    # and the person's group got nothing; the one-time schedule is done
    assert received(schedules.queue_url) == [] and firing.pending() == []


def test_a_delivery_out_of_retry_attempts_goes_to_its_dead_letter_queue(
    schedules, firing, resources, monkeypatch
):
    # given a schedule that allows two retries, and SQS throttling every send
    name, at, _body = a_follow_up(schedules, 4)
    client = boto3.client("scheduler")
    schedule = client.get_schedule(Name=name, GroupName=schedules.group)
    target = {**schedule["Target"], "RetryPolicy": {**RETRY_POLICY, "MaximumRetryAttempts": 2}}
    client.delete_schedule(Name=name, GroupName=schedules.group)
    client.create_schedule(
        **{k: schedule[k] for k in ("Name", "GroupName", "ScheduleExpression")},
        ScheduleExpressionTimezone=LONDON,
        FlexibleTimeWindow={"Mode": "OFF"},
        ActionAfterCompletion="DELETE",
        Target=target,
    )
    refused = refuse_sends(monkeypatch, schedules.queue_url, "RequestThrottled")
    # when it fails, and fails on each of its two retries
    advance_to(at)
    for _ in range(3):
        firing.fire_due()
        advance_to(firing.now() + timedelta(minutes=8))
    # then it is dead-lettered, saying the attempts ran out, after three sends
    [message] = dead_letters(resources)
    why = attributes(message)
    assert why["EXHAUSTED_RETRY_CONDITION"] == "MaximumRetryAttempts"
    assert (why["RETRY_ATTEMPTS"], len(refused)) == ("2", 3)


@DENIED_IS_NO_SHAPE
def test_a_refusal_scheduler_does_not_retry_goes_to_its_dead_letter_queue_at_once(
    schedules, firing, resources, monkeypatch
):
    # given a follow-up whose role the event queue denies
    _name, at, _body = a_follow_up(schedules, 5)
    refused = refuse_sends(monkeypatch, schedules.queue_url, "AccessDenied")
    # when its time comes
    advance_to(at)
    firing.fire_due()
    # then it is not retried: dead-lettered at once, with no retry condition
    [message] = dead_letters(resources)
    why = attributes(message)
    assert (why["ERROR_CODE"], why["RETRY_ATTEMPTS"]) == ("AccessDenied", "0")
    assert "EXHAUSTED_RETRY_CONDITION" not in why
    assert refused == ["AccessDenied"] and firing.pending() == []


@DENIED_IS_NO_SHAPE
def test_without_a_dead_letter_queue_a_failed_delivery_is_gone(resources, monkeypatch):
    # given a schedule that names no dead-letter queue
    scheduler = boto3.client("scheduler")
    group = f"g-{uuid.uuid4().hex[:10]}"
    scheduler.create_schedule_group(Name=group)
    queue = resources.queue_urls["EventQueue"]
    schedules = FollowUpSchedules(group, ROLE, queue, client=scheduler)
    sqs = boto3.client("sqs", config=Config(retries={"total_max_attempts": 1}))
    firing = SchedulerFiring(scheduler, sqs, group)
    name, at, _body = a_follow_up(schedules, 6)
    refuse_sends(monkeypatch, queue, "AccessDenied")
    # when its delivery is refused for good
    advance_to(at)
    firing.fire_due()
    # then nothing keeps it: it is recorded as gone, and the schedule is done
    [gone] = firing.gone
    assert (gone["name"], gone["ERROR_CODE"], gone["why"]) == (
        name,
        "AccessDenied",
        "no DeadLetterConfig",
    )
    assert firing.dead_lettered == [] and dead_letters(resources) == []
    assert firing.pending() == [] and received(queue) == []
