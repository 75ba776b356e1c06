"""Event source mappings on moto: what Lambda does between a queue or a stream and a function.

moto stores messages and stream records but invokes nothing. These loops do what Lambda's event
source mappings do, with the settings the template gives them:

`QueueDelivery` (SQS FIFO -> consumer)
    One poller receives batches of up to BatchSize with every attribute, shapes each message as a
    Lambda SQS record and hands the batch to a free execution environment. Records the function
    reports as failed (`batchItemFailures`, or every record when it raises) are left on the queue
    untouched, as Lambda leaves them: they come back when their visibility ends, which is the
    backoff the function set (ChangeMessageVisibility) or else the queue's VisibilityTimeout; the
    others are deleted. moto's SQS runs on devstack.clock.SQS_CLOCK, so these waits are AWS's
    waits, scaled (`SQS_CLOCK.scale`); with `idle_jump` the clock skips ahead to the next visible
    message whenever nothing is visible and nothing runs. `stats.retry_delays` holds, in AWS
    seconds, how long each failed record waited before it was received again. moto's FIFO queue
    withholds a message group while one of its messages is in flight and moves a message to the
    dead-letter queue once it has been received maxReceiveCount times, as SQS does; the poller is
    the only receiver (moto's receive is not atomic across concurrent calls) and counts any group
    handed out twice at once in `group_conflicts`, which must stay 0.

`StreamDelivery` (DynamoDB stream -> compactor)
    Reads the stream from LATEST, keeps the records that pass the template's FilterCriteria
    (devstack.streams.StreamTap, moto's event-pattern matcher), invokes in batches of up to
    BatchSize, one batch at a time, in order. A failed batch is retried from the first failed
    record, up to MaximumRetryAttempts, then described on the OnFailure queue in Lambda's format
    and skipped. Not emulated: BisectBatchOnFunctionError, MaximumRecordAgeInSeconds,
    ParallelizationFactor.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from devstack.clock import SQS_CLOCK, next_visible_at
from devstack.lambda_harness import (
    Outcome,
    failed_ids,
    invoke,
    retry_from,
    sqs_message_record,
    stream_failure_record,
)

Report = Callable[..., None]  # report(kind, message, **details)

_QUEUE_COUNTERS = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


def _quiet(kind: str, message: str, **details: Any) -> None:
    pass


def queue_counts(sqs: Any, queue_url: str) -> dict[str, int]:
    """A queue's messages: visible, in flight and delayed."""
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=list(_QUEUE_COUNTERS))
    return {name: int(attributes["Attributes"].get(name, 0)) for name in _QUEUE_COUNTERS}


def in_process(handler: Callable[[dict[str, Any], Any], Any], context: Any) -> Callable:
    """An invoke for QueueDelivery that runs a handler loaded in this process (tests and
    benchmarks), reporting as devstack's execution environments do."""
    return lambda event: invoke(handler, event, context)


@dataclass
class DeliveryStats:
    batches: int = 0
    records: int = 0
    retried: int = 0
    group_conflicts: int = 0
    sent_to_failure_queue: int = 0
    durations_ms: list[float] = field(default_factory=list)
    retry_delays: list[float] = field(default_factory=list)  # AWS seconds, failure -> next receive

    def count(self, records: int, outcome: Outcome) -> None:
        """One invocation with a batch of `records`."""
        self.batches += 1
        self.records += records
        self.durations_ms.append(outcome.duration_ms)


class _Delivery:
    """What both mappings hold: the function's invoke, its batch size, an SQS client, progress
    reports and counters, and the thread that runs the mapping's loop."""

    def __init__(
        self,
        *,
        invoke: Callable[[dict[str, Any]], Outcome],
        batch_size: int,
        sqs: Any,
        report: Report,
        label: str,
    ):
        self._invoke = invoke
        self.batch_size = batch_size
        self._sqs = sqs
        self._report = report
        self.label = label
        self.stats = DeliveryStats()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _start_thread(self, loop: Callable[[], None], role: str) -> None:
        self._thread = threading.Thread(target=loop, name=f"{self.label}-{role}", daemon=True)
        self._thread.start()

    def _stop_thread(self, timeout: float) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=timeout)


