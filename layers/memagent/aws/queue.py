"""SQS: the per-person FIFO queue between the webhook and the consumer."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from memagent.aws.sqs import SqsSender
from memagent.errors import QueueUnavailable
from memagent.memory import agent_key, person_key

if TYPE_CHECKING:
    from collections.abc import Sequence

    class Envelope(Protocol):
        """Any provider's envelope: an id, the person's identity (chat), the raw event."""

        @property
        def id(self) -> str: ...
        @property
        def chat(self) -> str | None: ...
        @property
        def raw(self) -> dict[str, Any]: ...


# The webhook must answer whasp within its 10 s deadline (and its 10 s Lambda timeout): fail
# fast with a 503 and let whasp retry. Worst case: 2 attempts in all (total_max_attempts counts
# the first) x (0.5 s connect + 1 s read) + one backoff (standard mode: under 1 s) = 4 s, for
# the webhook's own sender (memagent.aws.sqs, which reads these values) as for a boto3 client; with
# the secret's read on a cold start (settings.SSM_CONFIG, the same 4 s), 8 s. SendMessage takes
# tens of milliseconds in a region, so these cut only a failing call short.
DEADLINE_CONFIG = Config(
    connect_timeout=0.5,
    read_timeout=1.0,
    retries={"total_max_attempts": 2, "mode": "standard"},
)
_CONFIG = DEADLINE_CONFIG
# The consumer's own calls on the event queue (retry delays, the watchdog's deletes) are not on
# anyone's 10 s clock, and one refused call leaves a person's group waiting for the queue's
# 42-minute visibility: longer timeouts and 5 attempts (standard mode's backoff between them).
VISIBILITY_CONFIG = Config(
    connect_timeout=2.0,
    read_timeout=5.0,
    retries={"total_max_attempts": 5, "mode": "standard"},
)
# One POST's batches in flight at once (botocore's HTTP session pools 10 connections), and the
# last moment one may start: a call started by then ends within DEADLINE_CONFIG's 4 s, inside
# whasp's 10 s (Meta asks for less; a POST of that size is no ordinary delivery).
SEND_CONCURRENCY = 10
FANOUT_DEADLINE_SECONDS = 2.0


def group_id(agent: str, envelope: Envelope) -> str:
    """One FIFO group per person (hashed: no phone number in queue metadata); agent-wide events
    such as number.replaced get a group of their own."""
    if envelope.chat:
        return person_key(agent, envelope.chat)
    return agent_key(agent)


def deduplication_id(event_id: str) -> str:
    """SQS allows 128 characters from a limited alphabet; a digest of the event id always fits."""
    return hashlib.sha256(event_id.encode()).hexdigest()


class EventQueue:
    """The webhook's side: sends with memagent.aws.sqs.SqsSender, not a boto3 client (the client
    would cost the webhook's cold start about 130 ms; see that module). `client` may be any
    object with boto3's send_message and send_message_batch, a boto3 client included."""

    def __init__(self, queue_url: str, client: Any | None = None):
        self.queue_url = queue_url
        self._sqs = client or SqsSender(queue_url, config=_CONFIG)

    def enqueue(self, agent: str, envelope: Envelope) -> str:
        """Queue one whasp event; return the SQS message id or raise QueueUnavailable."""
        try:
            # the body is ASCII-escaped JSON: SQS refuses some characters JSON allows (lone
            # surrogates); a 256 KB body stays under SQS's 1 MiB message limit even escaped
            response = self._sqs.send_message(
                QueueUrl=self.queue_url, **self._entry(agent, envelope)
            )
        except (BotoCoreError, ClientError) as error:
            raise QueueUnavailable(_reason(error)) from None
        if not response.get("MessageId"):  # an answer that does not say it was taken
            raise QueueUnavailable("SendMessage answered without a MessageId")
        return response["MessageId"]

    def put_internal(self, body: dict[str, Any], *, group: str, event_id: str) -> None:
        """Queue one of the stack's own signed events (the admin API's CSAT question) in the
        person's FIFO group `group`, deduplicated by `event_id`; QueueUnavailable if not taken."""
        try:
            self._sqs.send_message(
                QueueUrl=self.queue_url,
                MessageBody=json.dumps(body, ensure_ascii=True),
                MessageGroupId=group,
                MessageDeduplicationId=deduplication_id(event_id),
            )
        except (BotoCoreError, ClientError) as error:
            raise QueueUnavailable(_reason(error)) from None

    def enqueue_all(self, agent: str, envelopes: Sequence[Envelope]) -> int:
        """Queue many events (one provider POST's), 10 per SendMessageBatch call; return how
        many were queued, or raise QueueUnavailable if any entry was not taken: the provider
        retries the whole POST, and the entries already queued are dropped as duplicates
        (their deduplication ids) within SQS's 5-minute deduplication window.

        A POST can carry thousands of small messages (the body cap allows ~4,000): the calls
        run SEND_CONCURRENCY at a time, and none starts past FANOUT_DEADLINE_SECONDS, so the
        provider hears 2xx or 503 within its 10 s whatever the count (a failing SQS included)."""
        batches = _batches([self._entry(agent, e) for e in envelopes])
        if len(batches) <= 1:
            for chunk in batches:
                self._send_batch(chunk, deadline=None)
            return len(envelopes)
        deadline = time.monotonic() + FANOUT_DEADLINE_SECONDS
        workers = min(SEND_CONCURRENCY, len(batches))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            sends = [pool.submit(self._send_batch, chunk, deadline=deadline) for chunk in batches]
            try:
                for send in sends:
                    send.result()
            except QueueUnavailable:
                for send in sends:
                    send.cancel()  # the provider retries the whole POST anyway
                raise
        return len(envelopes)

    def _send_batch(self, chunk: list[dict[str, Any]], *, deadline: float | None) -> None:
        if deadline is not None and time.monotonic() > deadline:
            raise QueueUnavailable("the POST's events did not fit in the webhook's deadline")
        try:
            response = self._sqs.send_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), **entry} for i, entry in enumerate(chunk)],
            )
        except (BotoCoreError, ClientError) as error:
            raise QueueUnavailable(_reason(error)) from None
        failed = response.get("Failed") or []
        if failed:
            codes = sorted({str(f.get("Code")) for f in failed})
            raise QueueUnavailable(f"{len(failed)} entries refused: {', '.join(codes)}")
        taken = {str(s.get("Id")) for s in response.get("Successful") or []}
        if len(taken) != len(chunk):  # an answer that accounts for fewer entries than sent
            raise QueueUnavailable(f"{len(chunk) - len(taken)} entries unaccounted for")

    @staticmethod
    def _entry(agent: str, envelope: Envelope) -> dict[str, Any]:
        return {
            "MessageBody": json.dumps(envelope.raw, separators=(",", ":")),
            "MessageGroupId": group_id(agent, envelope),
            "MessageDeduplicationId": deduplication_id(envelope.id),
        }


