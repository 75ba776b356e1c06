"""The operator's seat: a hand on one person's memory, and on their chat when a human takes it.

Used by the admin API (functions/admin/app.py), and so by scripts/people.py and the console.

Memory by hand: read the conversation, its summary and the facts (with their ids and dates);
add, correct or delete one fact; replace the summary. Each edit is a conditional write
(memagent.operator_store), so an edit racing a compaction loses neither: the loser is told
(409) or, for a compaction, leaves its turns raw for the next fold. The next turn reads the
edited memory like any other (one Query), so an edit shows in the next reply's context.

Handoff: `take_over` hands the chat to a human; while handed off the agent stores what the
person writes and says nothing (memagent.turn); `reply` sends the operator's words through the
stack's provider, exactly once per idempotency key (a ledger entry keyed by it, send keys
derived from it, parts recorded as they go out, like the agent's replies), split like the
agent's, and stores them as the business's side of the conversation, marked `author: human`;
`hand_back` (or HandoffTimeoutHours without an operator reply) gives the chat back.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.errors import (
    ConcurrentUpdate,
    ConfigurationError,
    EditConflict,
    InvalidEdit,
    OptedOut,
    SendRejected,
    UnknownPerson,
    WindowClosed,
)
from memagent.facts import fact_key, looks_like_instruction
from memagent.lifecycle import resolve
from memagent.memory import Memory, Turn
from memagent.notify import HANDOFF_ENDED, HANDOFF_STARTED, OperatorEvents
from memagent.observability import logger
from memagent.person import agent_key
from memagent.provider import PERSON_ID, idempotency_key, split_text
from memagent.store import handoff_of
from memagent.store_ledger import PART, SENT, sent_parts

if TYPE_CHECKING:
    from memagent.memory import Handoff
    from memagent.operator_store import OperatorStore
    from memagent.provider import Provider
    from memagent.settings import MemorySettings

HUMAN = "human"
MAX_SUMMARY_CHARS = 2_000
MAX_REPLY_CHARS = 4 * 4096  # at most four WhatsApp messages
SERVICE_WINDOW = timedelta(hours=24)  # Meta's customer-service window
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
FACT_ID = re.compile(r"[0-9a-f]{1,64}\Z")
RACE_ATTEMPTS = 3


def identifier(raw: str) -> str:
    """A person's identifier from the path: a phone in E.164 or a Meta BSUID."""
    if not PERSON_ID.match(raw):
        raise InvalidEdit(
            "the person must be a phone in E.164, e.g. +447700900123 (URL-encode the +), "
            "or a Meta business-scoped user id, e.g. US.13491208655302741918"
        )
    return raw