class QueueDelivery(_Delivery):
    def __init__(
        self,
        *,
        sqs: Any,
        queue_url: str,
        queue_arn: str,
        invoke: Callable[[dict[str, Any]], Outcome],
        batch_size: int,
        concurrency: int,
        idle_jump: bool = False,
        report: Report = _quiet,
        label: str = "consumer",
    ):
        super().__init__(invoke=invoke, batch_size=batch_size, sqs=sqs, report=report, label=label)
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        self.concurrency = max(1, concurrency)
        self.idle_jump = idle_jump
        self._failed_at: dict[str, float] = {}  # message id -> AWS time its failure was reported
        self._slots = threading.Semaphore(self.concurrency)
        self._in_flight_groups: dict[str, int] = {}
        self._in_flight = 0
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix=f"{self.label}-batch")
        self._start_thread(self._poll, "poller")

    def stop(self) -> None:
        self._stop_thread(timeout=10)
        if self._pool:
            self._pool.shutdown(wait=True, cancel_futures=False)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def idle(self) -> bool:
        return self.in_flight == 0 and not any(queue_counts(self._sqs, self.queue_url).values())

    def _poll(self) -> None:
        pause = 0.02
        while not self._stop.is_set():
            if not self._slots.acquire(timeout=0.2):
                continue
            try:
                # A short poll: moto's long poll spins while every visible message belongs to a
                # group in flight, which is the usual state of a busy FIFO queue.
                messages = self._receive()
            except Exception as error:  # moto stopping, or a transient error: try again
                self._slots.release()
                if not self._stop.is_set():
                    self._report("error", f"receive failed: {type(error).__name__}", level="warn")
                self._stop.wait(0.5)
                continue
            if not messages:
                self._slots.release()
                if self._jump_if_idle():
                    continue
                self._stop.wait(pause)
                pause = min(pause * 2, 0.2)
                continue
            pause = 0.02
            self._note_received(messages)
            messages = self._claim(messages)
            if not messages:
                self._slots.release()
                continue
            assert self._pool is not None
            self._pool.submit(self._deliver, messages)

    def drain(self, *, max_batches: int = 10_000) -> int:
        """Deliver batch after batch on this thread until the queue is empty (with `idle_jump`,
        through every retry, however far ahead in AWS time), or `max_batches` were delivered; return
        the batches delivered. For tests that invoke a handler in-process; not with start()."""
        batches = 0
        while batches < max_batches:  # a bound, for a test that wants to stop early
            messages = self._receive()
            if not messages:
                if self._jump_if_idle():
                    continue
                return batches
            self._note_received(messages)
            messages = self._claim(messages)
            if messages:
                self._slots.acquire()
                self._deliver(messages)
                batches += 1
        return batches

    def _receive(self) -> list[dict[str, Any]]:
        return self._sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=self.batch_size,
            WaitTimeSeconds=0,
            AttributeNames=["All"],
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])

    def _jump_if_idle(self) -> bool:
        """With idle_jump, when nothing runs and nothing is visible, move AWS time to the moment
        the next message becomes visible. True if it jumped."""
        if not self.idle_jump:
            return False
        with self._lock:
            if self._in_flight:
                return False
            ready = next_visible_at(self.queue_url)
            if ready is None:
                return False
            skipped = max(0.0, ready - SQS_CLOCK.now()) + 0.002  # moto: visible strictly after
            SQS_CLOCK.advance(skipped)
        return True

    def _note_received(self, messages: list[dict[str, Any]]) -> None:
        now = SQS_CLOCK.now()
        with self._lock:
            for message in messages:
                failed_at = self._failed_at.pop(message["MessageId"], None)
                if failed_at is not None:
                    self.stats.retry_delays.append(now - failed_at)

    def _claim(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Mark the batch's groups in flight; give back any message whose group already is."""
        groups = {m["Attributes"].get("MessageGroupId") for m in messages}
        with self._lock:
            taken = {g for g in groups if g in self._in_flight_groups}
            for group in groups - taken:
                self._in_flight_groups[group] = 1
            keep = [m for m in messages if m["Attributes"].get("MessageGroupId") not in taken]
            self._in_flight += 1 if keep else 0
        if taken:
            conflicting = [m for m in messages if m["Attributes"].get("MessageGroupId") in taken]
            self.stats.group_conflicts += len(conflicting)
            self._report(
                "error", f"{len(conflicting)} message(s) of a group in flight", level="warn"
            )
            self._release(conflicting)
        return keep

    def _deliver(self, messages: list[dict[str, Any]]) -> None:
        groups = {m["Attributes"].get("MessageGroupId") for m in messages}
        try:
            records = [sqs_message_record(m, self.queue_arn) for m in messages]
            ids = [r["messageId"] for r in records]
            outcome = self._invoke({"Records": records})
            failed = failed_ids(outcome, ids)
            done = [m for m in messages if m["MessageId"] not in failed]
            retry = [m for m in messages if m["MessageId"] in failed]
            # Our claim on the groups ends before the queue's: once a message is deleted, the
            # poller may rightly receive the group's next one.
            self._unclaim(groups)
            self._delete(done)
            failed_at = SQS_CLOCK.now()
            with self._lock:
                self._failed_at.update({m["MessageId"]: failed_at for m in retry})
            with self._lock:
                self.stats.count(len(messages), outcome)
                self.stats.retried += len(retry)
            self._report(
                "batch",
                f"{len(messages)} record(s), {len(groups)} group(s): "
                f"{len(done)} done"
                + (f", {len(retry)} to retry{self._next_retry()}" if retry else "")
                + _why(outcome),
                outcome=outcome,
                level="warn" if retry else "info",
            )
            if not outcome.ok:
                self._report(
                    "error",
                    f"{outcome.error_type}: {outcome.error_message}",
                    outcome=outcome,
                    level="warn",
                )
        except Exception as error:  # never lose the poller's slot to a bug here
            self._report("error", f"delivery failed: {error!r}", level="warn")
        finally:
            self._unclaim(groups)
            with self._lock:
                self._in_flight -= 1
            self._slots.release()

    def _unclaim(self, groups: set[Any]) -> None:
        with self._lock:
            for group in groups:
                self._in_flight_groups.pop(group, None)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        for entries in _batch_entries(messages):
            self._sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)

    def _next_retry(self) -> str:
        with contextlib.suppress(Exception):  # only a progress line
            ready = next_visible_at(self.queue_url)
            if ready is not None:
                return f" (the next one back in {ready - SQS_CLOCK.now():.0f} s, AWS time)"
        return ""

    def _release(self, messages: list[dict[str, Any]]) -> None:
        """Give back messages this poller must not deliver (their group is in flight)."""
        for entries in _batch_entries(messages, VisibilityTimeout=0):
            self._sqs.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)


