"""The reply to the message being answered: a keyword's (memagent/turn/keywords.py) or the model's,
from the context (memagent/memory/context.py, store=false); remembered in the slot its message
reserved, then sent (memagent/turn/delivery.py). A fixed reply (a keyword's answer, the handoff
and budget notices, the fallback, a document not read) is written in the person's language
(memagent/turn/replies.py), which their state keeps from the message's write on
(memagent/turn/remember.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.aws import HANDOFF_STARTED
from memagent.errors import ModelRejected
from memagent.lifecycle import Target
from memagent.memory import (
    Turn,
    agent_key,
    build_context,
    day_of,
    digest,
    exhausted,
    person_key,
    person_zone,
    stack_budget,
)
from memagent.observability import count, logger
from memagent.providers import shorten
from memagent.store import ledger
from memagent.turn.delivery import say_goodbye_and_forget, send
from memagent.turn.documents import refusal
from memagent.turn.follow_ups import pending_note
from memagent.turn.keywords import keyword
from memagent.turn.replies import language_for
from memagent.turn.tool_loop import Answer, RejectedAfterTools, answer_with_tools
from memagent.turn.voice import speaks

# a conversation opened this soon after the person's previous message is a return: the last one
# left something open (an outcome, memagent.store.outcomes)
RETURN_WITHIN = timedelta(hours=24)

if TYPE_CHECKING:
    from memagent.memory import Choices, Context, Memory
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew
    from memagent.turn.settings import ConsumerSettings


def reply(
    crew: Crew,
    pk: str,
    message: InboundMessage,
    memory: Memory,
    answering: Turn,
    *,
    previous_inbound_at: datetime | None,
    new_number: str | None,
    about: str | None = None,
    first: str | None = None,
    fresh: bool = False,
) -> str:
    """Answer `answering` (with `about`: the burst's lines it answers together; `first`: the
    event id of the burst's first message, which keeps its tool calls on its ledger entry;
    `fresh`: that entry was stored by this very turn, so it holds no tool round yet)."""
    settings = crew.settings
    asked = keyword(answering.text, memory, settings)
    language = language_for(about or answering.text, memory.state, settings.replies)
    flags = asked.flags  # the state flags the message sets, written with whatever answers it

    def fixed(name: str) -> str:
        return settings.replies.text(name, language, forget_keyword=settings.forget_keyword)

    if asked.erase:
        return say_goodbye_and_forget(crew, pk, message, answering, fixed("forgotten"))
    if asked.csat is not None and asked.reply is not None:
        # the rating of the conversation handed back (memagent/turn/csat.py), kept with it: no
        # model, and no conversation of its own (the first answer counts, a repeat nothing)
        day, score = asked.csat
        if _outcome(crew.store.record_csat, pk, agent_key(settings.agent_id), day, score):
            count("CsatAnswers")
        logger.info("CSAT answered", extra={"score": score})
        return remember_and_send(crew, pk, message, memory, answering, fixed(asked.reply), flags)
    _open_conversation(crew, pk, answering, previous_inbound_at)
    if asked.handoff and asked.reply is not None:
        return hand_to_human(crew, pk, message, memory, answering, fixed(asked.reply), flags)
    if asked.reply is not None:
        return remember_and_send(crew, pk, message, memory, answering, fixed(asked.reply), flags)
    if (not_read := refusal(answering.text)) is not None:
        # a document not read (encrypted, too large, unreadable): said so, no model call
        count("DocumentRefusals")
        logger.info("document not read; fixed reply", extra={"reply": not_read})
        return remember_and_send(crew, pk, message, memory, answering, fixed(not_read), flags)
    stack = stack_budget(crew.store, settings)
    if exhausted(memory.state, settings) or stack.reached():
        return over_budget(crew, pk, message, memory, answering, flags, fixed("budget_notice"))

    context = _context(
        settings,
        message,
        memory,
        answering,
        previous_inbound_at=previous_inbound_at,
        new_number=new_number,
        about=about,
    )
    context = _with_follow_ups(crew, pk, message, answering, context)
    used = crew.model.tokens_used
    who = (message.chat, *message.aliases)
    text, done, handoff, choices = _ask_the_model(
        crew, pk, first or answering.event_id, context, who, fallback=fixed("fallback"), fresh=fresh
    )
    if handoff:  # the model handed the chat to a human (the built-in tool)
        notice = fixed("handoff_notice")
        return hand_to_human(crew, pk, message, memory, answering, notice, flags, reason="agent")
    # at least 1: a model reply counts as a turn even where the endpoint reports no usage
    tokens = max(1, crew.model.tokens_used - used)
    stack.add(crew.model.tokens_used - used)
    _outcome(crew.store.add_tokens, agent_key(settings.agent_id), day_of(answering.at), tokens)
    shortened = _shortened(text, settings.max_reply_parts)
    return remember_and_send(
        crew,
        pk,
        message,
        memory,
        answering,
        shortened,
        flags,
        tools=done,
        tokens=tokens,
        choices=choices if shortened == text else None,
    )


def _open_conversation(
    crew: Crew, pk: str, answering: Turn, previous_inbound_at: datetime | None
) -> None:
    """The person's first message of a day opens that day's conversation (memagent.store
    .outcomes), noting whether they came back within 24 hours of their previous message (the
    last conversation left something open)."""
    day = day_of(answering.at)
    if previous_inbound_at is not None and day_of(previous_inbound_at) == day:
        return  # the day's conversation goes on
    returned = previous_inbound_at is not None and (
        answering.at - previous_inbound_at <= RETURN_WITHIN
    )
    agent = agent_key(crew.settings.agent_id)
    if _outcome(crew.store.open_conversation, pk, agent, day, returned=returned, at=answering.at):
        count("ConversationsOpened")
        if returned:
            count("ConversationsReturned")


def _outcome(write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """An outcome's write: counting never costs a reply, so a failure is logged and counted,
    and the turn goes on (docs/operate.md, "Outcomes")."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return write(*args, **kwargs)
    except (BotoCoreError, ClientError) as error:
        count("OutcomesNotRecorded")
        logger.warning("outcome not recorded", extra={"error": type(error).__name__})
        return None


