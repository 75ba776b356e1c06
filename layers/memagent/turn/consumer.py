"""The consumer's record handling: an SQS record -> a provider event -> the agent's turn.

A record that can never be processed is parked on the dead-letter queue at once, with its
reason, instead of blocking the person's queue through its retries (hours, on the backoff):
one that is not JSON or not an event we queue (MalformedEvent), and one whose handling raises
what no retry changes (POISON: a recursion or arithmetic limit reached on the record's own data,
such as a date past year 9999). Everything else that fails raises, so the record (and its
group) is retried: a failing dependency retries on the backoff.

When it is retried is ours to say (BackoffFifoProcessor): a failed record comes back after a
backoff from its receive count (memagent.aws.backoff), a deferred one within seconds, and the
person's later records in the batch, which Powertools fails with it, wait exactly as long, so
they never run first.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from threading import Timer
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from memagent.aws import (
    KeptMedia,
    ParkingQueue,
    PollySpeech,
    Retries,
    RetryQueue,
    RetrySchedule,
    ScheduledRetries,
    TranscriptArchive,
)
from memagent.errors import Deferred, MalformedEvent
from memagent.model import ModelClient
from memagent.observability import logger, metrics
from memagent.providers import InboundMessage, provider_from_settings
from memagent.store import MemoryStore
from memagent.turn.agent import Agent
from memagent.turn.csat import parse as csat_of
from memagent.turn.follow_ups import parse as follow_up_of

if TYPE_CHECKING:
    from memagent.model import ToolBox
    from memagent.providers import Event
    from memagent.turn.crew import Speech
    from memagent.turn.settings import ConsumerSettings


# What a record's own data makes its handling raise, the same on every retry (a poison pill)
POISON: tuple[type[BaseException], ...] = (RecursionError, ArithmeticError)


class BackoffFifoProcessor(ScheduledRetries, SqsFifoPartialProcessor):
    """Powertools' FIFO processor (skip_group_on_error) that, before it reports the failures,
    sets when each failed record comes back (Retries). Powertools has no such feature.

    A batch whose every record failed is answered like any other, all of them in
    batchItemFailures, not raised: one person's failure is no function error (no Errors alarm,
    no retry of the whole batch at the visibility timeout)."""

    def __init__(self, retries: Retries):
        super().__init__(skip_group_on_error=True)
        self.raise_on_entire_batch_failure = False
        self.retries = retries
        self.expired = threading.Event()  # the watchdog fired: start no more records

    @contextmanager
    def watchdog(
        self, records: list[dict[str, Any]], seconds_left: float | None, lead: float
    ) -> Iterator[None]:
        """Shortly before the invocation's deadline (`lead` seconds): delete the records that
        succeeded and set the backoff visibility on the rest. A timeout would leave them all,
        answered ones included, to the queue's 42-minute visibility timeout."""
        self.expired.clear()
        if not lead or seconds_left is None or self.retries.queue is None:
            yield
            return
        timer = Timer(max(0.0, seconds_left - lead), self._expire, (records, lead))
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()

    def _expire(self, records: list[dict[str, Any]], lead: float) -> None:
        self.expired.set()
        queue = self.retries.queue
        assert queue is not None
        try:
            done = {_message_id(r) for r in list(self.success_messages)}
            handles = [r["receiptHandle"] for r in records if r.get("messageId") in done]
            rest = [SQSRecord(r) for r in records if r.get("messageId") not in done]
            # at least the watchdog's lead: the running record must not start again elsewhere
            # while this invocation may still be at it
            floor = math.ceil(lead) + 1
            delays = [
                (handle, max(floor, seconds))
                for handle, seconds in self.retries.plan([(r, None) for r in rest])
            ]
            refused = queue.delete(handles) + queue.postpone(delays)
            metrics.add_metric(name="WatchdogFired", unit=MetricUnit.Count, value=1)
            logger.warning(
                "deadline near: handled records deleted, the rest postponed",
                extra={"deleted": len(handles), "postponed": len(delays), "refused": refused},
            )
        except Exception:
            logger.exception("watchdog could not settle the batch")


