"""What every part of the operator's seat (memagent/operator/reading.py) starts from: the person an
identifier reaches, and the checks on what an operator types."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.errors import InvalidEdit, UnknownPerson
from memagent.lifecycle import left_by_ttl, left_half_done, resolve
from memagent.memory import Memory
from memagent.observability import logger
from memagent.providers import PERSON_ID

if TYPE_CHECKING:
    from memagent.aws import EventQueue, FollowUpSchedules, OperatorEvents
    from memagent.operator.settings import AdminSettings
    from memagent.operator.templates import TemplateCatalog
    from memagent.providers import Provider
    from memagent.store import OperatorStore


def identifier(raw: str) -> str:
    """A person's identifier from the path: a phone in E.164 or a Meta BSUID."""
    if not PERSON_ID.match(raw):
        raise InvalidEdit(
            "the person must be a phone in E.164, e.g. +447700900123 (URL-encode the +), "
            "or a Meta business-scoped user id, e.g. US.13491208655302741918"
        )
    return raw


def required_text(value: Any, what: str, limit: int) -> str:
    """A body's text field: a non-empty string of at most `limit` characters, stripped."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidEdit(f'"{what}" must be a non-empty string')
    text = value.strip()
    if len(text) > limit:
        raise InvalidEdit(f'"{what}" is {len(text)} characters; at most {limit}')
    return text


class Seat:
    """The operator's collaborators, and the person each request is about."""

    def __init__(
        self,
        settings: AdminSettings,
        store: OperatorStore,
        *,
        events: OperatorEvents,
        provider: Callable[[], Provider] | None = None,
        meta: bool,
        schedules: FollowUpSchedules | None = None,
        templates: TemplateCatalog | None = None,
        questions: EventQueue | None = None,
    ):
        self.settings = settings
        self.schedules = schedules  # follow-ups' schedules (memagent.aws.scheduler), if any
        self.store = store
        self.events = events  # its bus, if any, is the admin function's (functions/admin)
        self._provider = provider  # built on the first reply: reads need no provider secret
        self._client: Provider | None = None
        self.meta = meta  # Meta's 24-hour window applies to what the operator sends
        self.catalog = templates  # Meta's approved templates (MetaWabaId), if any
        self.timeout = timedelta(hours=settings.handoff_timeout_hours)
        # the event queue, for the CSAT question a hand-back asks the consumer to send
        self.questions = questions

    def person(self, who: str) -> tuple[str, Memory]:
        """The person's key and memory; UnknownPerson if we hold none. A memory whose retention
        has ended is gone here as for the turn (memagent.turn.agent.Agent._whose), whether or
        not DynamoDB's TTL has deleted it yet ("typically within two days"), and so is what an
        erasure that stopped half-way left: nobody reads, edits, answers or schedules from it."""
        pk = resolve(self.store, self.settings.agent_id, identifier(who))
        memory = self.store.load(pk)
        ended = left_by_ttl(memory, datetime.now(UTC)) or left_half_done(memory)
        if not memory.state.last_seq or ended is not None:
            raise UnknownPerson("no memory is held for this person")
        logger.append_keys(person=pk)
        return pk, memory
