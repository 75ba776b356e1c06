"""Staff answering from the phone: what staff send from the WhatsApp Business app on the stack's
own number (Meta's Coexistence, `smb_message_echoes`) is a human's reply.

It enters the memory as the business's words (`author: human`, as an operator's reply from the
console) and takes the chat over: the agent stores what the person writes and says nothing until
HandoffTimeoutHours pass after staff's last words, or an operator hands the chat back; the
messages awaiting the agent's reply are the human's, answered. An echo of one of our own sends
(the agent's replies, an operator's, a follow-up: their message ids are on the person's ledger)
is nothing new, and changes nothing. An echo to someone with no memory here starts none: staff
writing first to a stranger is between them (docs/meta.md, "Staff on the phone").
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memagent.aws import HANDOFF_STARTED
from memagent.memory import Turn
from memagent.observability import count, logger
from memagent.store import iso
from memagent.turn.identity import person

if TYPE_CHECKING:
    from memagent.providers import StaffEcho
    from memagent.turn.crew import Crew

STAFF = "staff"  # the handoff's reason, and who took it: staff on the phone
HUMAN = "human"  # a turn's author when a human wrote it (as memagent.operator.handoff)


def staff_echo(crew: Crew, event: StaffEcho) -> str:
    """Store a staff echo and take the chat over, once per echo (its message id)."""
    logger.append_keys(event_id=event.event_id)
    pk, memory = person(crew, event.chat, event.aliases, link=False, at=event.created_at)
    logger.append_keys(person=pk)
    if not memory.state.last_seq:
        count("StaffEchoesToStrangers")
        logger.info("staff echo to no one we remember: not stored")
        return "unknown_person"
    if crew.store.sent_by_us(pk, event.message_id):
        count("OwnSendsEchoed")
        logger.info("echo of our own send: nothing new")
        return "own_send"
    now = datetime.now(UTC)
    taking = not memory.state.handed_off(now, crew.handoff_timeout)
    turn = Turn(
        seq=memory.next_seq,
        role="assistant",
        text=event.text,
        at=event.created_at,
        number=event.number or None,
        author=HUMAN,
    )
    stored = crew.store.remember_staff_echo(
        pk,
        event_id=event.event_id,
        previous=memory.state,
        turn=turn,
        handoff=_handoff(crew, event, taking),
        compact=turn.seq - memory.state.marker >= crew.settings.compact_threshold,
        ledger_ttl=crew.ledger_ttl,
    )
    if not stored:
        logger.info("staff echo seen before, or older than an erasure: nothing stored")
        return "duplicate"
    count("StaffEchoes")
    if taking:
        count("HandoffsByStaffEcho")
        crew.events.emit(HANDOFF_STARTED, pk, reason=STAFF, since=event.created_at)
    logger.info("staff echo stored", extra={"seq": turn.seq, "took_over": taking})
    return "staff_echo"


def _handoff(crew: Crew, event: StaffEcho, taking: bool) -> dict[str, Any]:
    """The state's handoff after the echo: the reply time renewed (the timeout runs from
    staff's last words), and a new handoff, by staff, when none was in force."""
    values: dict[str, Any] = {"handoff_replied_at": iso(event.created_at), "handoff_waiting": 0}
    if not taking:
        return values
    return {
        **values,
        "handoff_agent": crew.settings.agent_id,
        "handoff_since": iso(event.created_at),
        "handoff_reason": STAFF,
        "handoff_address": event.aliases[0] if event.aliases else event.chat,
        "handoff_by": STAFF,
    }
