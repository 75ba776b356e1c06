"""A repeat of an event seen before: what its ledger entry's status resumes.

Storing a message reserves the next seq for its reply. Progress is kept in the event's ledger
entry and the reply's slot, so a redelivery resumes where the last attempt stopped:

    no entry  -> the message was never stored: the turn does it all (not a repeat)
    stored    -> no reply in its slot: generate it (one new model call, by the caller);
                 a reply in its slot: send the parts not yet recorded as sent, with the same
                 send keys (whasp turns a repeat into a no-op)
    replied   -> (entries an older version wrote) the same, with the ledger's copy of the text
    answered  -> a burst's reply, stored under the entry `answered_by` names: the same
    opted_out -> a STOP under the erase policy: finish the erasure a crash interrupted
    sent, parked, skipped, anything else -> done: nothing to do

So every inbound message ends with exactly one reply sent, whatever step crashed. Adding a
state is one entry in `RESUMES` (and the write that records it, in memagent/store/turn.py or
memagent/store/ledger.py).

Some events are never handled at all (`skipped`): one written up to the person's erasure mark
(it must not bring them back), and one older than the ledger reaches back (it could not be told
from a repeat). The mark of a "forget me" or an operator's erasure is when it was asked for;
a retention expiry's is the newest thing the expired memory held (memagent.lifecycle.rights.expire),
so a message it never handled, even one queued when the TTL fired, is answered afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.lifecycle import left_half_done
from memagent.observability import count, logger
from memagent.store import ledger
from memagent.turn.delivery import send, send_again

if TYPE_CHECKING:
    from memagent.memory import Memory
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew

Entry = dict[str, Any]


def skipped(crew: Crew, pk: str, memory: Memory, message: InboundMessage) -> str | None:
    """The decision for an event the turn must not handle ("skipped", "too_old"), else None."""
    erased = memory.state.erased_at
    if erased and message.created_at <= erased:
        # sent before the person asked to be forgotten, or handled by a memory that expired
        # (the mark is its newest time): never bring it back. Nothing is
        # written (not even a ledger entry); an erasure a crash left half-done is finished.
        if _predates(memory):
            crew._forget(pk, at=erased)
        if crew.media is not None and message.media is not None:
            crew.media.discard(pk, message.event_id)  # a copy an attempt kept meanwhile
        count("EventsSkippedAfterErasure")
        logger.info("event predates an erasure; skipped")
        return "skipped"
    too_old = datetime.now(UTC) - crew.ledger_ttl + timedelta(days=1)
    if message.created_at < too_old:
        # older than the dedupe ledger reaches back: we could not tell it from a repeat
        count("EventsTooOld")
        logger.warning("event older than the dedupe window; skipped")
        return "too_old"
    return None


def resume(crew: Crew, pk: str, message: InboundMessage, entry: Entry | None) -> str:
    """Finish what a crash left undone; return the decision ("stored": answer it now)."""
    status = (entry or {}).get("status")
    logger.info("event seen before", extra={"status": status})
    if entry is not None and crew.media is not None and message.media is not None:
        # its text was stored with the entry: a copy a crash left kept is of no more use
        crew.media.discard(pk, message.event_id)
    if entry is None or status not in RESUMES:
        return "duplicate"
    return RESUMES[status](crew, pk, message, entry)


def _stored(crew: Crew, pk: str, message: InboundMessage, entry: Entry) -> str:
    reply = crew.store.load(pk).reply_to(int(entry["user_seq"]))
    if reply is None:
        return "stored"  # not answered yet: the caller answers it (with its burst)
    # stored in its slot, maybe not (all) sent: the same words under the same keys
    return send_again(
        crew, pk, message.address, message.event_id, reply, entry, number=message.number
    )


def _replied(crew: Crew, pk: str, message: InboundMessage, entry: Entry) -> str:
    return _send_ledger_copy(crew, pk, message, message.event_id, entry)


def _answered(crew: Crew, pk: str, message: InboundMessage, entry: Entry) -> str:
    # a burst's reply, stored under the event that `answered_by` names: make sure it
    # went out (the same text under the same Idempotency-Key; no new model call)
    by = crew.store.ledger(pk, entry["answered_by"])
    reply_seq = _reply_seq(entry)
    if by is not None and by.get("status") == ledger.STORED and reply_seq is not None:
        reply = next((t for t in crew.store.load(pk).turns if t.seq == reply_seq), None)
        if reply is not None and reply.role == "assistant":
            return send_again(
                crew, pk, message.address, entry["answered_by"], reply, by, number=message.number
            )
    if by is not None and by.get("status") == ledger.REPLIED:
        return _send_ledger_copy(crew, pk, message, entry["answered_by"], by)
    return "duplicate"


def _opted_out(crew: Crew, pk: str, message: InboundMessage, entry: Entry) -> str:
    if not entry.get("stop") or crew.settings.opt_out_policy != "erase":
        return "duplicate"  # a reply refused (409) or dropped by a STOP; or memory is kept
    # a crash stopped it half-way; the mark is the STOP's own time, as the first time
    crew._forget(pk, at=message.created_at)
    return "forgotten"


RESUMES: dict[str, Callable[[Crew, str, InboundMessage, Entry], str]] = {
    ledger.STORED: _stored,
    ledger.REPLIED: _replied,
    ledger.ANSWERED: _answered,
    ledger.OPTED_OUT: _opted_out,
}


def _send_ledger_copy(
    crew: Crew, pk: str, message: InboundMessage, event_id: str, entry: Entry
) -> str:
    """An older version's `replied` entry: its copy of the reply's text, sent under its keys."""
    return send(
        crew,
        pk,
        message.address,
        event_id,
        entry.get("reply_from") or message.number,
        entry["reply"],
        ledger.sent_parts(entry),
        reply_seq=_reply_seq(entry),
    )


def _reply_seq(entry: Entry) -> int | None:
    return int(entry["reply_seq"]) if entry.get("reply_seq") is not None else None


def _predates(memory: Memory) -> bool:
    """Does memory still hold something from before its erasure mark (an erasure a crash left
    half-done: memagent.lifecycle.rights.left_half_done), or a reply whose message is gone (not
    folded, deleted: it was stored as the erasure ran)? What was written after the mark (e.g.
    after an erasing STOP) is the person's."""
    held = {turn.seq for turn in memory.turns}
    return left_half_done(memory) is not None or any(
        turn.role == "assistant" and turn.seq - 1 > memory.state.marker and turn.seq - 1 not in held
        for turn in memory.turns
    )
