"""A compaction that failed on the stream is tried again later, from CompactionFailureQueue.

The stream's event source mapping retries a failed record MaximumRetryAttempts times within
MaximumRecordAgeInSeconds, then sends Lambda's on-failure record to CompactionFailureQueue: where
the batch was in the stream (shard, first and last sequence number), not whose it was. The
compactor reads that queue too, and a message is one of two things:

    Lambda's on-failure record -> read the batch back from the stream (memagent.aws.stream: the
        records stay 24 hours), keep what the compactor's two filters take, and queue one job
        per person, delayed by RETRY_BASE_SECONDS: fold their memory, or forget them (the TTL
        ended their retention). A job holds the person's key, a keyed hash: no phone number.
    a job                      -> do it now (the same `run` the stream's records go through).

A job that fails again comes back on a backoff set on its visibility (memagent.aws.backoff: 15
minutes, doubling up to RETRY_MAX_SECONDS, 11 h 40 min in the template), so a model down for
hours costs one attempt per person per backoff, never a hot loop. After the queue's
maxReceiveCount (a day of attempts: a 12-hour outage never gets there) it moves to
CompactionRetryDeadLetterQueue, alarmed, where an operator redrives it once the cause is fixed.
The person's memory is safe meanwhile: nothing folded is deleted before the commit, and their
next message raises the flag again anyway.

Why a consumer of the failure queue and not a scheduled sweep over a sparse index of flagged
people: it retries exactly what failed, needs no new index (its writes on every turn that raises
or lowers the flag) and no change to the turn's or the fold's writes, and it retries the
forgetting of a silent person too, which no flag marks. What it cannot see, a record that never
reached the queue, the person's next message still retries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memagent.errors import ConfigurationError, MalformedEvent
from memagent.lifecycle import expired_by_ttl
from memagent.observability import count, logger

FOLD = "fold"
FORGET = "forget"


@dataclass(frozen=True)
class Job:
    """What the compactor does for one person: fold their memory, or forget them (`at`: when
    the TTL deleted their state item; only what was written up to then is erased)."""

    person: str
    action: str  # FOLD or FORGET
    at: datetime | None = None

    def body(self) -> str:
        job = {"job": self.action, "person": self.person}
        return json.dumps(job | ({"at": self.at.isoformat()} if self.at else {}))

    @classmethod
    def read(cls, message: dict[str, Any]) -> Job | None:
        """The job a message of ours holds, or None."""
        action, person, at = (message.get(name) for name in ("job", "person", "at"))
        if action not in (FOLD, FORGET) or not isinstance(person, str) or not person:
            return None
        try:
            return cls(person, action, datetime.fromisoformat(at) if at else None)
        except (TypeError, ValueError):
            return None


def job_of(record: dict[str, Any]) -> Job | None:
    """The job a stream record (DynamoDB JSON) gives the compactor, by the template's two
    filters: the TTL's deletion of a state item (forget), or a state item whose compaction
    flag is up (fold). None for any other record."""
    expired = expired_by_ttl(record)
    if expired is not None:
        return Job(expired.person, FORGET, expired.at)
    change = record.get("dynamodb") or {}
    flag = ((change.get("NewImage") or {}).get("compaction_due") or {}).get("BOOL")
    person = ((change.get("Keys") or {}).get("pk") or {}).get("S")
    return Job(person, FOLD) if flag is True and person else None


class FailedCompactions:
    """The compactor's side of CompactionFailureQueue."""

    def __init__(self, stream: Any, queue: Any, run: Callable[[Job], str], *, delay: int):
        self.stream = stream  # memagent.aws.stream.StreamReader
        self.queue = queue  # memagent.aws.queue.FailureQueue
        self.run = run
        self.delay = delay

    def handle(self, body: str) -> str:
        """One message of the queue; raises when it is to be tried again later."""
        try:
            message = json.loads(body)
        except ValueError as error:
            raise MalformedEvent("not JSON") from error
        if not isinstance(message, dict):
            raise MalformedEvent("not an object")
        if "DDBStreamBatchInfo" in message:
            return self._read_back(message["DDBStreamBatchInfo"])
        job = Job.read(message)
        if job is None:
            raise MalformedEvent("neither Lambda's on-failure record nor a job")
        logger.append_keys(person=job.person)
        decision = self.run(job)
        count("CompactionRetriesDone")
        logger.info("retried", extra={"job": job.action, "decision": decision})
        return decision

    def _read_back(self, batch: dict[str, Any]) -> str:
        if self.queue is None:
            raise ConfigurationError("FAILURE_QUEUE_URL is not set: no queue for the jobs")
        records = self.stream.read(
            batch["streamArn"],
            batch["shardId"],
            batch["startSequenceNumber"],
            batch["endSequenceNumber"],
        )
        jobs = list(dict.fromkeys(job for job in map(job_of, records) if job is not None))
        self.queue.send_later([job.body() for job in jobs], delay=self.delay)
        count("CompactionRetriesQueued", len(jobs))
        logger.warning(
            "failed stream batch read back; its jobs queued for later",
            extra={"records": len(records), "jobs": len(jobs), "delay": self.delay},
        )
        return "queued"
