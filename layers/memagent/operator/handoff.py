"""A human takes the chat: take over, reply, hand back.

`take_over` hands the chat to a human, with the messages still awaiting the agent's reply (the
agent never answers those, even after the hand-back: a reply the model is writing meanwhile is
refused when it is stored, memagent.store.turn.remember_reply); while handed off the agent
stores what the person writes and says nothing (memagent.turn.agent); `reply` sends the operator's
words through the stack's provider, exactly once per person and idempotency key (a ledger entry
keyed by both, send keys derived from it, parts recorded as they go out, like the agent's
replies), split like the agent's, and stores them as the business's side of the conversation,
marked `author: human`; `hand_back` (or HandoffTimeoutHours without an operator reply) gives the
chat back.

A reply needs a take-over first: without a handoff in force, `reply` is refused (409, "take the
chat over first") and nothing is stored or sent.

`send_template` is a reply that may cross Meta's closed 24-hour window: an approved template
(memagent/operator/templates.py), its parameters filled in, sent as one message and stored as
the person reads it; the same take-over first, the same exactly-once, and a refusal of Meta's
(TemplateRefused: a 409 naming its code) takes it back out of memory.

Exactly once, also for two requests at the same time: the request that sends claims the entry
first (`sending`, until its invocation's deadline; memagent.store.handoff.claim_send), so a
concurrent request with the same key sends nothing and is told so (409, "being sent": retried
with the same key, it answers the first one's result). A request that ends with an error gives
its claim back (a retry resumes at once); one that dies after claiming (a timeout, a crash) holds
it until its deadline, after which a retry takes it over and sends the parts not recorded as
sent. On Meta, which has no idempotency key, a part whose send went out in the instant before
such a death and whose status webhook has not recorded it yet is sent again by that retry; on
whasp the send key makes it a no-op."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.aws import HANDOFF_ENDED, HANDOFF_STARTED
from memagent.errors import (
    AgentError,
    ConcurrentUpdate,
    ConfigurationError,
    EditConflict,
    InvalidEdit,
    OptedOut,
    SendRejected,
    TemplateRefused,
    WindowClosed,
)
from memagent.lifecycle import csat_body, csat_event_id
from memagent.memory import Memory, Turn, agent_key, day_of
from memagent.observability import count, logger
from memagent.operator.seat import Seat, identifier, required_text
from memagent.providers import TemplateMessage, idempotency_key, split_text
from memagent.store import PART, SENDING, SENT, STORED, claim_holds, iso, sent_parts

if TYPE_CHECKING:
    from memagent.memory import Handoff

HUMAN = "human"
MAX_REPLY_CHARS = 4 * 4096  # at most four WhatsApp messages
SERVICE_WINDOW = timedelta(hours=24)  # Meta's customer-service window
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9_.:-]{1,128}\Z")
RACE_ATTEMPTS = 3
# how long a reply's claim holds without the invocation's deadline: the admin function's Timeout
# (template.yaml, 29 s; API Gateway's integration limit is 30 s)
CLAIM_SECONDS = 30


def reply_event(pk: str, key: str) -> str:
    """The event id of an operator's reply: its ledger entry's, and its send keys' (so Meta's
    status webhooks find the entry). The person is part of it: one Idempotency-Key used for two
    people's replies is two sends (whasp would answer the second with the first's result)."""
    return f"operator:{pk}:{key}"


@dataclass(frozen=True)
class _Outgoing:
    """An operator's reply on its way out: whose it is (`pk`; `who`, as the provider addresses
    them), its ledger entry (`event_key`), its stored turn, and the approved template it renders
    (None: it goes as text)."""

    pk: str
    who: str
    event_key: str
    turn: Turn
    template: dict[str, Any] | None


class InFlight(EditConflict):
    """Another request with the same idempotency key is sending this reply now."""

    def __init__(self) -> None:
        super().__init__(
            "this reply is being sent by another request with the same Idempotency-Key; "
            "retry with that key in a few seconds for its result"
        )


def handoff_view(handoff: Handoff | None, timeout: timedelta, now: datetime) -> dict[str, Any]:
    if handoff is None or handoff.expired(now, timeout):
        return {"handed_off": False}
    return {
        "handed_off": True,
        "since": iso(handoff.since),
        "reason": handoff.reason,
        "replied_at": iso(handoff.replied_at),
        "waiting": handoff.waiting,
        **({"by": handoff.by} if handoff.by else {}),
        "expires_at": iso(max(handoff.since, handoff.replied_at or handoff.since) + timeout),
    }


class ChatHandoff(Seat):
    def take_over(self, who: str, by: str | None = None) -> dict[str, Any]:
        """Hand the chat to a human, `by` (an operator's name; idempotent: a handoff in force
        stays as it is, with whoever took it). Written
        only if the person stored nothing since it was read (else read again), so it hands
        over every message awaiting a reply, even one stored as the operator clicked."""
        for _attempt in range(RACE_ATTEMPTS):
            pk, memory = self.person(who)
            handoff = memory.state.handoff
            now = datetime.now(UTC)
            if handoff is not None and not handoff.expired(now, self.timeout):
                # someone else took it meanwhile, or it was taken already: theirs stands
                return {"person": pk, "handoff": handoff_view(handoff, self.timeout, now)}
            if self.store.take_over(
                pk,
                agent=self.settings.agent_id,
                reason="operator",
                at=now,
                previous=handoff.since if handoff else None,
                address=identifier(who),
                last_seq=memory.state.last_seq,
                awaiting=memory.state.awaiting,  # the human's to answer now, not the agent's
                ledger_ttl=timedelta(days=self.settings.ledger_ttl_days),
                by=by,
            ):
                self.events.emit(HANDOFF_STARTED, pk, reason="operator", since=now)
                logger.info("chat handed to a human", extra={"reason": "operator"})
                self._count_handoff(pk, memory.state.last_inbound_at)
                _pk, memory = self.person(who)
                return {
                    "person": pk,
                    "handoff": handoff_view(memory.state.handoff, self.timeout, now),
                }
        raise ConcurrentUpdate("the person kept writing while the chat was taken over; retry")

    def _count_handoff(self, pk: str, last_inbound_at: datetime | None) -> None:
        """The outcome: the person's latest conversation (the day they last wrote) was handed
        to a human, counted once (memagent.store.outcomes). A failure costs the count, never
        the take-over."""
        from botocore.exceptions import BotoCoreError, ClientError

        if last_inbound_at is None:
            return
        try:
            agent = agent_key(self.settings.agent_id)
            if self.store.conversation_handed_off(pk, agent, day_of(last_inbound_at)):
                count("ConversationsHandedOff")
        except (BotoCoreError, ClientError) as error:
            count("OutcomesNotRecorded")
            logger.warning("outcome not recorded", extra={"error": type(error).__name__})

    def hand_back(self, who: str, csat: bool | None = None) -> dict[str, Any]:
        """Give the chat back to the agent (idempotent). `csat`: ask the person to rate the
        conversation (None: CSAT_AFTER_HANDBACK decides); the consumer asks, in their language,
        or says nothing (memagent/turn/csat.py). A retry of a hand-back that asked queues the
        same question again while it is unsent: the queue and the ledger keep it one."""
        pk, _memory = self.person(who)
        ask = self.settings.csat_after_handback if csat is None else csat
        ask = ask and self.questions is not None
        ended = self.store.hand_back(pk, csat_to=identifier(who) if ask else None)
        if ended:
            self.events.emit(HANDOFF_ENDED, pk, reason="operator")
            logger.info("chat handed back to the agent", extra={"csat": ask})
        asked = ask and self._ask_for_rating(pk, who)
        return {"person": pk, "handoff": {"handed_off": False}, "ended": ended, "csat": asked}

    def _ask_for_rating(self, pk: str, who: str) -> bool:
        """Queue the CSAT question the hand-back kept on the state, if it is still unsent."""
        _pk, memory = self.person(who)
        state, questions = memory.state, self.questions
        if questions is None or not state.csat_for or state.last_inbound_at is None:
            return False
        day = day_of(state.last_inbound_at)  # the conversation handed back: the day they wrote
        body = csat_body(pk, day, state.csat_for)
        questions.put_internal(body, group=pk, event_id=csat_event_id(day, state.csat_for))
        count("CsatQueued")
        return True

    def reply(
        self, who: str, body: dict[str, Any], key: str | None, *, deadline: datetime | None = None
    ) -> dict[str, Any]:
        """Send the operator's words to the person, exactly once per idempotency key.
        `deadline`: when this request's invocation ends (its claim on the send holds until
        then); by default CLAIM_SECONDS from now."""
        text = required_text(body.get("text"), "text", MAX_REPLY_CHARS)
        return self._say(who, text, body, key, until=deadline, template=None)

    def templates(self) -> dict[str, Any]:
        """The approved templates an operator may send (cached: memagent.operator.templates)."""
        listed = self.catalog.templates() if self.meta and self.catalog else []
        return {"templates": [t.view() for t in listed]}

    def send_template(
        self, who: str, body: dict[str, Any], key: str | None, *, deadline: datetime | None = None
    ) -> dict[str, Any]:
        """Send the person an approved template (`name`, `language`, `parameters`), exactly
        once per idempotency key: what reopens a chat outside Meta's 24-hour window."""
        catalog = self.catalog
        if not self.meta or catalog is None:
            raise EditConflict(
                "no templates here: they are Meta's (PROVIDER=meta, with MetaWabaId set)"
            )
        template, values = catalog.chosen(body)
        chosen = {"name": template.name, "language": template.language, "parameters": values}
        return self._say(who, template.render(values), body, key, until=deadline, template=chosen)

    def _say(
        self,
        who: str,
        text: str,
        body: dict[str, Any],
        key: str | None,
        *,
        until: datetime | None,
        template: dict[str, Any] | None,
    ) -> dict[str, Any]:
        """Store the operator's words (`text`), then send them: as text, or as the approved
        `template` they render."""
        deadline = until
        key = key or body.get("idempotency_key")
        if not isinstance(key, str) or not IDEMPOTENCY_KEY.match(key):
            raise InvalidEdit(
                'an Idempotency-Key header (or "idempotency_key") is required: 1 to 128 '
                "letters, digits, '_', '.', ':' or '-', the same for every retry of this reply"
            )
        until = deadline or datetime.now(UTC) + timedelta(seconds=CLAIM_SECONDS)
        for attempt in range(1, RACE_ATTEMPTS + 1):
            pk, memory = self.person(who)
            event_key = reply_event(pk, key)
            entry = self.store.ledger(pk, event_key)
            if entry is not None:  # a retry of this request: finish it, send nothing new
                return self._resume(pk, memory, who, event_key, entry, until)
            self._may_send(memory, template=template is not None)
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
                    template=template,
                )
            except ConcurrentUpdate:
                if attempt == RACE_ATTEMPTS:
                    raise
                continue  # a message of the person's took the seq: read again
            if not stored:
                continue  # the same request, concurrently: resume it on the next pass
            logger.info(
                "operator reply stored", extra={"seq": turn.seq, "template": bool(template)}
            )
            return self._send(_Outgoing(pk, who, event_key, turn, template), {}, until)
        raise ConcurrentUpdate("memory kept changing while storing the reply")

    def _may_send(self, memory: Memory, *, template: bool = False) -> None:
        if self._provider is None:
            raise ConfigurationError("PROVIDER is not set: this admin API sends nothing")
        state = memory.state
        if not state.handed_off(datetime.now(UTC), self.timeout):
            raise EditConflict("take the chat over first (POST /people/{id}/handoff)")
        if state.opted_out:
            raise EditConflict("the person opted out (STOP): nothing can be sent to them")
        last = state.last_inbound_at
        if (
            self.meta
            and not template
            and (last is None or datetime.now(UTC) - last >= SERVICE_WINDOW)
        ):
            raise WindowClosed()

    def _resume(
        self,
        pk: str,
        memory: Memory,
        who: str,
        event_key: str,
        entry: dict[str, Any],
        until: datetime,
    ) -> dict[str, Any]:
        """A repeat of a reply request, by its entry's status: sent -> the result; sending ->
        409 while its claim holds (taken over after it); stored -> send what is not sent yet;
        refused or opted out -> the same refusal."""
        seq = int(entry.get("reply_seq", 0))
        turn = next((t for t in memory.turns if t.seq == seq), None)
        if turn is None or entry.get("status") not in (STORED, SENDING):
            return _ended(pk, entry)
        if entry["status"] == SENDING and claim_holds(entry, datetime.now(UTC)):
            raise InFlight()
        outgoing = _Outgoing(pk, who, event_key, turn, entry.get("template"))
        return self._send(outgoing, sent_parts(entry), until, repeat=True)

    def _send(
        self, out: _Outgoing, sent: dict[int, str], until: datetime, *, repeat: bool = False
    ) -> dict[str, Any]:
        """Claim the reply's sending, then send its parts not sent yet (`sent`: those sent)."""
        assert self._provider is not None  # checked by _may_send before anything is stored
        pk, event_key = out.pk, out.event_key
        if self._client is None:
            self._client = self._provider()
        if not self.store.claim_send(pk, event_key, until=until, now=datetime.now(UTC)):
            entry = self.store.ledger(pk, event_key) or {}
            if entry.get("status") in (STORED, SENDING):
                raise InFlight()  # another request claimed it just now
            return _ended(pk, entry)  # ... and finished meanwhile
        try:
            return self._send_claimed(out, sent, repeat=repeat)
        except AgentError:
            # this request answers with an error: nothing of it is in flight any more, so a
            # retry may resume at once (a withdrawn reply is no longer `sending`: kept as is)
            self.store.release_send(pk, event_key, until=until)
            raise

    def _send_claimed(
        self, out: _Outgoing, sent: dict[int, str], *, repeat: bool
    ) -> dict[str, Any]:
        assert self._client is not None
        pk, who, event_key, turn, template = out.pk, out.who, out.event_key, out.turn, out.template
        provider = self._client
        parts = [turn.text] if template else split_text(turn.text)
        sent = dict(sent)
        try:
            for part, chunk in enumerate(parts):
                if part in sent:
                    continue  # went out on an earlier try of this request
                sent[part] = (
                    provider.send_template(
                        sender=turn.number or "",
                        to=who,
                        template=TemplateMessage(
                            name=template["name"],
                            language=template["language"],
                            parameters=tuple(template["parameters"]),
                        ),
                        key=idempotency_key(event_key, part),
                    )
                    if template
                    else provider.send_text(
                        sender=turn.number or "",
                        to=who,
                        text=chunk,
                        key=idempotency_key(event_key, part),
                    )
                ) or "sent"
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
            if isinstance(error, TemplateRefused):
                raise _template_refused(error.code) from None
            raise
        self.store.finish_event(pk, event_key, SENT, **{f"{PART}{p}": i for p, i in sent.items()})
        logger.info("operator reply sent", extra={"parts": len(parts), "repeat": repeat})
        return {"person": pk, "seq": turn.seq, "parts": len(parts), "repeat": repeat}


def _ended(pk: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The answer to a repeat of a reply request that ended: sent (its result), or refused
    (the same refusal: Meta's closed window, an opt-out, a reply withdrawn)."""
    status = entry.get("status")
    if status == SENT:
        seq, parts = int(entry.get("reply_seq", 0)), sent_parts(entry)
        return {"person": pk, "seq": seq, "parts": len(parts), "repeat": True}
    code = entry.get("error_code")
    if code is not None and int(code) == WindowClosed().code:
        raise WindowClosed()
    if code is not None and entry.get("template"):
        raise _template_refused(int(code))
    raise EditConflict(f"this reply was not sent ({status}); send it with a new key")


def _template_refused(code: int | None) -> EditConflict:
    """Meta refused the template for good: said to the operator with its code (Meta's error
    codes page: 132000 the parameters do not match, 132001 no such template in that language
    or not approved, 132015 paused, 132016 disabled); nothing was sent or kept."""
    return EditConflict(
        f"Meta refused the template (code {code}): nothing was sent; check it in WhatsApp "
        "Manager (approved, in this language, with these parameters) and send again with a "
        "new key"
    )
