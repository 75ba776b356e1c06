"""The agent's turn: one provider event, processed exactly once per person, in order.

The order of one inbound message: message to text, remember (stop if duplicate), build the
context, call the model (store=false), remember the reply, send it. Storing a message reserves
the next seq for its reply. Progress is kept in the event's ledger entry and the reply's slot,
so a redelivery resumes where the last attempt stopped:

    no entry  -> the message was never stored: do the whole turn
    stored    -> no reply in its slot: generate it (one new model call);
                 a reply in its slot: send the parts not yet recorded as sent, with the same
                 send keys (whasp turns a repeat into a no-op)
    replied   -> (entries an older version wrote) the same, with the ledger's copy of the text
    sent, opted_out, parked, skipped -> done: nothing to do

So every inbound message ends with exactly one reply sent, whatever step crashed.

Bursts: people write in bursts ("hey" / "so about tomorrow" / "can we do 10?"), and while one
turn is answered their next messages wait in their FIFO group, then arrive together. A message
that the person's next record in the same batch follows (`followed`, from the consumer's look
ahead) is stored and joins the state's `awaiting` list, with no model call; the burst's last
message answers everything awaiting in one context (one model call, one reply), stored under
its own ledger entry and send key, and every covered entry moves to `answered`, naming that
reply (`answered_by`, `reply_seq`), in the reply's transaction. Any record that ends the
person's run in a batch answers what awaits, so a redelivered burst split across batches, or
a repeat at its end, still ends with each message covered by exactly one sent reply. A
repeated `answered` record re-sends its burst's stored reply under the same key. Keywords keep
their meaning: STOP drops what awaits (nothing is sent after it) and an opt-out lifts only with
a message written after it; "forget me", "yes" and "what do you remember about me" are
answered as when sent alone. COALESCE_BURSTS=false answers every message on its own.

Providers without an idempotency key (Meta) leave one window: Meta accepted a part, and we crashed
(or timed out) before recording its message id. We record each part's id the moment the provider
answers (`part_<n>` on the ledger entry), and the provider's `sent` status for the part, which
carries our send key, records it too (`reply_status`); statuses run in a queue group of their
own, so they do not wait behind the redelivery. A part is sent twice only if the crash fell in
that window *and* the status webhook arrived after the redelivery's retry (seconds, usually).

Identity: a person is keyed by their primary identifier (`person_key`). When a message brings a
new identifier beside a known one (Meta: a BSUID beside the phone), or the provider reports a
change, the new identifier's key is linked to the person's (`alias_of` on its STATE item), so
the person keeps one memory; the memory itself is still read with one Query (a linked
identifier costs one more, small Query to follow the link).
"""

from __future__ import annotations

import dataclasses
import random
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from memagent import store as ledger
from memagent.context import build_context
from memagent.errors import (
    AgentError,
    ConcurrentUpdate,
    MalformedEvent,
    ModelRejected,
    OptedOut,
    SendRejected,
    TransientError,
)
from memagent.inbound import message_text
from memagent.lifecycle import forget_key
from memagent.memory import Memory, PersonState, Turn
from memagent.observability import logger, metrics
from memagent.person import agent_key, person_key
from memagent.provider import (
    ChatOptedOut,
    Event,
    IdentityChanged,
    InboundMessage,
    MarketingPreference,
    NumberReplaced,
    ReplyStatus,
    idempotency_key,
    parse_send_key,
    split_text,
)

if TYPE_CHECKING:
    from memagent.archive import KeptMedia, TranscriptArchive
    from memagent.lifecycle import Receipt
    from memagent.model import ModelClient
    from memagent.provider import Provider
    from memagent.settings import ConsumerSettings
    from memagent.store import MemoryStore

