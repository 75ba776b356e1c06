"""One-time schedules on Amazon EventBridge Scheduler that put an event into a person's FIFO
group at a time in their zone: the plumbing of follow-ups (docs/follow-ups.md).

The target is Scheduler's universal target for SQS SendMessage, not its templated SQS target:
a templated target on a FIFO queue requires the queue's content-based deduplication, which the
event queue does not have (its deduplication ids are the provider's event ids). The universal
target sends exactly the SendMessage request we write (QueueUrl, MessageBody, MessageGroupId,
MessageDeduplicationId), so the event lands in the person's own group, ordered with what they
write, and a repeated delivery (Scheduler invokes a target at least once) is dropped by SQS's
deduplication within its 5-minute window.

A schedule's name comes from what asked for it (a tool call's key), so a redelivered turn that
asks again creates nothing new: ConflictException means it exists already. It deletes itself
after it fires (ActionAfterCompletion DELETE).

A delivery that fails is retried under RETRY_POLICY, then (or at once, for an error Scheduler
does not retry) the SendMessage request goes to the stack's follow-up dead-letter queue
(DeadLetterConfig; docs/operate.md drains it). Any other error of Scheduler's API is
ScheduleRefused: counted (FollowUpSchedulerErrors), logged with the schedule's name and the
code, and the caller's to answer (a refused tool result, an admin 503).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memagent.errors import ScheduleRefused
from memagent.observability import count, logger

SEND_MESSAGE = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
NAME_PREFIX = "fu-"
EXISTS, NOT_FOUND = "ConflictException", "ResourceNotFoundException"  # a repeat's answers
# DeadLetterConfig's Arn, as Scheduler's API takes it: a standard queue (no ".fifo": Scheduler
# takes no FIFO queue as a dead-letter queue); the settings check FOLLOW_UP_DEAD_LETTER_ARN
DEAD_LETTER_ARN = re.compile(r"^arn:aws(-[a-z]+)?:sqs:[a-z0-9\-]+:\d{12}:[a-zA-Z0-9\-_]+$")
# A due follow-up Scheduler cannot put into the event queue (SQS throttling or down, a KMS or
# IAM incident) is retried for 24 hours, the most Scheduler allows: an outage of 12 hours, the
# stack's outage budget (the event queue's too), reaches no dead-letter queue. 185 attempts,
# its most too, so that the age ends the retries, not the count: AWS does not publish its
# backoff's steps. After that, or at once for an error Scheduler does not retry (the queue
# denying the role, a missing queue), the request goes to the dead-letter queue.
RETRY_POLICY = {"MaximumEventAgeInSeconds": 86400, "MaximumRetryAttempts": 185}


def schedule_name(asked_by: str) -> str:
    """A schedule's name (1 to 64 of [0-9a-zA-Z-_.]) from the key of what asked for it: the
    same request always names the same schedule, and no identifier shows in it."""
    return NAME_PREFIX + hashlib.sha256(asked_by.encode()).hexdigest()[:40]


def at_expression(local: datetime) -> str:
    """Scheduler's one-time expression, read in the schedule's zone: at(yyyy-mm-ddThh:mm:ss)."""
    return f"at({local.replace(tzinfo=None, microsecond=0).isoformat()})"


@dataclass(frozen=True)
class FollowUpSchedules:
    """Creates and cancels the stack's follow-up schedules (its schedule group, its role)."""

    group: str  # the stack's schedule group
    role_arn: str  # the role Scheduler assumes: sqs:SendMessage on the event queue and the DLQ
    queue_url: str  # the event queue
    dead_letter_arn: str | None = None  # where a delivery that failed for good goes
    client: Any = None

    def _scheduler(self) -> Any:
        if self.client is None:
            import boto3

            object.__setattr__(self, "client", boto3.client("scheduler"))
        return self.client

    def create(
        self, name: str, local: datetime, zone: str, body: dict[str, Any], group_id: str
    ) -> bool:
        """A one-time schedule at `local` (a wall-clock time in `zone`) that sends `body` into
        the FIFO group `group_id`; False when it exists already (a repeat of the same request)."""
        send = {
            "QueueUrl": self.queue_url,
            "MessageBody": json.dumps(body, separators=(",", ":")),
            "MessageGroupId": group_id,
            "MessageDeduplicationId": name,
        }
        target: dict[str, Any] = {
            "Arn": SEND_MESSAGE,
            "RoleArn": self.role_arn,
            "Input": json.dumps(send),
            "RetryPolicy": RETRY_POLICY,
        }
        if self.dead_letter_arn:
            target["DeadLetterConfig"] = {"Arn": self.dead_letter_arn}
        request = {
            "Name": name,
            "GroupName": self.group,
            "ScheduleExpression": at_expression(local),
            "ScheduleExpressionTimezone": zone,
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": target,
        }
        create = self._scheduler().create_schedule
        if self._call("CreateSchedule", name, create, request, unless=EXISTS) is None:
            count("FollowUpScheduleRepeated")
            logger.info("follow-up schedule exists already", extra={"schedule": name})
            return False
        count("FollowUpsScheduled")
        logger.info("follow-up scheduled", extra={"schedule": name})
        return True

    def cancel(self, name: str) -> bool:
        """Delete a schedule; False when there was none (it fired, or was cancelled before)."""
        request = {"Name": name, "GroupName": self.group}
        delete = self._scheduler().delete_schedule
        deleted = self._call("DeleteSchedule", name, delete, request, unless=NOT_FOUND)
        if deleted is None:
            return False
        count("FollowUpsCancelled")
        return True

    @staticmethod
    def _call(operation: str, name: str, call: Any, request: dict[str, Any], *, unless: str) -> Any:
        """`call(**request)`, one call of Scheduler's API (`operation`, for schedule `name`): its
        answer; None for the error code `unless` (the expected outcome of a repeat);
        ScheduleRefused, counted and logged, for any other error."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return call(**request)
        except ClientError as error:
            code = str(error.response.get("Error", {}).get("Code") or "Unknown")
            if code == unless:
                return None
        except BotoCoreError as error:  # no answer: connection errors, timeouts, after retries
            code = type(error).__name__
        count("FollowUpSchedulerErrors")
        logger.warning(
            "Scheduler refused: nothing scheduled or cancelled",
            extra={"schedule": name, "operation": operation, "code": code},
        )
        raise ScheduleRefused(operation, code)
