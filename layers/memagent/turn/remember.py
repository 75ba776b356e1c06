"""The person's message to text, then remembered: stored once, keyed by the provider's event id,
with its ledger entry and the state, in one transaction (memagent/store/turn.py remember_inbound).
Storing it reserves the next seq for its reply; a message that waits for its answer joins the
state's `awaiting` list (memagent/turn/bursts.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from memagent.memory import (
    Memory,
    PersonState,
    Turn,
    converts,
    counted,
    day_of,
    recent_keys,
    stack_budget,
)
from memagent.observability import count, logger
from memagent.store import Standing
from memagent.turn.delivery import show_typing
from memagent.turn.inbound import (
    CONVERTED,
    DocumentCaps,
    MediaCaps,
    message_text,
    over_budget_note,
)
from memagent.turn.keywords import cancels_forget, is_stop, keeps_its_meaning, stopped_at
from memagent.turn.language import language_of

if TYPE_CHECKING:
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew


@dataclass(frozen=True)
class Remembered:
    """A message stored for the first time, and what it is to the agent (`standing`); when
    the agent answers it, `memory` holds it, awaiting."""

    memory: Memory
    standing: Standing


def to_text(crew: Crew, pk: str, message: InboundMessage, memory: Memory) -> tuple[str, int]:
    """The message as text, and the model tokens that cost: voice notes transcribed, photos
    described, documents read (no model call), other media noted. Past the person's or the
    stack's daily budget a voice note or photo is neither fetched nor sent to the model: a note
    says so (memagent.memory.budget)."""
    settings = crew.settings
    if message.kind in CONVERTED and message.media is not None:
        stack = stack_budget(crew.store, settings)
        if not converts(memory.state, memory.turns, day_of(message.sent_at), settings, stack):
            count("MediaOverBudget")
            logger.info("daily budget reached: media not converted", extra={"kind": message.kind})
            return over_budget_note(message), 0
    provider = crew.provider
    if crew.media is not None and message.media is not None:
        # downloaded once, on the first attempt; a retry hours later reads the kept copy
        provider = crew.media.fetching_once(crew.provider, pk, message.event_id)
    used = crew.model.tokens_used
    documents = DocumentCaps(
        settings.document_max_bytes, settings.document_max_pages, settings.document_max_chars
    )
    caps = MediaCaps(settings.media_max_bytes, settings.max_audio_seconds, documents)
    text = message_text(message, provider=provider, model=crew.model, caps=caps)
    spent = crew.model.tokens_used - used
    if spent:
        stack_budget(crew.store, settings).add(spent)
    return text, spent


def remember(
    crew: Crew,
    pk: str,
    memory: Memory,
    message: InboundMessage,
    text: str,
    *,
    human: bool = False,
    end_handoff: bool = False,
    spent: int = 0,
) -> Remembered | None:
    """Store the message; None if it was stored before (a repeat). `human`: a human has the
    chat; `end_handoff`: theirs timed out, and this write ends it; `spent`: the model tokens
    its description or transcription cost, counted in this write."""
    state = memory.state
    standing = standing_of(crew, memory, message, text, human=human)
    for_human = standing is Standing.FOR_HUMAN
    extra = _flags(state, text, for_human=for_human)
    if message.profile_name and message.profile_name != state.profile_name:
        extra["profile_name"] = message.profile_name  # the console's name for them
    # the day's model turns and tokens, in this same state write (memagent/memory/budget.py)
    opted_out = standing in (Standing.STOP, Standing.HELD)
    counters = {} if opted_out else counted(state, memory.turns, day_of(message.sent_at))
    if crew.settings.recent_conversations and standing is not Standing.HELD:
        # the console's recent conversations: the same write, a new index entry once an hour
        extra.update(recent_keys(crew.settings.agent_id, pk, message.sent_at, message.address))
    if counters:
        counters["day_tokens"] += spent
    turn = Turn(
        seq=memory.next_seq,
        role="user",
        text=text,
        at=message.sent_at,
        number=message.number,
        event_id=message.event_id,
    )
    # counted with the reply, whose seq is reserved here: the one state write per turn
    answered = standing.awaits_reply
    last_seq = turn.seq + 1 if answered else turn.seq
    stored = crew.store.remember_inbound(
        pk,
        previous=state,
        turn=turn,
        event_time=message.created_at,
        compact=last_seq - state.marker >= crew.settings.compact_threshold,
        ledger_ttl=crew.ledger_ttl,
        standing=standing,
        end_handoff=end_handoff,
        extra_set={**extra, **counters} or None,
    )
    if crew.media is not None and message.media is not None:
        crew.media.discard(pk, message.event_id)  # its text is stored now
    if not stored:
        count("DuplicateEvents")
        return None
    count("MessagesRemembered")
    logger.info("message remembered", extra={"seq": turn.seq, "kind": message.kind})
    if message.kind == "text" and answered:
        show_typing(crew, message)  # once per turn: a duplicate never gets here
    now_state = _state_after(
        state,
        message,
        last_seq=last_seq,
        answered=answered,
        for_human=for_human,
        end_handoff=end_handoff,
        extra=extra,
        counters=counters,
    )
    memory = dataclasses.replace(memory, state=now_state, turns=(*memory.turns, turn))
    return Remembered(memory, standing)


def standing_of(
    crew: Crew, memory: Memory, message: InboundMessage, text: str, *, human: bool
) -> Standing:
    """What the message is to the agent, decided here alone: a STOP; HELD, written before a
    standing STOP; FOR_HUMAN, a human's to answer; else the agent answers it."""
    if is_stop(message, text, crew.settings):
        return Standing.STOP
    # a STOP's opt-out lifts only with a message written after it (events arrive out of
    # order, and a burst may hold lines from both sides of a STOP)
    stopped = stopped_at(memory, crew.settings)
    if stopped is not None and message.sent_at < stopped:
        return Standing.HELD
    # while a human has the chat the agent answers nothing, but STOP and "forget me" keep
    # their meaning
    if human and not keeps_its_meaning(text, memory.state, crew.settings):
        return Standing.FOR_HUMAN
    return Standing.ANSWER


def _flags(state: PersonState, text: str, *, for_human: bool) -> dict:
    """The state flags a message sets (the budget's counters aside)."""
    extra: dict = {}
    if cancels_forget(text, state):
        extra["forget_pending"] = False  # anything but "yes" keeps the memory
    if (language := language_of(text)) not in (None, state.language_code):
        # the language of the fixed replies for what says none ("ok"): memagent.turn.replies
        extra["language_code"] = language
    if for_human and state.handoff is not None:
        extra["handoff_waiting"] = state.handoff.waiting + 1
    return extra


def _state_after(
    state: PersonState,
    message: InboundMessage,
    *,
    last_seq: int,
    answered: bool,
    for_human: bool,
    end_handoff: bool,
    extra: dict,
    counters: dict,
) -> PersonState:
    """The state as remember_inbound wrote it, without reading it again."""
    return dataclasses.replace(
        state,
        last_seq=last_seq,  # with the reply's slot reserved, if it gets one
        last_number=message.number,
        last_inbound_at=message.sent_at,
        opted_out=False,
        forget_pending=state.forget_pending and "forget_pending" not in extra,
        language_code=extra.get("language_code", state.language_code),
        profile_name=extra.get("profile_name", state.profile_name),
        awaiting=(*state.awaiting, message.event_id) if answered else state.awaiting,
        handoff=(
            None
            if end_handoff
            else dataclasses.replace(state.handoff, waiting=extra["handoff_waiting"])
            if for_human and state.handoff is not None
            else state.handoff
        ),
        **counters,
    )
