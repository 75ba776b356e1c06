"""When a failed record comes back: the retry schedule, and the outage it lets us survive.

A record the consumer fails would otherwise come back only when the queue's VisibilityTimeout
runs out (the ceiling that protects a crashed invocation, 30 minutes). Instead the consumer sets
each failed record's visibility from how often it was received:

    receive 1 -> ~10 s, 2 -> ~20 s, 3 -> ~40 s ... doubling up to the cap (~15 min)

with jitter (each delay drawn from [delay x (1 - jitter), delay]), so people whose messages failed
together do not all come back at the same second. `Retries` plans the delays of a batch's
failed records and hands them to the queue it is given (memagent.aws.queue makes the SQS call): the
consumer's event queue, and the compactor's CompactionFailureQueue (memagent.compaction.retry).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.batch.exceptions import (
    SQSFifoCircuitBreakerError,
    SQSFifoMessageGroupCircuitBreakerError,
)

from memagent.environment import Setting
from memagent.errors import Deferred, named_failure
from memagent.observability import logger, metrics

if TYPE_CHECKING:
    from typing import Any

    from aws_lambda_powertools.utilities.batch import ExceptionInfo
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from memagent.aws.queue import RetryQueue

SQS_MAX_VISIBILITY_SECONDS = 43_200  # 12 h, the most ChangeMessageVisibility accepts


@dataclass(frozen=True)
class RetrySchedule:
    base_seconds: float = 10.0
    cap_seconds: float = 900.0
    jitter: float = 0.2  # the share of each delay that is random

    def nominal(self, receive_count: int) -> float:
        """The delay before the next attempt of a record received `receive_count` times."""
        exponent = min(max(receive_count, 1) - 1, 32)  # 2**32 x base is far past any cap
        return min(self.cap_seconds, self.base_seconds * 2**exponent)

    def delay(self, receive_count: int, rng: random.Random | None = None) -> int:
        """The visibility to set, in whole seconds (what SQS takes): jittered, at least 1 s."""
        nominal = self.nominal(receive_count)
        low = nominal * (1 - self.jitter)
        drawn = (rng or random).uniform(low, nominal)
        return max(1, min(SQS_MAX_VISIBILITY_SECONDS, round(drawn)))

    def shortest(self, receive_count: int) -> int:
        """The least delay jitter can give (for the outage budget, which must hold in the worst
        case): the schedule's lower bound."""
        return max(1, round(self.nominal(receive_count) * (1 - self.jitter)))


# each delay is cut by up to this share, the consumer's and the compactor's alike
RETRY_JITTER = Setting(
    "RETRY_JITTER", RetrySchedule.jitter, kind="number", minimum=0, maximum=1, below=True
)


def outage_survived_seconds(
    schedule: RetrySchedule, max_receive_count: int, *, seconds_per_attempt: float = 0.0
) -> float:
    """How long a dependency may be down before a record that fails on every attempt reaches
    the dead-letter queue: the sum of the shortest delays between its `max_receive_count`
    receives (SQS moves it on the receive after that), plus the time each attempt takes.
    Lower bound: attempts that take longer, or wait behind a person's earlier message, only
    stretch it."""
    waits = sum(schedule.shortest(count) for count in range(1, max_receive_count + 1))
    return waits + seconds_per_attempt * max_receive_count


class Retries:
    """Decides when each failed record of a batch comes back, and tells the queue."""

    def __init__(
        self,
        queue: RetryQueue | None,
        schedule: RetrySchedule,
        *,
        defer_seconds: int,
        rng: random.Random | None = None,
    ):
        self.queue = queue
        self.schedule = schedule
        self.defer_seconds = defer_seconds
        self._rng = rng or random.Random()

    def renew(self) -> None:
        """Reseed the jitter (after a SnapStart restore: every copy would draw the same)."""
        self._rng.seed()

    def plan(self, failures: list[tuple[SQSRecord, BaseException | None]]) -> list[tuple[str, int]]:
        """(receipt handle, seconds) for each failed record, in batch order. The first failure
        of a group sets the group's delay; the rest of the group (failed unprocessed, by
        skip_group_on_error) waits exactly as long, so it never runs before it."""
        group_delay: dict[str, int] = {}
        delays = []
        for record, error in failures:
            group = record.attributes.message_group_id
            delay = group_delay.get(group) if group else None
            if delay is None:
                if isinstance(error, Deferred):
                    delay = self.defer_seconds
                else:
                    count = int(record.attributes.approximate_receive_count or 1)
                    delay = self.schedule.delay(count, self._rng)
                if group:
                    group_delay[group] = delay
            delays.append((record.receipt_handle, delay))
        return delays

    def schedule_failures(self, failures: list[tuple[SQSRecord, BaseException | None]]) -> None:
        if not failures:
            return
        named(failures)
        delays = self.plan(failures)
        if self.queue is None:
            logger.warning("no queue URL: failed records wait for the visibility timeout")
            return
        refused = self.queue.postpone(delays)
        metrics.add_metric(name="RetriesScheduled", unit=MetricUnit.Count, value=len(delays))
        logger.info(
            "retries scheduled",
            extra={"records": len(delays), "delays": sorted({d for _, d in delays})},
        )
        if refused:  # they come back at the queue's visibility timeout instead: late, not lost
            metrics.add_metric(name="RetriesNotScheduled", unit=MetricUnit.Count, value=refused)
            logger.warning("SQS refused some retry delays", extra={"refused": refused})


# what Powertools fails a FIFO record with when an earlier one failed: no failure of its own
_SKIPPED = (SQSFifoCircuitBreakerError, SQSFifoMessageGroupCircuitBreakerError)


def named(failures: list[tuple[SQSRecord, BaseException | None]]) -> None:
    """One line per distinct failure of the batch naming what failed (dependency, HTTP status,
    error class) and how many records it holds back, so a dependency that keeps failing is
    named in the function's log on every attempt, never only "retry". A record Powertools
    failed unprocessed behind its group's failure (skip_group_on_error) has no error of its
    own and is counted with it."""
    seen: dict[tuple[object, ...], int] = {}
    for _record, error in failures:
        if error is None or isinstance(error, (Deferred, *_SKIPPED)):
            continue
        key = tuple(named_failure(error).values())
        seen[key] = seen.get(key, 0) + 1
    for (dependency, status, error_class), count in seen.items():
        logger.warning(
            f"{dependency} failed: retrying",
            extra={
                "dependency": dependency,
                "status": status,
                "error": error_class,
                "records": count,
            },
        )


class ScheduledRetries:
    """Mixed into a Powertools batch processor: before it reports the failures, it sets when
    each failed record comes back (`retries`). Powertools has no such feature."""

    retries: Retries
    if TYPE_CHECKING:  # the processor's it is mixed into (BasePartialProcessor)
        fail_messages: list[Any]
        exceptions: list[ExceptionInfo]

    def _clean(self) -> None:  # runs after the last record, before the response (or the raise)
        try:
            failed = zip(self.fail_messages, self.exceptions, strict=True)
            failures = [(record, info[1]) for record, info in failed]
            self.retries.schedule_failures(failures)
        except Exception:  # never lose the batch response over a retry delay
            logger.exception("retry delays not set")
        finally:
            super()._clean()  # type: ignore[misc]  # the processor's, next in the MRO


class BackoffProcessor(ScheduledRetries, BatchProcessor):
    """Powertools' processor of a standard SQS queue, with our retry delays, that answers a
    batch whose every record failed like any other (all in batchItemFailures, no raise)."""

    def __init__(self, retries: Retries):
        super().__init__(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        self.retries = retries
