"""The compactor's settings (CompactorSettings): the model's, and the failure queue's backoff."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from memagent.aws import RETRY_JITTER
from memagent.environment import declare, setting
from memagent.model import ModelSettings


@dataclass(frozen=True, kw_only=True)
class CompactorSettings(ModelSettings):
    reads_person_keys: ClassVar[bool] = False
    # CompactionFailureQueue (memagent.compaction.retry): a failed stream batch's jobs are queued
    # there to run after retry_base_seconds, and a job that fails again comes back on a backoff
    # doubling from there up to retry_max_seconds; without it, they wait for the visibility timeout
    failure_queue_url: str | None = setting("FAILURE_QUEUE_URL", None)
    # SQS delays a message 900 s at most, and a visibility 12 hours at most
    retry_base_seconds: int = setting("RETRY_BASE_SECONDS", 900, minimum=1, maximum=900)
    retry_max_seconds: int = setting("RETRY_MAX_SECONDS", 43_200, minimum=1, maximum=43_200)
    retry_jitter: float = declare(RETRY_JITTER)
