"""EventBridge Scheduler's firing, which moto does not do: moto stores schedules (and, with
devstack.moto_fixes, refuses the ones Scheduler refuses); this fires them.

A one-time schedule (`at(yyyy-mm-ddThh:mm:ss)`, read in its ScheduleExpressionTimezone) is due
when AWS's clock on this machine (devstack.clock.SQS_CLOCK, scaled or advanced by a test) passes
that wall-clock time in that zone. Firing performs the target as Scheduler would: the universal
target `arn:aws:scheduler:::aws-sdk:sqs:sendMessage` sends its Input as SendMessage's request
(QueueUrl, MessageBody, MessageGroupId, MessageDeduplicationId), through the real boto3 client;
then a schedule with ActionAfterCompletion DELETE is deleted. Scheduler invokes a target at least
once: `fire_due(repeat=2)` delivers each target twice, as a retry after a lost response would.
A target that fails (SQS refuses the request) is kept in `failed`, as Scheduler's dead-letter
queue would keep it, and the schedule stays (Scheduler retries it within its retry policy).
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from devstack.clock import SQS_CLOCK, ScaledClock

SEND_MESSAGE = "arn:aws:scheduler:::aws-sdk:sqs:sendMessage"
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")


def due_at(schedule: dict[str, Any]) -> datetime | None:
    """When a one-time schedule fires (UTC), or None for a recurring one."""
    match = _AT.match(schedule.get("ScheduleExpression", ""))
    if match is None:
        return None
    zone = ZoneInfo(schedule.get("ScheduleExpressionTimezone") or "UTC")
    return datetime.fromisoformat(match.group(1)).replace(tzinfo=zone).astimezone(UTC)


@dataclass
class SchedulerFiring:
    """Fires the due one-time schedules of moto's Scheduler (boto3 clients to moto's server)."""

    scheduler: Any
    sqs: Any
    group: str  # the stack's schedule group: only its schedules are this stack's to fire
    clock: ScaledClock = SQS_CLOCK
    fired: list[dict[str, Any]] = field(default_factory=list)  # (name, the request it sent)
    failed: list[dict[str, Any]] = field(default_factory=list)
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
            except Exception as error:  # moto going away at the stack's stop, a refusal
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
        """Fire what is due at the clock's now; how many schedules fired."""
        now, fired = self.now(), 0
        for schedule in self.pending():
            at = due_at(schedule)
            if at is None or at > now or schedule.get("State") == "DISABLED":
                continue
            target = schedule["Target"]
            if target["Arn"] != SEND_MESSAGE:
                raise NotImplementedError(f"the stand-in fires only {SEND_MESSAGE}")
            request = json.loads(target["Input"])
            try:
                for _ in range(repeat):
                    self.sqs.send_message(**request)
            except Exception as error:  # any refusal: kept, as Scheduler's DLQ would keep it
                self.failed.append({"name": schedule["Name"], "error": str(error)})
                continue
            self.fired.append({"name": schedule["Name"], "request": request, "at": now})
            fired += 1
            if schedule.get("ActionAfterCompletion") == "DELETE":
                self.scheduler.delete_schedule(
                    Name=schedule["Name"], GroupName=schedule["GroupName"]
                )
        return fired