STOP_WORDS = frozenset({"stop", "unsubscribe"})
RACE_ATTEMPTS = 3
FALLBACK_REPLY = "Sorry, I couldn't take that in. Could you say it another way?"
CONFIRM_WORDS = frozenset({"yes", "y", "confirm", "yes forget me", "yes, forget me"})
RECALL_QUESTIONS = frozenset(
    {
        "what do you remember about me",
        "what do you know about me",
        "what do you remember",
    }
)
FORGET_QUESTION = (
    "Do you want me to forget everything about you: our messages, the summary and the notes "
    "I keep? Reply YES to confirm. Anything else keeps your memory as it is."
)
FORGOTTEN_REPLY = "Done. I have forgotten everything about you. If you write again, we start fresh."


def _normalised(text: str) -> str:
    return " ".join(text.casefold().split()).strip("!.?¿¡ ")


def recall(memory: Memory, forget_keyword: str) -> str:
    """Answer "what do you remember about me?" from the facts and summary, word for word."""
    if not memory.facts and not memory.summary:
        return "I don't keep any notes about you yet, only our recent messages."
    lines = ["Here is what I remember about you:"]
    if memory.summary:
        lines.append(memory.summary.text)
    lines.extend(f"- {fact.text}" for fact in memory.facts)
    lines.append(f'To erase all of it, write "{forget_keyword}".')
    return "\n".join(lines)


def _predates(memory: Memory, mark: datetime) -> bool:
    """Does memory still hold something from before an erasure mark (an erasure a crash left
    half-done)? What was written after the mark (e.g. after an erasing STOP) is the person's."""
    held = {turn.seq for turn in memory.turns}
    return (
        any(turn.at <= mark for turn in memory.turns)
        # a reply whose message is gone (not folded, deleted): it was stored as the erasure ran
        or any(
            turn.role == "assistant"
            and turn.seq - 1 > memory.state.marker
            and turn.seq - 1 not in held
            for turn in memory.turns
        )
        or any(fact.at <= mark for fact in memory.facts)
        or (memory.summary is not None and (memory.summary.at is None or memory.summary.at <= mark))
    )


def _stopped_at(memory: Memory) -> datetime | None:
    """The time of the person's STOP message behind the opt-out in force, if we hold it. An
    opt-out learnt otherwise (whasp's 409) has no STOP time we trust: the next message lifts
    it, as before, and whasp refuses the reply if the block still holds."""
    state = memory.state
    if not state.opted_out or state.opted_out_at is None:
        return None
    stops = [
        t for t in memory.turns if t.role == "user" and t.text.strip().casefold() in STOP_WORDS
    ]
    if stops and stops[-1].at <= state.opted_out_at:
        return stops[-1].at
    return None


def _reply_seq(entry: dict) -> int | None:
    return int(entry["reply_seq"]) if entry.get("reply_seq") is not None else None


def _count(name: str, value: float = 1) -> None:
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