def _batch_entries(messages: list[dict[str, Any]], **extra: Any) -> Iterator[list[dict[str, Any]]]:
    """The messages as entries of SQS batch calls, which take at most 10 each."""
    for start in range(0, len(messages), 10):
        chunk = messages[start : start + 10]
        yield [
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], **extra}
            for i, m in enumerate(chunk)
        ]


class StreamDelivery(_Delivery):
    def __init__(
        self,
        *,
        tap: Any,  # devstack.streams.StreamTap
        invoke: Callable[[dict[str, Any]], Outcome],
        batch_size: int,
        max_retries: int,
        sqs: Any,
        failure_queue_url: str | None,
        function_arn: str,
        poll_interval: float = 0.05,  # idle reads of the stream; wait_idle waits two cycles
        report: Report = _quiet,
        label: str = "compactor",
    ):
        super().__init__(invoke=invoke, batch_size=batch_size, sqs=sqs, report=report, label=label)
        self._tap = tap
        self.max_retries = max_retries
        self.failure_queue_url = failure_queue_url
        self.function_arn = function_arn
        self.poll_interval = poll_interval
        self._cycles = 0
        self._cycle_done = threading.Condition(self._lock)

    def start(self) -> None:
        self._tap.skip_to_end()  # StartingPosition: LATEST
        self._start_thread(self._run, "stream")

    def stop(self) -> None:
        self._stop_thread(timeout=30)

    def wait_cycles(self, count: int, timeout: float) -> bool:
        """Wait until `count` more full read-and-deliver cycles have completed."""
        with self._cycle_done:
            target = self._cycles + count
            return self._cycle_done.wait_for(lambda: self._cycles >= target, timeout=timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                records = self._tap.matching()
            except Exception as error:  # moto stopping, or a transient error: try again
                if not self._stop.is_set():
                    self._report(
                        "error", f"stream read failed: {type(error).__name__}", level="warn"
                    )
                records = []
            for start in range(0, len(records), self.batch_size):
                self._deliver(records[start : start + self.batch_size])
            with self._cycle_done:
                self._cycles += 1
                self._cycle_done.notify_all()
            if not records:
                self._stop.wait(self.poll_interval)

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        pending = batch
        attempts = 0
        while pending and not self._stop.is_set():
            attempts += 1
            outcome = self._invoke({"Records": pending})
            sequence = [r["dynamodb"]["SequenceNumber"] for r in pending]
            failed = failed_ids(outcome, sequence)
            with self._lock:
                self.stats.count(len(pending), outcome)
            self._report(
                "stream",
                f"{len(pending)} record(s): "
                + ("done" if not failed else f"{len(failed)} failed (attempt {attempts})")
                + _why(outcome),
                outcome=outcome,
                records=pending,
                level="warn" if failed else "info",
            )
            if not failed:
                return
            # Lambda resumes from the lowest failed sequence number: that record and all after.
            pending = pending[retry_from(sequence, failed) :]
            if 0 <= self.max_retries < attempts:  # -1: retry until it works, as Lambda does
                self._send_to_failure_queue(pending, outcome, attempts)
                return
            with self._lock:
                self.stats.retried += len(pending)
            self._stop.wait(min(0.2 * attempts, 1.0))

    def _send_to_failure_queue(
        self, records: list[dict[str, Any]], outcome: Outcome, attempts: int
    ):
        """Describe the batch on the OnFailure destination, as Lambda does (no record data)."""
        with self._lock:
            self.stats.sent_to_failure_queue += len(records)
        self._report("error", f"{len(records)} record(s) sent to the failure queue", level="warn")
        if not self.failure_queue_url:
            return
        body = stream_failure_record(
            records,
            shard_id=self._tap.shard_of(records[0]["dynamodb"]["SequenceNumber"]),
            function_arn=self.function_arn,
            attempts=attempts,
            function_error=None if outcome.ok else "Unhandled",
        )
        with contextlib.suppress(Exception):
            self._sqs.send_message(QueueUrl=self.failure_queue_url, MessageBody=json.dumps(body))


def _why(outcome: Outcome) -> str:
    """What the function's log named as failing in this invocation (memagent.aws.backoff), for
    the progress line: a dependency that keeps failing is named there, never only "retry"."""
    named = outcome.failures_named()
    return f": {'; '.join(dict.fromkeys(named))}" if named else ""
