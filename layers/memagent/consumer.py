"""The consumer's record handling: an SQS record -> a provider event -> the agent's turn.

A record that can never be processed (not JSON, not an event we queue) is parked on the
dead-letter queue at once, with its reason, instead of blocking the person's queue through five
retries; everything else that fails raises, so the record (and its group) is retried.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.archive import TranscriptArchive
from memagent.errors import MalformedEvent, TransientError
from memagent.model import ModelClient
from memagent.observability import logger, metrics
from memagent.queue import ParkingQueue
from memagent.store import MemoryStore
from memagent.turn import Agent

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

    from memagent.provider import Event, Provider
    from memagent.settings import ConsumerSettings

ParseEvent = Callable[[Any], "Event"]


def provider_from_settings(settings: ConsumerSettings) -> tuple[Provider, ParseEvent]:
    """The configured provider's client and queued-event parser (only that one is imported)."""
    if settings.provider == "meta":
        from memagent import meta

        client: Provider = meta.GraphClient(
            settings.meta_graph_url,
            settings.meta_access_token,
            timeout_seconds=settings.whasp_timeout_seconds,
            typing_indicator=settings.typing_indicator,
        )
        return client, meta.parse_event
    from memagent import whasp

    assert settings.whasp_api_url  # checked by ConsumerSettings.from_env
    client = whasp.WhaspClient(
        settings.whasp_api_url,
        settings.whasp_api_key,
        timeout_seconds=settings.whasp_timeout_seconds,
        media_origins=settings.media_origins,
        media_deadline_seconds=settings.media_deadline_seconds,
    )
    return client, whasp.parse_event


class Consumer:
    def __init__(self, agent: Agent, parking: ParkingQueue | None, parse_event: ParseEvent):
        self.agent = agent
        self.parking = parking
        self.parse_event = parse_event

    @classmethod
    def from_settings(cls, settings: ConsumerSettings) -> Consumer:
        provider, parse_event = provider_from_settings(settings)
        model = ModelClient(settings, transcription_model=settings.transcription_model)
        archive = TranscriptArchive(settings.archive_bucket) if settings.archive_bucket else None
        agent = Agent(settings, MemoryStore(settings.table_name), model, provider, archive)
        parking = ParkingQueue(settings.parking_queue_url) if settings.parking_queue_url else None
        return cls(agent, parking, parse_event)

    def process(self, record: SQSRecord, *, seconds_left: float | None = None) -> str:
        """Handle one record. With too little time left in the invocation, fail it at once:
        it is retried later, instead of a Lambda timeout failing the whole batch."""
        logger.append_keys(message_id=record.message_id)
        budget = self.agent.settings.record_time_budget_seconds
        if seconds_left is not None and budget and seconds_left < budget:
            metrics.add_metric(name="RecordsDeferred", unit=MetricUnit.Count, value=1)
            raise TransientError("not enough time left in this invocation")
        try:
            event = self.parse_event(json.loads(record.body))
        except (ValueError, MalformedEvent) as error:
            return self._park(record, str(error))
        decision = self.agent.handle(event)
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