def _text(value: Any, what: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidEdit(f'"{what}" must be a non-empty string')
    text = value.strip()
    if len(text) > limit:
        raise InvalidEdit(f'"{what}" is {len(text)} characters; at most {limit}')
    return text


def _when(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def handoff_view(handoff: Handoff | None, timeout: timedelta, now: datetime) -> dict[str, Any]:
    if handoff is None or handoff.expired(now, timeout):
        return {"handed_off": False}
    return {
        "handed_off": True,
        "since": _when(handoff.since),
        "reason": handoff.reason,
        "replied_at": _when(handoff.replied_at),
        "waiting": handoff.waiting,
        "expires_at": _when(max(handoff.since, handoff.replied_at or handoff.since) + timeout),
    }


class Operator:
    """What an operator can do to one person's memory and chat (see the module docstring)."""

    def __init__(
        self,
        settings: MemorySettings,
        store: OperatorStore,
        *,
        events: OperatorEvents | None = None,
        provider: Callable[[], Provider] | None = None,
        meta: bool = False,
    ):
        self.settings = settings
        self.store = store
        self.events = events or OperatorEvents(None, settings.agent_id)
        self._provider = provider  # built on the first reply: reads need no provider secret
        self._client: Provider | None = None
        self.meta = meta  # Meta's 24-hour window applies to what the operator sends
        self.timeout = timedelta(hours=settings.handoff_timeout_hours)

    # ------------------------------------------------------------------ reading

    def person(self, who: str) -> tuple[str, Memory]:
        """The person's key and memory; UnknownPerson if we hold none."""
        pk = resolve(self.store, self.settings.agent_id, identifier(who))
        memory = self.store.load(pk)
        if not memory.state.last_seq:
            raise UnknownPerson("no memory is held for this person")
        logger.append_keys(person=pk)
        return pk, memory

    def conversation(self, who: str) -> dict[str, Any]:
        pk, memory = self.person(who)
        return self._view(pk, memory)

    def _view(self, pk: str, memory: Memory) -> dict[str, Any]:
        state, summary = memory.state, memory.summary
        return {
            "person": pk,
            "handoff": handoff_view(state.handoff, self.timeout, datetime.now(UTC)),
            "opted_out": state.opted_out,
            "last_inbound_at": _when(state.last_inbound_at),
            "summary": (
                {"text": summary.text, "at": _when(summary.at), "covers_up_to": summary.marker}
                if summary
                else None
            ),
            "facts": self.store.facts(pk),
            "messages": [
                {
                    "seq": turn.seq,
                    "by": "person" if turn.role == "user" else (turn.author or "agent"),
                    "text": turn.text,
                    "at": _when(turn.at),
                }
                for turn in memory.turns
            ],
        }

    def facts(self, who: str) -> dict[str, Any]:
        pk, _memory = self.person(who)
        return {"person": pk, "facts": self.store.facts(pk)}

    def waiting(self) -> dict[str, Any]:
        """Who is waiting for a human, oldest handoff first (timed-out handoffs left out)."""
        now = datetime.now(UTC)
        people = []
        for item in self.store.handoffs(self.settings.agent_id):
            view = handoff_view(handoff_of(item), self.timeout, now)
            if view["handed_off"]:  # the address: to open and answer the chat
                people.append(
                    {"person": item["pk"], "address": item.get("handoff_address"), **view}
                )
        return {"handoffs": people}

    # ------------------------------------------------------------------ memory by hand

    def _fact_text(self, body: dict[str, Any]) -> str:
        text = " ".join(_text(body.get("text"), "text", self.settings.max_fact_chars).split())
        if looks_like_instruction(text):
            raise InvalidEdit(
                "a fact is data about the person, not an instruction to the agent "
                "(instructions belong in the system prompt)"
            )
        return text

    def _fact_id(self, raw: str) -> str:
        if not FACT_ID.match(raw):
            raise InvalidEdit("a fact id is the hex id the facts list gives")
        return raw

    def add_fact(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        text = self._fact_text(body)
        pk, _memory = self.person(who)
        key = fact_key(text)
        if not self.store.add_fact(pk, key, text, datetime.now(UTC)):
            raise EditConflict("this fact is held already (or the person was just erased)")
        return {"person": pk, "fact": {"id": key, "text": text}}

    def correct_fact(self, who: str, fact_id: str, body: dict[str, Any]) -> dict[str, Any]:
        old, text = self._fact_id(fact_id), self._fact_text(body)
        pk, _memory = self.person(who)
        key = fact_key(text)
        reasons = self.store.correct_fact(pk, old, key, text, datetime.now(UTC))
        if reasons is not None:
            if reasons[0] == "ConditionalCheckFailed":
                raise UnknownPerson("no such fact (deleted, or folded away by a compaction)")
            raise EditConflict("the corrected text is a fact held already")
        return {"person": pk, "fact": {"id": key, "text": text}, "replaced": old}

    def delete_fact(self, who: str, fact_id: str) -> dict[str, Any]:
        key = self._fact_id(fact_id)
        pk, _memory = self.person(who)
        if not self.store.delete_fact(pk, key):
            raise UnknownPerson("no such fact (deleted already, or dropped by a compaction)")
        return {"person": pk, "deleted": key}

    def replace_summary(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the summary. `based_on`: the summary's `at` as the operator read it (null
        when there was none); without it, the summary as it stands now."""
        text = _text(body.get("text"), "text", MAX_SUMMARY_CHARS)
        pk, memory = self.person(who)
        if "based_on" in body:
            seen = body["based_on"]
            try:
                seen_at = datetime.fromisoformat(seen) if seen is not None else None
            except (TypeError, ValueError):
                raise InvalidEdit('"based_on" must be the summary\'s "at", or null') from None
        else:
            seen_at = memory.summary.at if memory.summary else None
        at = datetime.now(UTC)
        if not self.store.replace_summary(pk, text, seen_at=seen_at, at=at):
            raise EditConflict(
                "the summary changed since it was read (a compaction folded more in): "
                "read it again and redo the edit"
            )
        return {"person": pk, "summary": {"text": text, "at": _when(at)}}

    # ------------------------------------------------------------------ handoff

    def take_over(self, who: str) -> dict[str, Any]:
        """Hand the chat to a human (idempotent: a handoff in force stays as it is)."""
        pk, memory = self.person(who)
        handoff = memory.state.handoff
        now = datetime.now(UTC)
        if handoff is not None and not handoff.expired(now, self.timeout):
            return {"person": pk, "handoff": handoff_view(handoff, self.timeout, now)}
        previous = handoff.since if handoff else None
        if not self.store.take_over(
            pk,
            agent=self.settings.agent_id,
            reason="operator",
            at=now,
            previous=previous,
            address=identifier(who),
        ):
            _pk, memory = self.person(who)  # someone else took it meanwhile: theirs stands
            return {"person": pk, "handoff": handoff_view(memory.state.handoff, self.timeout, now)}
        self.events.emit(HANDOFF_STARTED, pk, reason="operator", since=now)
        logger.info("chat handed to a human", extra={"reason": "operator"})
        _pk, memory = self.person(who)
        return {"person": pk, "handoff": handoff_view(memory.state.handoff, self.timeout, now)}

    def hand_back(self, who: str) -> dict[str, Any]:
        """Give the chat back to the agent (idempotent)."""
        pk, _memory = self.person(who)
        ended = self.store.hand_back(pk)
        if ended:
            self.events.emit(HANDOFF_ENDED, pk, reason="operator")
            logger.info("chat handed back to the agent")
        return {"person": pk, "handoff": {"handed_off": False}, "ended": ended}

    def reply(self, who: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        """Send the operator's words to the person, exactly once per idempotency key."""
        text = _text(body.get("text"), "text", MAX_REPLY_CHARS)
        key = key or body.get("idempotency_key")
        if not isinstance(key, str) or not IDEMPOTENCY_KEY.match(key):
            raise InvalidEdit(
                'an Idempotency-Key header (or "idempotency_key") is required: 1 to 128 '
                "letters, digits, '_', '.', ':' or '-', the same for every retry of this reply"
            )
        event_key = f"operator:{key}"
        pk = ""
        for attempt in range(1, RACE_ATTEMPTS + 1):
            pk, memory = self.person(who)
            entry = self.store.ledger(pk, event_key)
            if entry is not None:  # a retry of this request: finish it, send nothing new
                return self._resume(pk, memory, who, event_key, entry)
            self._may_send(memory)
            turn = Turn(
                seq=memory.next_seq,
                role="assistant",
                text=text,
                at=datetime.now(UTC),
                number=self.store.current_number(
                    agent_key(self.settings.agent_id), memory.state.last_number
                ),
                author=HUMAN,
            )
            try:
                stored = self.store.remember_operator_reply(
                    pk,
                    previous=memory.state,
                    turn=turn,
                    key=event_key,
                    compact=turn.seq - memory.state.marker >= self.settings.compact_threshold,
                    ledger_ttl=timedelta(days=self.settings.ledger_ttl_days),
                )
            except ConcurrentUpdate:
                if attempt == RACE_ATTEMPTS:
                    raise
                continue  # a message of the person's took the seq: read again
            if not stored:
                continue  # the same request, concurrently: resume it on the next pass
            logger.info("operator reply stored", extra={"seq": turn.seq})
            return self._send(pk, who, event_key, turn, {})
        raise ConcurrentUpdate("memory kept changing while storing the reply")

    def _may_send(self, memory: Memory) -> None:
        if self._provider is None:
            raise ConfigurationError("PROVIDER is not set: this admin API sends nothing")
        state = memory.state
        if not state.handed_off(datetime.now(UTC), self.timeout):
            raise EditConflict("take the chat over first (POST /people/{id}/handoff)")
        if state.opted_out:
            raise EditConflict("the person opted out (STOP): nothing can be sent to them")
        last = state.last_inbound_at
        if self.meta and (last is None or datetime.now(UTC) - last >= SERVICE_WINDOW):
            raise WindowClosed()

    def _resume(
        self, pk: str, memory: Memory, who: str, event_key: str, entry: dict[str, Any]
    ) -> dict[str, Any]:
        seq = int(entry.get("reply_seq", 0))
        status = entry.get("status")
        if status == SENT:
            parts = sent_parts(entry)
            return {"person": pk, "seq": seq, "parts": len(parts), "repeat": True}
        turn = next((t for t in memory.turns if t.seq == seq), None)
        if status != "stored" or turn is None:
            code = entry.get("error_code")
            if code is not None and int(code) == WindowClosed().code:
                raise WindowClosed()
            raise EditConflict(f"this reply was not sent ({status}); send it with a new key")
        return self._send(pk, who, event_key, turn, sent_parts(entry), repeat=True)

    def _send(
        self,
        pk: str,
        who: str,
        event_key: str,
        turn: Turn,
        sent: dict[int, str],
        *,
        repeat: bool = False,
    ) -> dict[str, Any]:
        assert self._provider is not None  # checked by _may_send before anything is stored
        if self._client is None:
            self._client = self._provider()
        provider = self._client
        parts = split_text(turn.text)
        sent = dict(sent)
        try:
            for part, chunk in enumerate(parts):
                if part in sent:
                    continue  # went out on an earlier try of this request
                sent[part] = (
                    provider.send_text(
                        sender=turn.number or "",
                        to=who,
                        text=chunk,
                        key=idempotency_key(event_key, part),
                    )
                    or "sent"
                )
                if part < len(parts) - 1:
                    self.store.record_part(pk, event_key, part, sent[part])
        except OptedOut:
            if not sent:
                self.store.withdraw_reply(pk, event_key, turn.seq, opted_out=True)
            self.store.record_opt_out(pk, datetime.now(UTC))
            raise EditConflict("the person opted out (STOP): nothing was sent") from None
        except SendRejected as error:
            if not sent:
                details: dict[str, Any] = {"http_status": error.status}
                if error.code is not None:
                    details["error_code"] = error.code
                self.store.withdraw_reply(pk, event_key, turn.seq, **details)
            if error.code == WindowClosed().code:
                raise WindowClosed() from None
            raise
        self.store.finish_event(pk, event_key, SENT, **{f"{PART}{p}": i for p, i in sent.items()})
        logger.info("operator reply sent", extra={"parts": len(parts), "repeat": repeat})
        return {"person": pk, "seq": turn.seq, "parts": len(parts), "repeat": repeat}