def _speech(settings: ConsumerSettings, model: ModelClient) -> Speech | None:
    """Who speaks voice replies (memagent/turn/voice.py): None with VoiceReplies off; Amazon
    Polly, or OpenAI's speech endpoint on the model's own (VOICE_SPEECH=openai), which a stack
    speaking through Polly never imports."""
    if settings.voice_replies == "off":
        return None
    if settings.voice_speech == "openai":
        from memagent.model import OpenAISpeech

        return OpenAISpeech(
            model, speech_model=settings.voice_openai_model, voice=settings.voice_openai_voice
        )
    return PollySpeech(settings.voice_engine)


def _toolbox(settings: ConsumerSettings) -> ToolBox | None:
    """The tools the model is offered (the declared ones and the built-in request_human,
    offer_choices, schedule_follow_up), or None: a stack with none (HANDOFF_TOOL=false,
    CHOICES_TOOL=false, no tools file, no follow-ups) never imports memagent.model.tools."""
    if not (
        settings.tools or settings.handoff_tool or settings.choices_tool or settings.follow_up_group
    ):
        return None
    from memagent.model import ToolBox

    return ToolBox(
        settings.tools,
        max_output_chars=settings.tool_output_max_chars,
        lambda_timeout_seconds=settings.tool_timeout_seconds,
        handoff=settings.handoff_tool,
        follow_ups=bool(settings.follow_up_group),
        choices=settings.choices_tool,
    )


def _poison(error: BaseException) -> str:
    """A poison pill's reason: its kind, and Python's own words for it (no content of ours)."""
    return f"{type(error).__name__}: {str(error)[:120]}"


def _message_id(record: Any) -> str | None:
    """A record's message id, whether Powertools kept it as its data class or the raw dict."""
    return record.get("messageId") if isinstance(record, dict) else record.message_id


