"""The agent's turn: one provider event, processed exactly once per person, in order.

One inbound message, after the webhook has answered 2xx and the person's FIFO group let it
through (`Agent.answer`, every step in the module its name says):

    who is it?            memagent/turn/identity.py    the person's key and memory, one Query
    expired?              memagent/lifecycle/rights.py   a memory whose retention ended (deleted by
                                                  the TTL or not yet), or what an erasure that
                                                  stopped half-way left: erased first
    already handled?      memagent/turn/redelivery.py  skipped events; a repeat resumes its ledger
    to text               memagent/turn/remember.py    voice notes transcribed, photos described,
                                                  within the day's budget
                                                  (memagent/memory/budget.py)
    remember              memagent/turn/remember.py    message + ledger entry + state, one write
    a human has it?       memagent/operator/reading.py    stored for them, no model call, no reply
    a keyword?            memagent/turn/keywords.py    STOP, "forget me" and its "yes", "send me my
                                                  data", a request for a human
                                                  (KEYWORDS; the message's Standing: remember)
    wait for the burst?   memagent/turn/bursts.py      a burst's lines get one reply
    answer                memagent/turn/reply.py       a keyword's or the model's (context.py)
    send                  memagent/turn/delivery.py    parts under send keys; un-say if refused

The other events (opt-out, reply status, marketing preference, number replaced) are
memagent/turn/events.py; an identity change is memagent/turn/identity.py; what staff sent from
the phone (Meta's Coexistence) is memagent/turn/echoes.py. Every step is idempotent,
so a redelivery, or a retry after a lost race, resumes where the last attempt stopped: every inbound
message ends with exactly one reply sent, whatever step crashed.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from memagent.aws import HANDOFF_ENDED, HANDOFF_MESSAGE
from memagent.errors import ConcurrentUpdate, MalformedEvent
from memagent.lifecycle import ERASE, audit, expire, left_by_ttl, left_half_done
from memagent.observability import count, logger
from memagent.providers import (
    ChatOptedOut,
    IdentityChanged,
    InboundMessage,
    MarketingPreference,
    NumberReplaced,
    ReplyStatus,
    StaffEcho,
)
from memagent.store import Standing
from memagent.turn import events, identity, keywords
from memagent.turn.bursts import answer_awaiting, end_of_burst
from memagent.turn.crew import Crew
from memagent.turn.csat import CsatDue, ask
from memagent.turn.delivery import show_typing
from memagent.turn.echoes import staff_echo
from memagent.turn.follow_ups import FollowUpDue, cancel_all, fire
from memagent.turn.redelivery import resume, skipped
from memagent.turn.remember import remember, to_text

if TYPE_CHECKING:
    from memagent.memory import Memory, PersonState
    from memagent.providers import Event

RACE_ATTEMPTS = 3


class Agent(Crew):
    """Handles one provider's events for one agent (persona); which provider, it does not know."""

    def handle(self, event: Event | FollowUpDue | CsatDue, *, followed: bool = False) -> str:
        """Process one event; return the decision taken (for logs and tests). `followed`: the
        person's next record in this batch is a message that joins this one's burst, so this
        one is stored and answered with it. A write that lost a race (a compaction committing
        at the same moment) is retried from a fresh read: every step is idempotent, so a retry
        resumes where the last try stopped."""
        for attempt in range(1, RACE_ATTEMPTS + 1):
            try:
                if isinstance(event, InboundMessage):
                    return self.answer(event, followed=followed)
                if isinstance(event, FollowUpDue):
                    return fire(self, event)
                if isinstance(event, CsatDue):
                    return ask(self, event)
                return self._other(event)
            except ConcurrentUpdate:
                if attempt == RACE_ATTEMPTS:
                    raise
                count("RetriedRaces")
                time.sleep(random.uniform(0.05, 0.2) * attempt)  # jitter
        raise AssertionError("unreachable")

    def answer(self, message: InboundMessage, *, followed: bool = False) -> str:
        pk, memory = self._whose(message)
        logger.append_keys(event_id=message.event_id, person=pk)
        state = memory.state
        human = state.handed_off(datetime.now(UTC), self.handoff_timeout)
        timed_out = state.handoff is not None and not human

        def then(decision: str) -> str:
            # a record that stored nothing new may still end a burst (one written after an
            # erasure, or a redelivery split away from the rest): what awaits is answered,
            # unless a human has the chat; then only a repeat stored to be answered is, on its
            # own (a "forget me" or its "yes": they keep their meaning, remember.py)
            if human and decision != "stored":
                return decision
            if human:
                return end_of_burst(self, pk, message, state, decision, followed=False)
            return end_of_burst(self, pk, message, state, decision, followed=followed)

        if (skip := skipped(self, pk, memory, message)) is not None:
            return then(skip)
        if message.kind != "text":
            # media is costly to convert: look the event up before fetching anything
            entry = self.store.ledger(pk, message.event_id)
            if entry is not None:
                return then(resume(self, pk, message, entry))
            show_typing(self, message)  # before the slow part: fetching and transcribing
        # within the day's budget (memagent.memory.budget): past it, media is not converted
        text, spent = to_text(self, pk, message, memory)
        remembered = remember(
            self, pk, memory, message, text, human=human, end_handoff=timed_out, spent=spent
        )
        if remembered is None:  # a repeat: its ledger entry says what is left to do
            return then(resume(self, pk, message, self.store.ledger(pk, message.event_id)))
        if timed_out:
            count("HandoffsTimedOut")
            self.events.emit(HANDOFF_ENDED, pk, reason="timeout")
        if not remembered.standing.awaits_reply:
            return self._unanswered(pk, message, state, remembered.standing, remembered.memory)
        memory = remembered.memory
        if followed and keywords.waits(text, memory.state, self.settings):
            count("MessagesCoalesced")
            logger.info("answer left to the burst's last message")
            return "waiting"
        return answer_awaiting(self, pk, message, memory, stored=True)

    def _whose(self, message: InboundMessage) -> tuple[str, Memory]:
        """The person and their memory, never with what an erasure left: a memory whose
        retention has ended is expired (whether or not DynamoDB's TTL has deleted its state
        yet), an erasure or expiry that stopped half-way is finished, before anything reads it
        (a recycled number's new owner may be writing)."""
        pk, memory = identity.person(self, message.chat, message.aliases, at=message.created_at)
        if (newest := left_by_ttl(memory, datetime.now(UTC))) is not None:
            # retention ended: the TTL deleted their state and its stream record has not erased
            # the rest, or the TTL has not come yet (it deletes within days): the same expiry
            count("ExpiriesRunByTurn")
            logger.info("retention ended; expired first", extra={"person": pk})
            expire(self.store, pk, deleted_at=newest, elsewhere=self.elsewhere)
        elif (mark := left_half_done(memory)) is not None:
            # its mark is written, its deletes are not (it timed out, was throttled, crashed)
            count("ErasuresFinishedByTurn")
            logger.info("erasure left half-done; finished first", extra={"person": pk})
            self._forget(pk, at=mark)
            audit(ERASE, caller="consumer (an erasure left half-done)", person=pk, outcome="done")
        else:
            return pk, memory
        # the erasure may have taken the identifiers' links too: where they belong now
        return identity.person(self, message.chat, message.aliases, at=message.created_at)

    def answered_alone(self, message: InboundMessage) -> bool:
        """A keyword that gets its own answer never joins a burst (the consumer's look ahead)."""
        return keywords.answered_alone(message, self.settings)

    def _unanswered(
        self,
        pk: str,
        message: InboundMessage,
        state: PersonState,
        standing: Standing,
        memory: Memory,
    ) -> str:
        """A message stored that the agent does not answer, by its standing; any other standing
        a message may have (memagent.store.ledger.Standing) is kept and logged."""
        if standing is Standing.FOR_HUMAN:
            return self._for_human(pk, memory)
        if standing is Standing.STOP:
            return self._stopped(pk, message, state)
        if standing is Standing.HELD:
            count("MessagesHeldByOptOut")
            logger.info("message written before the opt-out: kept, not answered")
            return "opted_out"
        logger.info("message kept, not answered", extra={"standing": standing.name})
        return standing.name.lower()

    def _for_human(self, pk: str, memory: Memory) -> str:
        """A human has the chat: the message is stored for them, the model is not called, and
        nothing is sent; operators hear that someone is waiting (counts, never the text)."""
        handoff = memory.state.handoff
        waiting = handoff.waiting if handoff else 0
        count("MessagesForHuman")
        logger.info("a human has the chat: stored, not answered", extra={"waiting": waiting})
        self.events.emit(HANDOFF_MESSAGE, pk, waiting=waiting)
        return "for_human"

    def _stopped(self, pk: str, message: InboundMessage, state: PersonState) -> str:
        """The person wrote STOP: nothing more is sent, and what awaited a reply is dropped."""
        count("OptOuts")
        if state.awaiting:
            count("RepliesDroppedByStop", len(state.awaiting))
        cancel_all(self, pk, "opted_out")  # nothing is sent after STOP, follow-ups included
        logger.info(
            "person opted out by message",
            extra={"policy": self.settings.opt_out_policy, "dropped": len(state.awaiting)},
        )
        if self.settings.opt_out_policy == "erase":
            # the mark is the STOP's own time: what they wrote after it is kept and answered
            self._forget(pk, at=message.created_at)
            return "forgotten"
        return "opted_out"

    def _other(self, event: Event) -> str:
        if isinstance(event, ChatOptedOut):
            return events.opt_out(self, event)
        if isinstance(event, NumberReplaced):
            return events.replace_number(self, event)
        if isinstance(event, IdentityChanged):
            return identity.change_identity(self, event)
        if isinstance(event, ReplyStatus):
            return events.reply_status(self, event)
        if isinstance(event, MarketingPreference):
            return events.marketing_preference(self, event)
        if isinstance(event, StaffEcho):
            return staff_echo(self, event)
        raise MalformedEvent(f"no handler for {type(event).__name__}")
