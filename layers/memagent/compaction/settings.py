"""The compactor's settings (CompactorSettings): the model's, and the failure queue's backoff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from memagent.environment import Environment
from memagent.model import ModelSettings


@dataclass(frozen=True, kw_only=True)
class CompactorSettings(ModelSettings):
    reads_person_keys: ClassVar[bool] = False
    # CompactionFailureQueue (memagent.compaction.retry): a failed stream batch's jobs are queued
    # there to run after retry_base_seconds, and a job that fails again comes back on a backoff
    # doubling from there up to retry_max_seconds; without it, they wait for the visibility timeout
    failure_queue_url: str | None = None
    retry_base_seconds: int = 900
    retry_max_seconds: int = 43_200
    retry_jitter: float = 0.2
    # FollowUps=true: the stack's schedule group, whose schedules of a silent person's
    # follow-ups the expiry deletes with them (memagent.lifecycle.rights.expire)
    follow_up_group: str | None = None

    @classmethod
    def _read(cls, read: Environment) -> dict:
        return {
            **super()._read(read),
            "failure_queue_url": read.optional("FAILURE_QUEUE_URL"),
            # SQS delays a message 900 s at most, and a visibility 12 hours at most
            "retry_base_seconds": read.integer("RETRY_BASE_SECONDS", 900, minimum=1, maximum=900),
            "retry_max_seconds": read.integer(
                "RETRY_MAX_SECONDS", 43_200, minimum=1, maximum=43_200
            ),
            "retry_jitter": read.number("RETRY_JITTER", 0.2, minimum=0, maximum=1, below=True),
            "follow_up_group": read.optional("FOLLOW_UP_SCHEDULE_GROUP"),
        }
