"""What awaits an answer: people write in bursts, and the burst gets one reply.

People write in bursts ("hey" / "so about tomorrow" / "can we do 10?"), and while one turn is
answered their next messages wait in their FIFO group, then arrive together. A message that the
person's next record in the same batch follows (`followed`, from the consumer's look ahead) is
stored and joins the state's `awaiting` list, with no model call; the burst's last message
answers everything awaiting in one context (one model call, one reply), stored under its own
ledger entry and send key, and every covered entry moves to `answered`, naming that reply
(`answered_by`, `reply_seq`), in the reply's transaction. Any record that ends the person's run
in a batch answers what awaits, so a redelivered burst split across batches, or a repeat at its
end, still ends with each message covered by exactly one sent reply. A repeated `answered`
record re-sends its burst's stored reply under the same key (memagent/turn/redelivery.py). Keywords
keep their meaning (memagent/turn/keywords.py): STOP drops what awaits (nothing is sent after it)
and an opt-out lifts only with a message written after it; "forget me", "yes" and "send me my
data" are answered as when sent alone, a repeat of one too (a crash after storing it makes its
redelivery arrive with what the person wrote next). COALESCE_BURSTS=false answers every message
on its own.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from memagent.observability import count, logger
from memagent.store import ledger
from memagent.turn import keywords
from memagent.turn.reply import reply

if TYPE_CHECKING:
    from memagent.memory import Memory, PersonState
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew


def end_of_burst(
    crew: Crew,
    pk: str,
    message: InboundMessage,
    state: PersonState,
    decision: str,
    *,
    followed: bool,
) -> str:
    """After a record that stored nothing new (a repeat, a skipped event): if it ends the
    person's run in this batch and messages still await their reply, answer them now, so a
    burst whose last record was a repeat (or a redelivery split away from the rest) is
    still answered exactly once."""
    if decision != "stored" and not state.awaiting:
        return decision
    memory = crew.store.load(pk)
    awaiting = memory.state.awaiting
    if decision == "stored" and message.event_id not in awaiting:
        # stored by a version before bursts were answered together: answered on its own
        awaiting, followed = (*awaiting, message.event_id), False
    if followed and decision == "stored" and not _waits(crew, memory, message):
        # a keyword stored before a crash keeps its meaning when redelivered: answered on its
        # own, as the first time ("forget me" is asked, then its "yes" erases)
        followed = False
    if followed or not awaiting:
        return "waiting" if decision == "stored" else decision
    memory = dataclasses.replace(memory, state=dataclasses.replace(memory.state, awaiting=awaiting))
    return answer_awaiting(crew, pk, message, memory)


def _waits(crew: Crew, memory: Memory, message: InboundMessage) -> bool:
    """Whether a stored message (a repeat's, as it was stored: a voice note's transcript) can
    leave its answer to a later one of its burst."""
    text = next(
        (t.text for t in memory.turns if t.role == "user" and t.event_id == message.event_id), None
    )
    return text is None or keywords.waits(text, memory.state, crew.settings)


def answer_awaiting(
    crew: Crew, pk: str, message: InboundMessage, memory: Memory, *, stored: bool = False
) -> str:
    """One reply to everything the person said since the last reply: the newest of those
    messages is answered, with all of them (and what came before) in the context. `stored`:
    `message` was stored by this turn (not a repeat)."""
    awaiting = memory.state.awaiting
    covered = [t for t in memory.turns if t.role == "user" and t.event_id in awaiting]
    if not covered:  # folded away: cannot happen while the person's queue waits
        for event_id in awaiting:
            crew.store.finish_event(pk, event_id, ledger.SKIPPED, reason="folded")
        return "skipped"
    answering = covered[-1]
    before = [t for t in memory.turns if t.role == "user" and t.seq < covered[0].seq]
    previous_number = before[-1].number if before else None
    if len(awaiting) > 1:
        count("BurstsAnswered")
        logger.info("one reply to a burst", extra={"messages": len(awaiting)})
    return reply(
        crew,
        pk,
        message,
        memory,
        answering,
        previous_inbound_at=max((t.at for t in before), default=None),
        about="\n".join(t.text for t in covered) if len(covered) > 1 else None,
        first=covered[0].event_id,
        # alone, and stored just now: its ledger entry holds no tool round to replay
        fresh=stored and [t.event_id for t in covered] == [message.event_id],
        new_number=(
            answering.number
            if previous_number and answering.number and previous_number != answering.number
            else None
        ),
    )
