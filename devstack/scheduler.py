"""EventBridge Scheduler's firing, which moto does not do: moto stores schedules (and, with
devstack.moto_fixes, refuses the ones Scheduler refuses); this fires them.

A one-time schedule (`at(yyyy-mm-ddThh:mm:ss)`, read in its ScheduleExpressionTimezone) is due
when AWS's clock on this machine (devstack.clock.SQS_CLOCK, scaled or advanced by a test) passes
that wall-clock time in that zone. Firing performs the target as Scheduler would: the universal
target `arn:aws:scheduler:::aws-sdk:sqs:sendMessage` sends its Input as SendMessage's request
(QueueUrl, MessageBody, MessageGroupId, MessageDeduplicationId), through the real boto3 client;
then a schedule with ActionAfterCompletion DELETE is deleted. Scheduler invokes a target at least
once: `fire_due(repeat=2)` delivers each target twice, as a retry after a lost response would.

A target that fails is kept only where AWS keeps it (API reference: RetryPolicy,
DeadLetterConfig; user guide: "Configuring a dead-letter queue"):

    retryable (throttled, 5xx,   retried on AWS's clock with exponential backoff while the
    no answer)                   schedule's RetryPolicy allows: MaximumRetryAttempts retries,
                                 and no retry once MaximumEventAgeInSeconds have passed since
                                 its time (without a policy: 185 and 86,400, Scheduler's)
    exhausted, or permanent      the schedule's DeadLetterConfig queue, if it has one, gets
    (any other refusal)          the dead-letter event: the target's Input as the body, and
                                 Scheduler's attributes saying why (EXHAUSTED_RETRY_CONDITION
                                 only when retries ran out); else it is gone (`gone`)

AWS publishes that the backoff is exponential, not its steps: here the n-th retry waits
2^(n-1) s, at most 8 minutes, so Scheduler's default 185 retries span about its default 24
hours (23.6 h). Either way the event's age, not the count, is what a 24-hour policy ends on.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from devstack.clock import SQS_CLOCK, ScaledClock

SEND_MESSAGE = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
DEFAULT_RETRY_POLICY = {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}
BACKOFF_CAP_SECONDS = 480
_THROTTLED = {"Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequestsException"}


def due_at(schedule: dict[str, Any]) -> datetime | None:
    """When a one-time schedule fires (UTC), or None for a recurring one."""
    match = _AT.match(schedule.get("ScheduleExpression", ""))
    if match is None:
        return None
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone).astimezone(UTC)


def backoff(retry: int) -> timedelta:
    """The wait before the `retry`-th retry (1, 2, ...): exponential, capped."""
    return timedelta(seconds=min(2 ** min(retry - 1, 30), BACKOFF_CAP_SECONDS))


@dataclass(frozen=True)
class Failure:
    """Why a target invocation failed: the target service's error code and message, and
    whether Scheduler would retry it."""

    code: str
    message: str
    retryable: bool

    @classmethod
    def of(cls, error: Exception) -> Failure:
        from botocore.exceptions import ClientError

        if not isinstance(error, ClientError):  # no answer: a connection error, a timeout
            return cls(type(error).__name__, str(error), retryable=True)
        detail = error.response.get("Error", {})
        code = str(detail.get("QueryErrorCode") or detail.get("Code") or "Unknown")
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        retryable = status >= 500 or status == 429 or str(detail.get("Code")) in _THROTTLED
        return cls(code, str(detail.get("Message") or ""), retryable)


@dataclass
class Retrying:
    """A target invocation that failed and waits for its next retry."""

    at: datetime  # the schedule's time: the event's age counts from it
    retries: int  # retries made so far (the first attempt is none)
    next_at: datetime
    failure: Failure


@dataclass
class SchedulerFiring:
    """Fires the due one-time schedules of moto's Scheduler (boto3 clients to moto's server)."""

    scheduler: Any
    sqs: Any
    group: str  # the stack's schedule group: only its schedules are this stack's to fire
    clock: ScaledClock = SQS_CLOCK
    fired: list[dict[str, Any]] = field(default_factory=list)  # (name, the request it sent)
    dead_lettered: list[dict[str, Any]] = field(default_factory=list)  # sent to the DLQ
    gone: list[dict[str, Any]] = field(default_factory=list)  # failed, and no DLQ took it
    failed: list[dict[str, Any]] = field(default_factory=list)  # the stand-in's own poll errors
    retrying: dict[str, Retrying] = field(default_factory=dict)  # by schedule ARN
    iam: Any = None  # devstack.iam.roles.StackIam: Scheduler acts as the target's role
    group_arn: str = ""  # what Scheduler presents as aws:SourceArn when it assumes the role
    poll_seconds: float = 0.5  # real time between looks (the local stack's: `start`)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> SchedulerFiring:
        """Fire what is due every `poll_seconds` in a thread (the local stack's Scheduler)."""
        self._thread = threading.Thread(target=self._run, name="scheduler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.fire_due()
            except Exception as error:  # moto going away at the stack's stop
                self.failed.append({"name": "(poll)", "error": str(error)})

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.now(), tz=UTC)

    def pending(self) -> list[dict[str, Any]]:
        """Every schedule moto holds, in full (GetSchedule: ListSchedules gives no target)."""
        found = []
        listed = self.scheduler.list_schedules(GroupName=self.group).get("Schedules", [])
        for summary in listed:
            found.append(
                self.scheduler.get_schedule(Name=summary["Name"], GroupName=summary["GroupName"])
            )
        return found

    def fire_due(self, *, repeat: int = 1) -> int:
        """Invoke what is due at the clock's now (a schedule's time, or a retry's); how many
        schedules delivered their target."""
        now, fired = self.now(), 0
        for schedule in self.pending():
            at = due_at(schedule)
            if at is None or at > now or schedule.get("State") == "DISABLED":
                continue
            target = schedule["Target"]
            if target["Arn"] != SEND_MESSAGE:
                raise NotImplementedError(f"the stand-in fires only {SEND_MESSAGE}")
            waiting = self.retrying.get(schedule["Arn"])
            policy = {**DEFAULT_RETRY_POLICY, **(target.get("RetryPolicy") or {})}
            if waiting is not None:
                aged_at = waiting.at + timedelta(seconds=policy["MaximumEventAgeInSeconds"])
                if now >= aged_at:  # no retry once the event is this old
                    self._give_up(schedule, waiting, "MaximumEventAgeInSeconds")
                    continue
                if now < waiting.next_at:
                    continue
            request = json.loads(target["Input"])
            try:
                self._as_role(target["RoleArn"], "sqs:SendMessage", request["QueueUrl"])
                for _ in range(repeat):
                    self.sqs.send_message(**request)
            except Exception as error:  # any refusal, or no answer
                self._failed(schedule, at, now, Failure.of(error), policy)
                continue
            self.retrying.pop(schedule["Arn"], None)
            self.fired.append({"name": schedule["Name"], "request": request, "at": now})
            fired += 1
            self._complete(schedule)
        return fired

    def _failed(
        self, schedule: dict, at: datetime, now: datetime, failure: Failure, policy: dict
    ) -> None:
        """A failed invocation: its next retry on the backoff, or the end of its retries."""
        previous = self.retrying.get(schedule["Arn"])
        retries = previous.retries + 1 if previous else 0  # this attempt was one, or the first
        state = Retrying(at=at, retries=retries, next_at=now, failure=failure)
        if not failure.retryable:  # Scheduler does not retry it: no retry condition either
            self._give_up(schedule, state, None)
        elif retries >= int(policy["MaximumRetryAttempts"]):
            self._give_up(schedule, state, "MaximumRetryAttempts")
        else:
            state.next_at = now + backoff(retries + 1)
            self.retrying[schedule["Arn"]] = state

    def _give_up(self, schedule: dict, state: Retrying, exhausted: str | None) -> None:
        """The invocation's last failure: its dead-letter event to the schedule's DLQ, or gone;
        either way the one-time schedule is done."""
        self.retrying.pop(schedule["Arn"], None)
        target = schedule["Target"]
        attributes = {
            "ERROR_CODE": state.failure.code,
            "ERROR_MESSAGE": state.failure.message,
            "EXECUTION_ID": uuid.uuid4().hex[:16],
            "IS_PAYLOAD_TRUNCATED": "false",
            "RETRY_ATTEMPTS": str(state.retries),
            "SCHEDULED_TIME": state.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "SCHEDULE_ARN": schedule["Arn"],
            "TARGET_ARN": target["Arn"],
        }
        if exhausted is not None:
            attributes["EXHAUSTED_RETRY_CONDITION"] = exhausted
        seen = {"name": schedule["Name"], **attributes}
        dead_letters = (target.get("DeadLetterConfig") or {}).get("Arn")
        if dead_letters is None:
            self.gone.append({**seen, "why": "no DeadLetterConfig"})
        else:
            try:
                self._as_role(target["RoleArn"], "sqs:SendMessage", dead_letters)
                self.sqs.send_message(
                    QueueUrl=self._queue_url(dead_letters),
                    MessageBody=target["Input"],
                    MessageAttributes={
                        name: {"DataType": "String", "StringValue": value or "-"}
                        for name, value in attributes.items()
                    },
                )
                self.dead_lettered.append(seen)
            except Exception as error:  # the DLQ refused its role, or is missing: lost
                self.gone.append({**seen, "why": f"the dead-letter queue refused: {error}"})
        self._complete(schedule)

    def _as_role(self, role_arn: str, action: str, queue: str) -> None:
        """Scheduler assumes the target's role (its trust, with the group's ARN and the
        account) and calls as it: refused as IAM refuses, AccessDenied (no retry)."""
        if self.iam is None:
            return
        from botocore.exceptions import ClientError

        from devstack.iam.actions import Place
        from devstack.iam.policy import Request

        role = self.iam.role_by_arn(role_arn)
        presented = {"aws:SourceArn": self.group_arn, "aws:SourceAccount": self.iam.account}
        if role is None or not self.iam.service_may_assume(
            role.logical_id, "scheduler.amazonaws.com", presented
        ):
            why = f"EventBridge Scheduler may not assume {role_arn}"
        else:
            if not queue.startswith("arn:"):  # a queue URL: .../<account>/<name>
                account, name = queue.rstrip("/").rsplit("/", 2)[-2:]
                queue = Place(account=account).arn("sqs", name)
            decision = self.iam.decide(role.logical_id, Request(action, queue))
            if decision.allowed:
                return
            why = f"{role_arn} is not authorized to perform: {action} on resource: {queue}"
        # botocore-stubs want every ResponseMetadata key; botocore reads what is there
        response: Any = {"Error": {"Code": "AccessDenied", "Message": why}}
        response["ResponseMetadata"] = {"HTTPStatusCode": 403}
        raise ClientError(response, action)

    def _queue_url(self, arn: str) -> str:
        account, name = arn.split(":")[4:6]
        return self.sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]

    def _complete(self, schedule: dict) -> None:
        """A one-time schedule's invocation is over: ActionAfterCompletion DELETE deletes it."""
        if schedule.get("ActionAfterCompletion") == "DELETE":
            self.scheduler.delete_schedule(Name=schedule["Name"], GroupName=schedule["GroupName"])
