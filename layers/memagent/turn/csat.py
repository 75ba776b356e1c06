"""The one-tap CSAT question after an operator's hand-back (issue 42, item 4), sent exactly once.

The admin API queues it in the person's FIFO group (memagent/lifecycle/csat.py) after keeping,
on their state, where it goes and the handoff it follows (`csat_address`, `csat_for`). Here:

    a repeat?             its ledger entry holds the words: send the parts not sent, the same way
    still wanted?         `csat_for` is not this question's (sent, or a later hand-back's): nothing
    expired?              nobody there, retention ended, an erasure half-done: dropped
    still their address?  a recycled number's new owner, a moved BSUID: dropped, counted
    opted out?            dropped: nothing is ever sent after STOP
    a human has it again? dropped: the operator's chat is theirs
    Meta's window closed? dropped, counted (no template asks for a rating)
    remember, send        the question, in the person's language, with its options to tap (Meta's
                          reply buttons, whasp's numbered lines), stored as the agent's turn with
                          its ledger entry and the state's `csat_day`, `csat_asked_at` (one write),
                          then sent under keys derived from the question's id

The answer is the person's next message: a tap, the option's number or its words within
CSAT_ANSWER_WINDOW (memagent/turn/keywords.py, "csat answer"), recorded with the conversation
(memagent.store.outcomes.record_csat) and thanked, without the model; anything else is an
ordinary message and clears the question.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memagent.lifecycle import csat_event_id, csat_fields, left_by_ttl, left_half_done
from memagent.memory import Choices, Turn
from memagent.observability import count, logger
from memagent.store import iso, ledger
from memagent.turn.delivery import say_unprompted, send_again, sending_number, window_closed
from memagent.turn.identity import reaches
from memagent.turn.keywords import CSAT_OPTIONS
from memagent.turn.replies import language_for

if TYPE_CHECKING:
    from memagent.turn.crew import Crew

# what the sent question takes off the state (its address stays, for a repeat, until answered)
ASKED = ("csat_for",)


@dataclass(frozen=True)
class CsatDue:
    """A hand-back asked the person to rate the conversation of `day`."""

    person: str  # the person's key
    day: str  # the conversation rated (the day they last wrote before the hand-back)
    asked: str  # the handoff's start (ISO): the question's id
    created_at: datetime

    @property
    def event_id(self) -> str:
        return csat_event_id(self.day, self.asked)


def parse(raw: Any) -> CsatDue | None:
    """The CSAT event a queued body holds (signed by the stack), or None for any other."""
    fields = csat_fields(raw)
    if fields is None:
        return None
    person, day, asked = fields
    return CsatDue(person=person, day=day, asked=asked, created_at=datetime.now(UTC))


def ask(crew: Crew, due: CsatDue) -> str:
    """Send the question once, or nothing, by the rules in the module docstring."""
    pk, event_id = due.person, due.event_id
    logger.append_keys(event_id=event_id, person=pk)
    entry = crew.store.ledger(pk, event_id)
    memory = crew.store.load(pk)
    state, now = memory.state, datetime.now(UTC)
    if entry is not None:  # a repeat: the words were stored before
        return _resend(crew, pk, due, entry, memory)
    if state.csat_for != due.asked or not state.csat_address:
        count("CsatGone")
        return "csat_gone"
    address = state.csat_address
    if not state.last_seq or left_by_ttl(memory, now) or left_half_done(memory):
        return _dropped(crew, pk, "expired")
    if not reaches(crew, pk, address):
        return _dropped(crew, pk, "address_moved")
    if state.opted_out:
        return _dropped(crew, pk, "opted_out")
    if state.handed_off(now, crew.handoff_timeout):
        return _dropped(crew, pk, "handed_off")
    if window_closed(crew, state.last_inbound_at, now):
        return _dropped(crew, pk, "window_closed")
    replies = crew.settings.replies
    language = language_for(None, state, replies)
    choices = Choices(options=tuple(replies.text(name, language) for name, _ in CSAT_OPTIONS))
    text = choices.numbered(replies.text("csat_question", language))
    number = sending_number(crew, state.last_number or "")
    turn = Turn(
        seq=memory.next_seq, role="assistant", text=text, at=now, number=number, choices=choices
    )
    decision = say_unprompted(
        crew,
        pk,
        state,
        event_id=event_id,
        to=address,
        turn=turn,
        extra_set={"csat_day": due.day, "csat_asked_at": iso(now)},
        remove=ASKED,
    )
    if decision is None:  # a repeat raced this one: it owns the words
        return _resend(crew, pk, due, crew.store.ledger(pk, event_id) or {}, crew.store.load(pk))
    if decision == "sent":
        count("CsatAsked")
    logger.info("CSAT question done", extra={"decision": decision})
    return f"csat_{decision}"


def _resend(crew: Crew, pk: str, due: CsatDue, entry: dict, memory: Any) -> str:
    """A repeat of a question whose words were stored: send the parts not sent yet, if its
    address still reaches the person (and they have not opted out since)."""
    seq = entry.get("reply_seq")
    turn = next((t for t in memory.turns if seq is not None and t.seq == int(seq)), None)
    address = memory.state.csat_address
    if entry.get("status") != ledger.STORED or turn is None or not isinstance(address, str):
        count("CsatRepeated")
        return "csat_repeat"
    if not reaches(crew, pk, address):
        return _dropped(crew, pk, "address_moved")
    if memory.state.opted_out:
        return _dropped(crew, pk, "opted_out")
    decision = send_again(crew, pk, address, due.event_id, turn, entry, number="")
    count("CsatAsked" if decision == "sent" else "CsatRepeated")
    return f"csat_{decision}"


def _dropped(crew: Crew, pk: str, reason: str) -> str:
    count("CsatNotSent")
    logger.info("CSAT question not sent", extra={"reason": reason})
    return f"csat_dropped_{reason}"
