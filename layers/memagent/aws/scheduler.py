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
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memagent.observability import count, logger

SEND_MESSAGE = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
NAME_PREFIX = "fu-"


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
    role_arn: str  # the role Scheduler assumes: sqs:SendMessage on the event queue, nothing else
    queue_url: str  # the event queue
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
        from botocore.exceptions import ClientError

        try:
            self._scheduler().create_schedule(
                Name=name,
                GroupName=self.group,
                ScheduleExpression=at_expression(local),
                ScheduleExpressionTimezone=zone,
                FlexibleTimeWindow={"Mode": "OFF"},
                ActionAfterCompletion="DELETE",
                Target={"Arn": SEND_MESSAGE, "RoleArn": self.role_arn, "Input": json.dumps(send)},
            )
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ConflictException":
                raise
            count("FollowUpScheduleRepeated")
            logger.info("follow-up schedule exists already", extra={"schedule": name})
            return False
        count("FollowUpsScheduled")
        logger.info("follow-up scheduled", extra={"schedule": name})
        return True

    def cancel(self, name: str) -> bool:
        """Delete a schedule; False when there was none (it fired, or was cancelled before)."""
        from botocore.exceptions import ClientError

        try:
            self._scheduler().delete_schedule(Name=name, GroupName=self.group)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise
            return False
        count("FollowUpsCancelled")
        return True
