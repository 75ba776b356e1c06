"""What an agent (persona) answers with: its settings, the memory store, the model, the
provider, kept media, the transcript archive and the declared tools; built once
(consumer.Consumer.from_settings) and handed to every step of a turn. The turn itself is
memagent/turn/agent.py."""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from memagent.aws import OperatorEvents
from memagent.errors import ScheduleRefused
from memagent.lifecycle import Elsewhere, forget_key

if TYPE_CHECKING:
    from collections.abc import Callable

    from memagent.aws import FollowUpSchedules, KeptMedia, TranscriptArchive
    from memagent.lifecycle import Receipt, Target
    from memagent.model import ModelClient, ToolBox
    from memagent.providers import Provider
    from memagent.store import MemoryStore
    from memagent.turn.settings import ConsumerSettings


class Speech(Protocol):
    """Who speaks a reply (VOICE_SPEECH): Amazon Polly (memagent.aws.speech.PollySpeech) or
    OpenAI's speech endpoint (memagent.model.speech.OpenAISpeech). Ogg/Opus bytes, or None when
    refused for good (the reply goes as text); a failure a retry may fix raises TransientError."""

    def synthesize(self, text: str, language: str | None) -> bytes | None: ...


class Crew:
    def __init__(
        self,
        settings: ConsumerSettings,
        store: MemoryStore,
        model: ModelClient,
        provider: Provider,
        archive: TranscriptArchive | None = None,
        media: KeptMedia | None = None,
        tools: ToolBox | None = None,
        speech: Speech | None = None,
    ):
        self.settings = settings
        self.archive = archive
        self.media = media  # voice notes and photos kept between attempts
        self.store = store
        self.model = model
        self.provider = provider
        # voice replies' speech (memagent.turn.voice): None where VoiceReplies is off
        self.speech = speech
        self.tools = tools  # the operator's declared tools (memagent/model/tools.py), if any
        self.ledger_ttl = timedelta(days=settings.ledger_ttl_days)
        self.handoff_timeout = timedelta(hours=settings.handoff_timeout_hours)
        # handoff notifications (memagent.aws.notify); no bus configured: none sent
        self.events = OperatorEvents(settings.operator_event_bus, settings.agent_id)
        # seconds the record's invocation has left for a turn's next step (None: no budget);
        # the consumer sets it for each record (memagent.turn.consumer.Consumer.process)
        self.time_left: Callable[[], float | None] = lambda: None
        # follow-ups (memagent.turn.follow_ups): the stack's schedules, where it has them, and
        # the turn at hand's target for the ones it asks for (set by the reply before the model)
        self.follow_ups: FollowUpSchedules | None = None
        if settings.follow_up_group:
            from memagent.aws import FollowUpSchedules

            self.follow_ups = FollowUpSchedules(
                settings.follow_up_group,
                settings.follow_up_role_arn or "",
                settings.queue_url or "",
                dead_letter_arn=settings.follow_up_dead_letter_arn,
            )
        self.follow_up_target: Target | None = None

    def _forget(self, pk: str, *, at: datetime | None = None) -> Receipt:
        """Erase a person (memagent.lifecycle.rights), with this agent's archive and kept media.
        Every step of a turn erases through here, so a test can strike a crash into it. Their
        follow-ups' schedules go with the follow-ups (memagent.lifecycle.rights.forget_key: a
        schedule left by a crash between, or that Scheduler would not delete, fires, finds
        nothing pending and sends nothing)."""
        return forget_key(self.store, pk, at=at, elsewhere=self.elsewhere)

    @property
    def elsewhere(self) -> Elsewhere:
        """What a person has outside the table here: archived transcripts, kept media and
        their follow-ups' schedules, erased with them."""
        return Elsewhere(archive=self.archive, media=self.media, schedules=self.follow_ups)

    def cancel_schedule(self, name: str) -> None:
        """Delete a follow-up's schedule where dropping the follow-up is what cancels it (STOP,
        an erasure): a schedule Scheduler would not delete (counted and logged there) fires,
        finds nothing pending and sends nothing."""
        if self.follow_ups is None:
            return
        with contextlib.suppress(ScheduleRefused):
            self.follow_ups.cancel(name)