def _shortened(text: str, max_parts: int) -> str:
    """The reply in at most `max_parts` WhatsApp messages ("write me a novel": not 40)."""
    shortened = shorten(text, max_parts)
    if shortened != text:
        count("RepliesShortened")
        logger.info("reply shortened", extra={"chars": len(text), "kept": len(shortened)})
    return shortened


def _with_follow_ups(
    crew: Crew, pk: str, message: InboundMessage, answering: Turn, context: Context
) -> Context:
    """Where the stack has follow-ups: where one this turn asks for goes (the tool's target),
    and the person's pending ones in the model's notes (one Query more)."""
    if crew.follow_ups is None:
        return context
    settings = crew.settings
    crew.follow_up_target = Target(
        address=message.address,
        number=answering.number or message.number,
        zone=person_zone(message.address, settings.time_zone),
        # the FIFO group this message came in (the webhook's: Meta's phone when the message
        # has one, not the BSUID), so the follow-up is ordered with what the person writes
        group=person_key(settings.agent_id, message.address),
    )
    if pending := pending_note(crew, pk):
        context = dataclasses.replace(context, tail=f"{context.tail}\n\n{pending}")
    return context


def _context(
    settings: ConsumerSettings,
    message: InboundMessage,
    memory: Memory,
    answering: Turn,
    *,
    previous_inbound_at: datetime | None,
    new_number: str | None,
    about: str | None,
) -> Context:
    """The model's input for this turn, within the context's budgets
    (memagent/memory/context.py)."""
    context = build_context(
        memory,
        answering,
        system_prompt=settings.system_prompt,
        max_messages=settings.context_max_messages,
        max_chars=settings.context_max_chars,
        max_facts=settings.context_max_facts,
        previous_inbound_at=previous_inbound_at,
        new_number=new_number,
        about=about,
        now=datetime.now(UTC),
        zone=person_zone(message.address, settings.time_zone),
    )
    logger.info(
        "context built",
        extra={
            "turns": context.turns_used,
            "chars": context.chars_used,
            "facts": context.facts_used,
        },
    )
    return context


