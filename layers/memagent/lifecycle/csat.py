"""Asking the person to rate a conversation (issue 42, item 4): the one-tap CSAT question.

An operator's hand-back asks for it (CSAT_AFTER_HANDBACK, or `?csat=true` on the hand-back), but
the question is a fixed text in the person's language, which only the turn holds
(memagent/turn/replies.toml): so the admin API puts an internal event into the person's FIFO
group, ordered with what they write, and the consumer asks (memagent/turn/csat.py) through the
same exactly-once, ledgered send as every reply, or says nothing (opted out, erased, expired,
the number now someone else's, Meta's window closed).

The event holds ids only (the person's key, the conversation's day, when it was asked), never
an identifier: where to send is kept on the person's state by the hand-back (`csat_address`).
It is signed with the stack's key, as a follow-up's firing is: an event someone else put on the
queue is parked, never acted on.
"""

from __future__ import annotations

from typing import Any

from memagent.errors import MalformedEvent
from memagent.memory import internal_signature, signed_by_stack

CSAT = "csat"  # the queued body's "memagent" field


def csat_event_id(day: str, asked: str) -> str:
    """The question's event id: its ledger entry's and its send keys' (one per hand-back)."""
    return f"{CSAT}:{day}:{asked}"


def csat_body(person: str, day: str, asked: str) -> dict[str, str]:
    """What the admin API queues: the person's key, the day of the conversation to rate, when
    it was asked (ISO), signed with the stack's key."""
    sig = internal_signature(CSAT, person, day, asked)
    return {"memagent": CSAT, "person": person, "day": day, "asked": asked, "sig": sig}


def csat_fields(raw: Any) -> tuple[str, str, str] | None:
    """(person, day, asked) of a CSAT event signed by the stack; None for any other body.
    MalformedEvent for a CSAT event without its fields or the stack's signature."""
    if not isinstance(raw, dict) or raw.get("memagent") != CSAT:
        return None
    person, day, asked = raw.get("person"), raw.get("day"), raw.get("asked")
    if not (isinstance(person, str) and isinstance(day, str) and isinstance(asked, str)):
        raise MalformedEvent("a CSAT event without its person, day or time")
    if not person.startswith("P#"):
        raise MalformedEvent("a CSAT event without a person key")
    if not signed_by_stack(raw.get("sig"), CSAT, person, day, asked):
        # only the admin API signs (the stack's key): anything else on the queue is parked
        raise MalformedEvent("an internal event without the stack's signature")
    return person, day, asked