class Consumer:
    def __init__(
        self,
        agent: Agent,
        parking: ParkingQueue | None,
        parse_event: Callable[[Any], Event],
        retries: Retries | None = None,
    ):
        self.agent = agent
        self.parking = parking
        self.parse_event = parse_event
        self.retries = retries or Retries(None, RetrySchedule(), defer_seconds=2)
        self._followed: frozenset[str] = frozenset()  # see look_ahead

    def look_ahead(self, records: Iterable[dict[str, Any]]) -> None:
        """Before a batch is processed: note each record whose person's next record in the
        batch is a message that joins its burst. Such a record is stored and left for the
        burst's last message to answer, with all of them in one context (one model call, one
        reply). A person's waiting messages reach us together once their previous turn is
        done (the FIFO group holds them meanwhile), so this is the natural burst."""
        if not self.agent.settings.coalesce_bursts:
            self._followed = frozenset()
            return
        by_group: dict[str, list[tuple[str, Event | None]]] = {}
        for record in records:
            group = (record.get("attributes") or {}).get("MessageGroupId") or ""
            queued = by_group.setdefault(group, [])
            queued.append((record.get("messageId", ""), self._event(record)))
        followed = set()
        for queued in by_group.values():
            for index, (message_id, event) in enumerate(queued):
                if not isinstance(event, InboundMessage):
                    continue
                # the next different event (a repeat of this one in the same batch is no
                # follower: it is a no-op, and the burst would wait for nobody)
                after = next(
                    (
                        e
                        for _, e in queued[index + 1 :]
                        if e is None or e.event_id != event.event_id
                    ),
                    None,
                )
                if isinstance(after, InboundMessage) and not self.agent.answered_alone(after):
                    followed.add(message_id)
        self._followed = frozenset(followed)

    def _event(self, record: dict[str, Any]) -> Event | None:
        """The event a raw record carries, or None if it cannot be read (it will be parked)."""
        try:
            return self.parse_event(json.loads(record.get("body") or ""))
        except (ValueError, TypeError, AttributeError, MalformedEvent, *POISON):  # type: ignore[misc]  # mypy reads no * here
            return None

    @classmethod
    def from_settings(cls, settings: ConsumerSettings) -> Consumer:
        provider, parse_event = provider_from_settings(settings)
        transcription = None
        if settings.transcription_base_url:  # a separate endpoint for voice notes
            transcription = (settings.transcription_base_url, settings.transcription_api_key)
        model = ModelClient(
            settings, transcription_model=settings.transcription_model, transcription=transcription
        )
        archive = TranscriptArchive(settings.archive_bucket) if settings.archive_bucket else None
        media = KeptMedia(settings.media_bucket) if settings.media_bucket else None
        agent = Agent(
            settings,
            MemoryStore(settings.table_name, retention=settings.retention),
            model,
            provider,
            archive,
            media=media,
            tools=_toolbox(settings),
            speech=_speech(settings, model),
        )
        parking = ParkingQueue(settings.parking_queue_url) if settings.parking_queue_url else None
        retries = Retries(
            RetryQueue(settings.queue_url) if settings.queue_url else None,
            RetrySchedule(
                base_seconds=settings.retry_base_seconds,
                cap_seconds=settings.retry_max_seconds,
                jitter=settings.retry_jitter,
            ),
            defer_seconds=settings.defer_seconds,
        )
        return cls(agent, parking, parse_event, retries)

    def processor(self) -> BackoffFifoProcessor:
        self._processor = BackoffFifoProcessor(self.retries)
        return self._processor

    def expiring(self) -> bool:
        processor = getattr(self, "_processor", None)
        return processor is not None and processor.expired.is_set()

    def process(self, record: SQSRecord, *, time_left: Callable[[], float] | None = None) -> str:
        """Handle one record. With too little time left in the invocation (`time_left`: the
        Lambda context's, in seconds), fail it at once: it is retried later, instead of a Lambda
        timeout failing the whole batch. A tool turn checks it again before each step
        (memagent.turn.tool_loop), ending the watchdog's lead early."""
        logger.append_keys(message_id=record.message_id)
        if self.expiring():
            raise Deferred("the invocation's deadline is near (watchdog)")
        settings = self.agent.settings
        budget = settings.record_time_budget_seconds
        if not budget or time_left is None:
            self.agent.time_left = lambda: None
        else:
            clock, lead = time_left, settings.watchdog_seconds
            self.agent.time_left = lambda: clock() - lead
            if clock() < budget:
                metrics.add_metric(name="RecordsDeferred", unit=MetricUnit.Count, value=1)
                raise Deferred("not enough time left in this invocation")
        try:
            raw = json.loads(record.body)
            # a follow-up whose time came (EventBridge Scheduler), a hand-back's CSAT question
            # (the admin API), else the provider's event
            event = follow_up_of(raw) or csat_of(raw) or self.parse_event(raw)
        except (ValueError, MalformedEvent) as error:
            return self._park(record, str(error))
        except POISON as error:
            return self._park(record, _poison(error))
        try:
            decision = self.agent.handle(event, followed=record.message_id in self._followed)
        except POISON as error:
            return self._park(record, _poison(error))
        logger.info("event handled", extra={"decision": decision})
        return decision

    def _park(self, record: SQSRecord, reason: str) -> str:
        reason = reason if isinstance(reason, str) else "malformed"
        metrics.add_metric(name="EventsParked", unit=MetricUnit.Count, value=1)
        logger.error("event parked: cannot be processed", extra={"reason": reason[:200]})
        if self.parking is None:
            raise MalformedEvent(reason)  # no parking queue: fail, so the redrive policy parks it
        self.parking.park(
            record.body, group=record.attributes.message_group_id or "parked", reason=reason
        )
        return "parked"