def _ask_the_model(
    crew: Crew,
    pk: str,
    event_id: str | None,
    context: Context,
    who: tuple[str, ...],
    *,
    fallback: str,
    fresh: bool = False,
) -> Answer:
    """The model's reply (calling the declared tools along the way, if any, as the person
    `who` names: their identifiers), or `fallback` when the model refuses the turn for good.
    The tool calls are recorded under `event_id`, the burst's first message: a burst that
    grows after a crash (the person wrote again meanwhile) replays them instead of calling the
    tools anew."""
    try:
        if crew.tools is None:
            return Answer(crew.model.reply(context, person=pk), ())
        assert event_id is not None
        # only a stack with tools loads them (memagent.model.tools)
        from memagent.model import Caller

        caller = Caller.of(pk, who, keyed=digest)
        return answer_with_tools(crew, pk, event_id, context, caller, fresh=fresh)
    except ModelRejected as error:
        # the model will never accept this request (a refusal, an unsupported input):
        # the person still gets exactly one reply, and the operator a metric
        count("ModelRejected")
        logger.error("model refused the turn; fallback reply", extra={"error": str(error)})
        # what the tools did before a refusal stays remembered (a booking made)
        done = error.done if isinstance(error, RejectedAfterTools) else ()
        return Answer(fallback, done)


def over_budget(
    crew: Crew,
    pk: str,
    message: InboundMessage,
    memory: Memory,
    answering: Turn,
    flags: dict,
    notice: str,
) -> str:
    """The person reached today's limit: no model call. The day's first such message gets the
    `notice`; the rest are kept (already stored, in order) and answered with tomorrow's."""
    count("PersonBudgetReached")
    day = day_of(answering.at)
    if memory.state.notice_day != day:
        logger.info("person's daily budget reached; notice sent")
        flags = {**flags, "notice_day": day}
        return remember_and_send(crew, pk, message, memory, answering, notice, flags)
    for event_id in memory.state.awaiting:
        crew.store.finish_event(pk, event_id, ledger.SKIPPED, reason="over_budget")
    crew.store.clear_awaiting(pk)
    logger.info("person's daily budget reached; kept for tomorrow")
    return "over_budget"


def hand_to_human(
    crew: Crew,
    pk: str,
    message: InboundMessage,
    memory: Memory,
    answering: Turn,
    notice: str,
    flags: dict,
    *,
    reason: str = "person",
) -> str:
    """The person asked for a human (or the model, through the built-in tool: `reason`
    "agent"): the notice is the agent's last word until the chat is handed back (or times
    out); the handoff is recorded with it, in the reply's write, and operators are told
    (memagent.aws.notify)."""
    now = datetime.now(UTC)
    handoff = {
        "handoff_agent": crew.settings.agent_id,
        "handoff_since": now.isoformat(),
        "handoff_reason": reason,
        "handoff_waiting": 0,
        "handoff_address": message.address,  # where the operator's replies go
    }
    decision = remember_and_send(crew, pk, message, memory, answering, notice, {**flags, **handoff})
    agent = agent_key(crew.settings.agent_id)
    if _outcome(crew.store.conversation_handed_off, pk, agent, day_of(answering.at)):
        count("ConversationsHandedOff")
    count("HandoffsRequested")
    logger.info("the person asked for a human: chat handed over")
    crew.events.emit(HANDOFF_STARTED, pk, reason=reason, since=now)
    return decision


def remember_and_send(
    crew: Crew,
    pk: str,
    message: InboundMessage,
    memory: Memory,
    answering: Turn,
    text: str,
    flags: dict,
    *,
    tools: tuple[str, ...] = (),
    tokens: int = 0,
    choices: Choices | None = None,
) -> str:
    """Store the reply to `answering` (and to every message awaiting with it), then send it;
    unless the chat was handed to a human meanwhile (the store refuses the write, and the
    turn's retry leaves the message to the human: memagent.turn.agent)."""
    assert answering.event_id is not None
    sender = answering.number or message.number
    voice = speaks(crew.settings, memory.state, flags, message, text, choices)
    turn = Turn(
        seq=answering.seq + 1,  # the slot reserved when the message was stored
        role="assistant",
        text=text,
        at=datetime.now(UTC),
        number=sender,
        tools=tools,
        tokens=tokens,
        choices=choices,
        voice=voice,
    )
    crew.store.remember_reply(
        pk,
        event_id=answering.event_id,
        turn=turn,
        # the answered message's time: the record at hand may be a late event from
        # before an erasure that ends a burst written after it
        event_time=max(message.created_at, answering.at),
        extra_set=flags or None,
        covered=memory.state.awaiting,
        ledger_ttl=crew.ledger_ttl,
        # a human taking the chat over since this turn read it refuses the write: not sent
        handoff_since=memory.state.handoff.since if memory.state.handoff else None,
    )
    return send(
        crew,
        pk,
        message.address,
        answering.event_id,
        sender,
        text,
        reply_seq=turn.seq,
        choices=choices,
        voice=voice,
    )