def _reason(error: Exception) -> str:
    """What the log says of a failed send: the error's class, and SQS's code when it answered
    (throttling passes; a denied access or a missing queue needs an operator)."""
    if isinstance(error, ClientError):
        return f"{type(error).__name__}: {error.response.get('Error', {}).get('Code')}"
    return type(error).__name__


BATCH_ENTRIES = 10  # SQS's cap on entries per SendMessageBatch
BATCH_BYTES = 256 * 1024  # the total payload cap we keep a batch under (SQS's older, lower one)


def _batches(entries: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Entries in order, at most 10 and at most BATCH_BYTES of bodies per batch (a single
    larger entry goes alone: SQS checks it against the per-message limit)."""
    batches: list[list[dict[str, Any]]] = []
    size = 0
    for entry in entries:
        length = len(entry["MessageBody"].encode())
        if not batches or len(batches[-1]) == BATCH_ENTRIES or size + length > BATCH_BYTES:
            batches.append([])
            size = 0
        batches[-1].append(entry)
        size += length
    return batches


class _Queue:
    """A queue the consumer or the compactor writes to now and then, through a boto3 client
    made on first use: a turn that fails nothing and parks nothing needs none (boto3 loads a
    service's model at its first client: a cold start's time)."""

    config: Config | None = None  # the client's

    def __init__(self, queue_url: str):
        self.queue_url = queue_url

    @functools.cached_property
    def _sqs(self) -> Any:
        import boto3  # not on the webhook's cold path

        return boto3.client("sqs", config=self.config)


class RetryQueue(_Queue):
    """The consumer's side of the event queue: when a failed record comes back. Lambda leaves a
    failed record alone, so it would return only at the queue's VisibilityTimeout; setting its
    visibility on its receipt handle brings it back after our backoff instead."""

    config = VISIBILITY_CONFIG

    def delete(self, handles: list[str]) -> int:
        """Delete records that were handled (the watchdog's, before a timeout would return
        them); return how many SQS did not take."""
        entries = [{"ReceiptHandle": handle} for handle in handles]
        return self._in_batches(self._sqs.delete_message_batch, entries)

    def postpone(self, delays: list[tuple[str, int]]) -> int:
        """Make each (receipt handle, seconds) record visible again after its seconds; return
        how many SQS did not take (those come back at the queue's VisibilityTimeout)."""
        entries = [{"ReceiptHandle": h, "VisibilityTimeout": s} for h, s in delays]
        return self._in_batches(self._sqs.change_message_visibility_batch, entries)

    def _in_batches(self, call: Any, entries: list[dict[str, Any]]) -> int:
        """`call` on the entries, 10 at a time (SQS's batch size); how many it did not take."""
        refused = 0
        for start in range(0, len(entries), 10):
            chunk = entries[start : start + 10]
            try:
                response = call(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(i), **entry} for i, entry in enumerate(chunk)],
                )
            except (BotoCoreError, ClientError):
                refused += len(chunk)
                continue
            refused += len(response.get("Failed") or [])
        return refused


class FailureQueue(RetryQueue):
    """CompactionFailureQueue, as the compactor reads it (memagent.compaction.retry): its failed
    retries come back on our backoff (RetryQueue), and the retries it queues wait a while."""

    def send_later(self, bodies: list[str], *, delay: int) -> None:
        """Queue each body, visible after `delay` seconds (SQS takes at most 900). Raises
        QueueUnavailable if SQS refused any: the caller's message is retried, sending again."""
        entries = [{"MessageBody": body, "DelaySeconds": delay} for body in bodies]
        refused = self._in_batches(self._sqs.send_message_batch, entries)
        if refused:
            raise QueueUnavailable(f"SQS refused {refused} of {len(entries)} retries")


class ParkingQueue(_Queue):
    """The FIFO dead-letter queue, where events that can never be processed are parked at once
    (with their reason) for an operator to inspect, instead of being dropped or retried."""

    def park(self, body: str, *, group: str, reason: str) -> None:
        self._sqs.send_message(
            QueueUrl=self.queue_url,
            MessageBody=body,
            MessageGroupId=group,
            MessageDeduplicationId=hashlib.sha256(body.encode()).hexdigest(),
            MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:256]}},
        )