class Agent:
    """Handles one provider's events for one agent (persona); which provider, it does not know."""

    def __init__(
        self,
        settings: ConsumerSettings,
        store: MemoryStore,
        model: ModelClient,
        provider: Provider,
        archive: TranscriptArchive | None = None,
        media: KeptMedia | None = None,
    ):
        self.settings = settings
        self.archive = archive
        self.media = media  # voice notes and photos kept between attempts
        self.store = store
        self.model = model
        self.provider = provider
        self.ledger_ttl = timedelta(days=settings.ledger_ttl_days)

    def _forget(self, pk: str, *, at: datetime | None = None) -> Receipt:
        return forget_key(self.store, pk, archive=self.archive, at=at, media=self.media)

    def handle(self, event: Event, *, followed: bool = False) -> str:
        """Process one event; return the decision taken (for logs and tests). `followed`: the
        person's next record in this batch is a message that joins this one's burst, so this
        one is stored and answered with it. A write that lost a race (a compaction committing
        at the same moment) is retried from a fresh read: every step is idempotent, so a retry
        resumes where the last try stopped."""
        for attempt in range(1, RACE_ATTEMPTS + 1):
            try:
                return self._handle(event, followed)
            except ConcurrentUpdate:
                if attempt == RACE_ATTEMPTS:
                    raise
                _count("RetriedRaces")
                time.sleep(random.uniform(0.05, 0.2) * attempt)  # jitter
        raise AssertionError("unreachable")

    def _handle(self, event: Event, followed: bool) -> str:
        if isinstance(event, InboundMessage):
            return self.answer(event, followed=followed)
        if isinstance(event, ChatOptedOut):
            return self.opt_out(event)
        if isinstance(event, NumberReplaced):
            return self.replace_number(event)
        if isinstance(event, IdentityChanged):
            return self.change_identity(event)
        if isinstance(event, ReplyStatus):
            return self.reply_status(event)
        if isinstance(event, MarketingPreference):
            return self.marketing_preference(event)
        raise MalformedEvent(f"no handler for {type(event).__name__}")

    # ------------------------------------------------------------------ bursts

    def answered_alone(self, message: InboundMessage) -> bool:
        """A keyword that gets its own answer, as when sent alone ("forget me", "what do you
        remember about me"): it never joins a burst, nor lets the message before it wait."""
        if message.kind != "text" or not message.text:
            return False
        said = _normalised(message.text)
        return said == _normalised(self.settings.forget_keyword) or said in RECALL_QUESTIONS

    def _waits(self, text: str, state: PersonState) -> bool:
        """Whether a message just stored can leave its answer to a later one of its burst."""
        said = _normalised(text)
        return not (
            said == _normalised(self.settings.forget_keyword)
            or said in RECALL_QUESTIONS
            or (state.forget_pending and said in CONFIRM_WORDS)
        )

    # ------------------------------------------------------------------ inbound messages

    def _person(
        self,
        chat: str,
        aliases: tuple[str, ...] = (),
        *,
        link: bool = True,
        at: datetime | None = None,
    ) -> tuple[str, Memory]:
        """The person's key and memory, by any of their identifiers. One Query when the
        identifier is the person's own key; one more when it is linked to another. `link`:
        record new identifiers' links (what the person sends); False for what only concerns
        them (a status, a preference), which must not create records. `at`: when the event
        was created; after an erasure, only an event written after it links identifiers
        again (so erasure and export by any of them find the new memory)."""
        pk = person_key(self.settings.agent_id, chat)
        memory = self.store.load(pk)
        if memory.state.alias_of:
            return memory.state.alias_of, self.store.load(memory.state.alias_of)
        erased = memory.state.erased_at
        if memory.state.last_seq or (erased and (at is None or at <= erased)) or not aliases:
            return pk, memory
        # an identifier with no memory yet: is this someone we know by another one?
        others = [person_key(self.settings.agent_id, alias) for alias in aliases]
        for other in others:
            if other == pk:
                continue
            known = self.store.load(other)
            target = known.state.alias_of or (other if known.state.last_seq else None)
            if target and not link:
                return target, known if target == other else self.store.load(target)
            if target and self.store.link(pk, target):
                _count("IdentitiesLinked")
                logger.info("new identifier linked to a known person", extra={"person": target})
                return target, known if target == other else self.store.load(target)
        for other in others:  # someone new: any of their identifiers finds this memory
            if other != pk and link:
                self.store.link(other, pk)
        return pk, memory

    def _show_typing(self, message: InboundMessage) -> None:
        """Read receipt and typing indicator. Cosmetic: a failure never fails the turn."""
        try:
            self.provider.mark_read(message)
        except AgentError as error:
            _count("TypingIndicatorFailed")
            logger.warning("typing indicator not shown", extra={"error": type(error).__name__})

    def answer(self, message: InboundMessage, *, followed: bool = False) -> str:
        pk, memory = self._person(message.chat, message.aliases, at=message.created_at)
        logger.append_keys(event_id=message.event_id, person=pk)
        state = memory.state

        if state.erased_at and message.created_at <= state.erased_at:
            # sent before the person asked to be forgotten: never bring it back. Nothing is
            # written (not even a ledger entry); an erasure a crash left half-done is finished.
            if _predates(memory, state.erased_at):
                self._forget(pk, at=state.erased_at)
            if self.media is not None and message.media is not None:
                self.media.discard(pk, message.event_id)  # a copy an attempt kept meanwhile
            _count("EventsSkippedAfterErasure")
            logger.info("event predates an erasure; skipped")
            # it may end a burst written after the erasure: that burst is still answered
            return self._end_of_burst(pk, message, state, "skipped", followed=followed)

        too_old = datetime.now(UTC) - self.ledger_ttl + timedelta(days=1)
        if message.created_at < too_old:
            # older than the dedupe ledger reaches back: we could not tell it from a repeat
            _count("EventsTooOld")
            logger.warning("event older than the dedupe window; skipped")
            return self._end_of_burst(pk, message, state, "too_old", followed=followed)

        if message.kind != "text":
            # media is costly to convert: look the event up before fetching anything
            entry = self.store.ledger(pk, message.event_id)
            if entry is not None:
                decision = self._resume(pk, message, entry)
                return self._end_of_burst(pk, message, state, decision, followed=followed)
            self._show_typing(message)  # before the slow part: fetching and transcribing

        provider = self.provider
        if self.media is not None and message.media is not None:
            # downloaded once, on the first attempt; a retry hours later reads the kept copy
            provider = self.media.fetching_once(self.provider, pk, message.event_id)
        text = message_text(
            message,
            provider=provider,
            model=self.model,
            max_media_bytes=self.settings.media_max_bytes,
        )
        stop = message.kind == "text" and text.strip().casefold() in STOP_WORDS
        # a STOP's opt-out lifts only with a message written after it (events arrive out of
        # order, and a burst may hold lines from both sides of a STOP)
        stopped_at = _stopped_at(memory)
        held = not stop and stopped_at is not None and message.sent_at < stopped_at
        extra = {}
        if state.forget_pending and _normalised(text) not in CONFIRM_WORDS:
            extra["forget_pending"] = False  # anything but "yes" keeps the memory
        turn = Turn(
            seq=memory.next_seq,
            role="user",
            text=text,
            at=message.sent_at,
            number=message.number,
            event_id=message.event_id,
        )
        stored = self.store.remember_inbound(
            pk,
            previous=state,
            turn=turn,
            event_time=message.created_at,
            # counted with the reply, whose seq is reserved here: the one state write per turn
            compact=self._needs_compaction(state, turn.seq if stop or held else turn.seq + 1),
            ledger_ttl=self.ledger_ttl,
            opted_out=stop,
            held=held,
            extra_set=extra or None,
            reserve_reply=not (stop or held),
        )
        if self.media is not None and message.media is not None:
            self.media.discard(pk, message.event_id)  # its text is stored now
        if not stored:
            _count("DuplicateEvents")
            entry = self.store.ledger(pk, message.event_id)
            decision = self._resume(pk, message, entry)
            return self._end_of_burst(pk, message, state, decision, followed=followed)
        _count("MessagesRemembered")
        logger.info("message remembered", extra={"seq": turn.seq, "kind": message.kind})
        if message.kind == "text" and not stop and not held:
            self._show_typing(message)  # once per turn: a duplicate never gets here

        if stop:
            _count("OptOuts")
            if state.awaiting:
                _count("RepliesDroppedByStop", len(state.awaiting))
            logger.info(
                "person opted out by message",
                extra={"policy": self.settings.opt_out_policy, "dropped": len(state.awaiting)},
            )
            if self.settings.opt_out_policy == "erase":
                # the mark is the STOP's own time: what they wrote after it is kept and answered
                self._forget(pk, at=message.created_at)
                return "forgotten"
            return "opted_out"
        if held:
            _count("MessagesHeldByOptOut")
            logger.info("message written before the opt-out: kept, not answered")
            return "opted_out"

        now_state = dataclasses.replace(
            state,
            last_seq=turn.seq + 1,  # the reply's slot is reserved
            last_number=message.number,
            last_inbound_at=message.sent_at,
            opted_out=False,
            forget_pending=state.forget_pending and not extra,
            awaiting=(*state.awaiting, message.event_id),
        )
        memory = dataclasses.replace(memory, state=now_state, turns=(*memory.turns, turn))
        if followed and self._waits(text, now_state):
            _count("MessagesCoalesced")
            logger.info("answer left to the burst's last message")
            return "waiting"
        return self._answer_awaiting(pk, message, memory)

    def _end_of_burst(
        self,
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
        memory = self.store.load(pk)
        awaiting = memory.state.awaiting
        if decision == "stored" and message.event_id not in awaiting:
            # stored by a version before bursts were answered together: answered on its own
            awaiting, followed = (*awaiting, message.event_id), False
        if followed or not awaiting:
            return "waiting" if decision == "stored" else decision
        memory = dataclasses.replace(
            memory, state=dataclasses.replace(memory.state, awaiting=awaiting)
        )
        return self._answer_awaiting(pk, message, memory)

    def _resume(self, pk: str, message: InboundMessage, entry: dict | None) -> str:
        """A repeat of an event seen before: finish what a crash left undone."""
        status = (entry or {}).get("status")
        logger.info("event seen before", extra={"status": status})
        if status == ledger.STORED:
            reply = self.store.load(pk).reply_to(int(entry["user_seq"]))
            if reply is None:
                return "stored"  # not answered yet: the caller answers it (with its burst)
            # stored in its slot, maybe not (all) sent: the same words under the same keys
            return self._send(
                pk,
                message,
                message.event_id,
                reply.number or message.number,
                reply.text,
                ledger.sent_parts(entry),
                reply_seq=reply.seq,
            )
        if status == ledger.REPLIED:
            sender = entry.get("reply_from") or message.number
            return self._send(
                pk,
                message,
                message.event_id,
                sender,
                entry["reply"],
                ledger.sent_parts(entry),
                reply_seq=_reply_seq(entry),
            )
        if status == ledger.ANSWERED:
            # a burst's reply, stored under the event that `answered_by` names: make sure it
            # went out (the same text under the same Idempotency-Key; no new model call)
            by = self.store.ledger(pk, entry["answered_by"])
            reply_seq = _reply_seq(entry)
            if by is not None and by.get("status") == ledger.STORED and reply_seq is not None:
                reply = next((t for t in self.store.load(pk).turns if t.seq == reply_seq), None)
                if reply is not None and reply.role == "assistant":
                    return self._send(
                        pk,
                        message,
                        entry["answered_by"],
                        reply.number or message.number,
                        reply.text,
                        ledger.sent_parts(by),
                        reply_seq=reply.seq,
                    )
            if by is not None and by.get("status") == ledger.REPLIED:
                sender = by.get("reply_from") or message.number
                return self._send(
                    pk,
                    message,
                    entry["answered_by"],
                    sender,
                    by["reply"],
                    ledger.sent_parts(by),
                    reply_seq=_reply_seq(by),
                )
            return "duplicate"
        if (
            status == ledger.OPTED_OUT
            and entry.get("stop")  # not a reply refused (409) or dropped by a STOP
            and self.settings.opt_out_policy == "erase"
        ):
            # a crash stopped it half-way; the mark is the STOP's own time, as the first time
            self._forget(pk, at=message.created_at)
            return "forgotten"
        return "duplicate"

    def _answer_awaiting(self, pk: str, message: InboundMessage, memory: Memory) -> str:
        """One reply to everything the person said since the last reply: the newest of those
        messages is answered, with all of them (and what came before) in the context."""
        awaiting = memory.state.awaiting
        covered = [t for t in memory.turns if t.role == "user" and t.event_id in awaiting]
        if not covered:  # folded away: cannot happen while the person's queue waits
            for event_id in awaiting:
                self.store.finish_event(pk, event_id, ledger.SKIPPED, reason="folded")
            return "skipped"
        answering = covered[-1]
        before = [t for t in memory.turns if t.role == "user" and t.seq < covered[0].seq]
        previous_number = before[-1].number if before else None
        if len(awaiting) > 1:
            _count("BurstsAnswered")
            logger.info("one reply to a burst", extra={"messages": len(awaiting)})
        return self._reply(
            pk,
            message,
            memory,
            answering,
            previous_inbound_at=max((t.at for t in before), default=None),
            about="\n".join(t.text for t in covered) if len(covered) > 1 else None,
            new_number=(
                answering.number
                if previous_number and answering.number and previous_number != answering.number
                else None
            ),
        )

    def _reply(
        self,
        pk: str,
        message: InboundMessage,
        memory: Memory,
        answering: Turn,
        *,
        previous_inbound_at: datetime | None,
        new_number: str | None,
        about: str | None = None,
    ) -> str:
        said = _normalised(answering.text)
        extra: dict[str, bool] = {}
        if memory.state.forget_pending:
            if said in CONFIRM_WORDS:
                return self._forget_on_request(pk, message, answering)
            extra["forget_pending"] = False  # anything else keeps the memory
        if said == _normalised(self.settings.forget_keyword):
            return self._answer_with(
                pk, message, memory, answering, FORGET_QUESTION, {"forget_pending": True}
            )
        if said in RECALL_QUESTIONS:
            text = recall(memory, self.settings.forget_keyword)
            return self._answer_with(pk, message, memory, answering, text, extra)

        context = build_context(
            memory,
            answering,
            system_prompt=self.settings.system_prompt,
            max_messages=self.settings.context_max_messages,
            max_chars=self.settings.context_max_chars,
            max_facts=self.settings.context_max_facts,
            previous_inbound_at=previous_inbound_at,
            new_number=new_number,
            about=about,
        )
        logger.info(
            "context built",
            extra={
                "turns": context.turns_used,
                "chars": context.chars_used,
                "facts": context.facts_used,
            },
        )
        try:
            text = self.model.reply(context)
        except ModelRejected as error:
            # the model will never accept this request (a refusal, an unsupported input):
            # the person still gets exactly one reply, and the operator a metric
            _count("ModelRejected")
            logger.error("model refused the turn; fallback reply", extra={"error": str(error)})
            text = FALLBACK_REPLY
        return self._answer_with(pk, message, memory, answering, text, extra)

    def _answer_with(
        self,
        pk: str,
        message: InboundMessage,
        memory: Memory,
        answering: Turn,
        text: str,
        extra: dict,
    ) -> str:
        """Store the reply to `answering` (and to every message awaiting with it), then send it."""
        assert answering.event_id is not None
        state = memory.state
        sender = answering.number or message.number
        reply = Turn(
            seq=answering.seq + 1,  # the slot reserved when the message was stored
            role="assistant",
            text=text,
            at=datetime.now(UTC),
            number=sender,
        )
        self.store.remember_reply(
            pk,
            event_id=answering.event_id,
            turn=reply,
            # the answered message's time: the record at hand may be a late event from
            # before an erasure that ends a burst written after it
            event_time=max(message.created_at, answering.at),
            extra_set=extra or None,
            covered=state.awaiting,
            ledger_ttl=self.ledger_ttl,
        )
        return self._send(pk, message, answering.event_id, sender, text, reply_seq=reply.seq)

    def _forget_on_request(self, pk: str, message: InboundMessage, answering: Turn) -> str:
        """The person confirmed: send one last short reply, then erase. A crash in between is
        safe: the redelivery finds the event still `stored`, skips the goodbye if the ledger
        records it sent (else sends it again under the same Idempotency-Key, a no-op at whasp)
        and erases. The erasure matters more than the
        goodbye: if whasp cannot take it, we erase all the same."""
        assert answering.event_id is not None
        entry = self.store.ledger(pk, answering.event_id) or {}
        try:
            # a provider without an idempotency key (Meta) would send it twice: a retry after
            # a crash skips it when the goodbye is recorded (our write, or its `sent` status)
            if 0 not in ledger.sent_parts(entry):
                sent = self.provider.send_text(
                    sender=answering.number or message.number,
                    to=message.address,
                    text=FORGOTTEN_REPLY,
                    key=idempotency_key(answering.event_id, 0),
                )
                self.store.record_part(pk, answering.event_id, 0, sent or "sent")
        except (OptedOut, SendRejected, TransientError) as error:
            _count("GoodbyeNotSent")
            logger.warning(
                "goodbye not sent; erasing anyway", extra={"error": type(error).__name__}
            )
        receipt = self._forget(pk)
        _count("ForgottenOnRequest")
        logger.info("forgotten at the person's request", extra={"removed": receipt.removed})
        return "forgotten"

    def _send(
        self,
        pk: str,
        message: InboundMessage,
        event_id: str,
        sender: str,
        text: str,
        sent: dict[int, str] | None = None,
        *,
        reply_seq: int | None = None,
    ) -> str:
        """Send the reply stored under `event_id`'s ledger entry (for a burst: its last
        message's), the parts not yet `sent`, keyed by that event, so a repeat after any crash
        is a no-op at the provider; record each part's id as the provider answers (the last
        one with the end of the event's turn, in one write). A reply the provider refused
        before any part went out is taken back out of memory (`reply_seq`): the memory holds
        what the person saw, not what we meant to say."""
        parts = split_text(text)
        sent = dict(sent or {})
        try:
            for part, chunk in enumerate(parts):
                if part in sent:
                    continue  # a redelivery: this part went out before
                sent[part] = (
                    self.provider.send_text(
                        sender=sender,
                        to=message.address,
                        text=chunk,
                        key=idempotency_key(event_id, part),
                    )
                    or "sent"
                )
                if part < len(parts) - 1:
                    self.store.record_part(pk, event_id, part, sent[part])
        except OptedOut:
            self._unsay(pk, reply_seq, sent)
            self.store.record_opt_out(pk, datetime.now(UTC))
            self.store.finish_event(pk, event_id, ledger.OPTED_OUT)
            _count("RepliesBlockedByOptOut")
            logger.info("reply not sent: the chat opted out")
            return "opted_out"
        except SendRejected as error:
            details = {"http_status": error.status}
            if error.code is not None:
                details["error_code"] = error.code
            self._unsay(pk, reply_seq, sent)
            self.store.finish_event(pk, event_id, ledger.PARKED, **details)
            _count("ReplyParked")
            logger.error("reply parked: the provider refused it", extra=details)
            return "parked"
        details: dict = {f"{ledger.PART}{p}": i for p, i in sent.items()}
        if reply_seq is not None:  # the entry names its reply, as a burst's covered ones do
            details.update(answered_by=event_id, reply_seq=reply_seq)
        finished = self.store.finish_event(pk, event_id, ledger.SENT, **details)
        if not finished:
            self._erased_meanwhile(pk)
        _count("RepliesSent")
        logger.info("reply sent", extra={"parts": len(parts)})
        return "sent"

    def _erased_meanwhile(self, pk: str) -> None:
        """The ledger entry is gone: the person was forgotten while we answered. The reply
        (stored without touching the state) may have landed after the erasure's deletes: finish
        the erasure, under the mark in force. A crash before this is finished by the
        redelivery, which finds the message older than the mark."""
        mark = self.store.erasure_mark(pk)
        if mark is None:
            return  # no erasure mark: nothing to finish (the entry expired, or never was)
        self._forget(pk, at=mark)
        _count("ErasuresFinishedAfterTurn")
        logger.info("the person was forgotten during the turn; erasure finished")

    def _unsay(self, pk: str, reply_seq: int | None, sent: dict[int, str]) -> None:
        """Delete an undelivered reply's turn, before the event is finished: a crash in between
        is redelivered, refused again and ends here again (deleting twice is a no-op). What it
        answered no longer awaits a reply (a reply stored alone left the list as it was)."""
        if reply_seq is None or sent:
            return  # unknown, or the person saw part of it: it stays
        self.store.clear_awaiting(pk)
        self.store.delete_turns(pk, [reply_seq])
        _count("RepliesUnsaid")
        logger.info("undelivered reply removed from memory", extra={"seq": reply_seq})

    def _needs_compaction(self, state: PersonState, seq: int) -> bool:
        return seq - state.marker >= self.settings.compact_threshold

    # ------------------------------------------------------------------ other events

    def opt_out(self, event: ChatOptedOut) -> str:
        pk = person_key(self.settings.agent_id, event.chat)
        logger.append_keys(event_id=event.event_id, person=pk)
        if self.settings.opt_out_policy == "erase":
            state = self.store.load(pk).state
            if state.last_inbound_at and state.last_inbound_at >= event.created_at:
                _count("StaleOptOuts")  # they wrote again since: the opt-out no longer holds
                logger.info("opt-out event older than the last message; ignored")
                return "stale"
            self._forget(pk, at=event.created_at)
            _count("OptOuts")
            logger.info("opt-out event: person forgotten (policy erase)")
            return "forgotten"
        recorded = self.store.record_opt_out(pk, event.created_at)
        _count("OptOuts" if recorded else "StaleOptOuts")
        logger.info("opt-out event", extra={"recorded": recorded})
        return "opted_out" if recorded else "stale"

    def change_identity(self, event: IdentityChanged) -> str:
        """The person now goes by new identifiers: link each to the key of their memory."""
        logger.append_keys(event_id=event.event_id)
        pk, memory = self._person(event.previous[0], event.previous[1:], at=event.created_at)
        erased = memory.state.erased_at
        if erased and event.created_at <= erased:
            # a late change from before an erasure: linking would recreate the erased person
            _count("EventsSkippedAfterErasure")
            logger.info("identity change predates an erasure; skipped")
            return "skipped"
        for identifier in event.current:
            self.store.link(person_key(self.settings.agent_id, identifier), pk)
        _count("IdentitiesChanged")
        logger.info("identity change recorded", extra={"person": pk, "new": len(event.current)})
        return "identity_changed"

    def reply_status(self, event: ReplyStatus) -> str:
        """A provider status for a reply part: `sent` records the part (so a redelivery of the
        message does not send it again); `failed` is counted and kept on the ledger."""
        logger.append_keys(event_id=event.event_id)
        found = parse_send_key(event.key)
        if found is None:
            _count("StatusesIgnored")
            return "ignored"
        event_id, part = found
        pk, _memory = self._person(event.chat, event.aliases, link=False)
        if event.status == "failed":
            with single_metric(name="RepliesFailed", unit=MetricUnit.Count, value=1) as metric:
                metric.add_dimension(name="code", value=str(event.error_code))
            logger.error("reply failed after sending", extra={"code": event.error_code})
            self.store.record_part(pk, event_id, part, f"failed:{event.error_code}")
            return "reply_failed"
        recorded = self.store.record_part(pk, event_id, part, event.message_id)
        logger.info("reply status recorded", extra={"status": event.status, "known": recorded})
        return "status_recorded" if recorded else "status_unknown"

    def marketing_preference(self, event: MarketingPreference) -> str:
        """Record a marketing stop/resume on a person we know (nobody else gets a record).
        It concerns marketing templates only: replies to what the person writes go on."""
        logger.append_keys(event_id=event.event_id)
        pk, memory = self._person(event.chat, event.aliases, link=False)
        if not memory.state.last_seq:
            return "unknown_person"
        recorded = self.store.record_marketing(pk, event.value, event.created_at)
        _count("MarketingPreferencesRecorded" if recorded else "StaleMarketingPreferences")
        logger.info("marketing preference", extra={"value": event.value, "recorded": recorded})
        return "marketing_recorded" if recorded else "stale"

    def replace_number(self, event: NumberReplaced) -> str:
        logger.append_keys(event_id=event.event_id)
        self.store.record_number(
            agent_key(self.settings.agent_id),
            old=event.old_number,
            new=event.new_number,
            label=event.label,
            at=event.created_at,
        )
        _count("NumbersReplaced")
        logger.info("business number replaced")
        return "number_replaced"
