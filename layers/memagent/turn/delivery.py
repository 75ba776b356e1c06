"""Sending a stored reply: its parts under send keys derived from the event, each part's
provider id recorded as it goes out, and an undelivered reply taken back out of memory.

Providers without an idempotency key (Meta) leave one window: Meta accepted a part, and we crashed
(or timed out) before recording its message id. We record each part's id the moment the provider
answers (`part_<n>` on the ledger entry), and the provider's `sent` status for the part, which
carries our send key, records it too (`reply_status`); statuses run in a queue group of their
own, so they do not wait behind the redelivery. A part is sent twice only if the crash fell in
that window *and* the status webhook arrived after the redelivery's retry (seconds, usually).

A repeat sends what was stored the way it went first (`send_again`); what the agent writes
unprompted (a follow-up, the CSAT question) is stored and sent in one sequence
(`say_unprompted`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from memagent.errors import AgentError, OptedOut, SendRejected, TransientError
from memagent.memory import agent_key
from memagent.observability import count, logger
from memagent.providers import TemplateMessage, idempotency_key, split_text
from memagent.store import ledger
from memagent.turn.voice import send_voice

if TYPE_CHECKING:
    from memagent.memory import Choices, PersonState, Turn
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew

META_WINDOW = timedelta(hours=24)  # docs/meta.md: free text only within it


def send(
    crew: Crew,
    pk: str,
    to: str,
    event_id: str,
    sender: str,
    text: str,
    sent: dict[int, str] | None = None,
    *,
    reply_seq: int | None = None,
    template: tuple[str, str] | None = None,
    choices: Choices | None = None,
    voice: bool = False,
) -> str:
    """Send the reply stored under `event_id`'s ledger entry (for a burst: its last
    message's) to the address `to`, the parts not yet `sent`, keyed by that event, so a
    repeat after any crash is a no-op at the provider; record each part's id as the
    provider answers (the last one with the end of the event's turn, in one write). A reply
    the provider refused before any part went out is taken back out of memory
    (`reply_seq`): the memory holds what the person saw, not what we meant to say.
    `template` (name, language): the text goes whole as an approved template's one
    parameter (a follow-up outside Meta's window). `choices`: the options the text ends
    with, sent for the person to tap where the provider can (inside the window: never with
    a template, whose text keeps them numbered). `voice`: the reply goes as one voice note
    where it can (memagent.turn.voice), else as text."""
    store = crew.store
    parts = [text] if template else split_text(text)
    tappable = choices if choices is not None and template is None and len(parts) == 1 else None
    sent = dict(sent or {})
    try:
        if voice and template is None and 0 not in sent:
            key = idempotency_key(event_id, 0)
            spoken = send_voice(crew, pk, event_id, sender, to, text, key)
            if spoken is not None:
                sent[0], parts = spoken, [text]
        for part, chunk in enumerate(parts):
            if part in sent:
                continue  # a redelivery: this part went out before
            key = idempotency_key(event_id, part)
            if tappable is not None:
                sent[part] = crew.provider.send_choices(
                    sender=sender, to=to, text=chunk, choices=tappable, key=key
                )
            else:
                sent[part] = _send_part(crew, sender, to, chunk, key, template)
            sent[part] = sent[part] or "sent"
            if part < len(parts) - 1:
                store.record_part(pk, event_id, part, sent[part])
    except OptedOut:
        _unsay(crew, pk, reply_seq, sent)
        store.record_opt_out(pk, datetime.now(UTC))
        store.finish_event(pk, event_id, ledger.OPTED_OUT)
        count("RepliesBlockedByOptOut")
        logger.info("reply not sent: the chat opted out")
        return "opted_out"
    except SendRejected as error:
        details = {"http_status": error.status}
        if error.code is not None:
            details["error_code"] = error.code
        _unsay(crew, pk, reply_seq, sent)
        store.finish_event(pk, event_id, ledger.PARKED, **details)
        count("ReplyParked")
        logger.error("reply parked: the provider refused it", extra=details)
        return "parked"
    finished_with: dict = {f"{ledger.PART}{p}": i for p, i in sent.items()}
    if reply_seq is not None:  # the entry names its reply, as a burst's covered ones do
        finished_with.update(answered_by=event_id, reply_seq=reply_seq)
    if not store.finish_event(pk, event_id, ledger.SENT, **finished_with):
        _erased_meanwhile(crew, pk)
    count("RepliesSent")
    logger.info("reply sent", extra={"parts": len(parts)})
    return "sent"


def send_again(
    crew: Crew, pk: str, to: str, event_id: str, reply: Turn, entry: dict[str, Any], *, number: str
) -> str:
    """A repeat: send the reply stored under `event_id`'s ledger `entry` (its turn, `reply`)
    the way it went first (as an approved template, with its options, as a voice note), the
    parts the entry does not record as sent, under the same keys: a part that went out is a
    no-op at the provider. `number`: ours to send from where the turn records none."""
    template = entry.get("template")
    return send(
        crew,
        pk,
        to,
        event_id,
        reply.number or number,
        reply.text,
        ledger.sent_parts(entry),
        reply_seq=reply.seq,
        template=(template[0], template[1]) if template else None,
        choices=reply.choices,
        voice=reply.voice,
    )


def say_unprompted(
    crew: Crew,
    pk: str,
    previous: PersonState,
    *,
    event_id: str,
    to: str,
    turn: Turn,
    template: tuple[str, str] | None = None,
    extra_set: dict[str, Any] | None = None,
    remove: tuple[str, ...] = (),
) -> str | None:
    """The agent writes first (a follow-up, the CSAT question): `turn` stored as its message
    with `event_id`'s ledger entry (its words: a repeat sends the same) and the state's
    `extra_set`, `remove`, in one write guarded by `previous`, then sent to `to` under keys
    derived from `event_id`. The decision, or None when a repeat raced this one: it owns
    the words, and the caller sends them as a repeat does (`send_again`)."""
    stored = crew.store.remember_follow_up(
        pk,
        previous=previous,
        event_id=event_id,
        turn=turn,
        compact=turn.seq - previous.marker >= crew.settings.compact_threshold,
        ledger_ttl=crew.ledger_ttl,
        template=template,
        extra_set=extra_set,
        remove=remove,
    )
    if not stored:
        return None
    return send(
        crew,
        pk,
        to,
        event_id,
        turn.number or "",
        turn.text,
        reply_seq=turn.seq,
        template=template,
        choices=turn.choices,
    )


def sending_number(crew: Crew, number: str) -> str:
    """Ours to write first from: on whasp the number that replaced the one the person wrote
    to (`number`), if whasp replaced it since (number.replaced), as an operator's reply goes;
    on Meta the number they wrote to."""
    return crew.store.current_number(agent_key(crew.settings.agent_id), number) or number


def window_closed(crew: Crew, last_inbound_at: datetime | None, now: datetime) -> bool:
    """Meta takes free text only within 24 hours of the person's last message (131047);
    outside it only an approved template. whasp has no such window."""
    if crew.settings.provider != "meta":
        return False
    return last_inbound_at is None or now - last_inbound_at >= META_WINDOW


def _send_part(
    crew: Crew, sender: str, to: str, text: str, key: str, template: tuple[str, str] | None
) -> str:
    """One part: as text, or as an approved template's one parameter (name, language)."""
    if template is None:
        return crew.provider.send_text(sender=sender, to=to, text=text, key=key)
    name, language = template
    whole = TemplateMessage(name=name, language=language, parameters=(text,))
    return crew.provider.send_template(sender=sender, to=to, template=whole, key=key)


def say_goodbye_and_forget(
    crew: Crew, pk: str, message: InboundMessage, answering: Turn, goodbye: str
) -> str:
    """The person confirmed "forget me": send one last short reply (`goodbye`), then erase. A
    crash in between is safe: the redelivery finds the event still `stored`, skips the goodbye
    if the ledger records it sent (else sends it again under the same Idempotency-Key, a no-op
    at whasp) and erases. The erasure matters more than the goodbye: if the provider cannot
    take it, we erase all the same."""
    assert answering.event_id is not None
    entry = crew.store.ledger(pk, answering.event_id) or {}
    try:
        # a provider without an idempotency key (Meta) would send it twice: a retry after
        # a crash skips it when the goodbye is recorded (our write, or its `sent` status)
        if 0 not in ledger.sent_parts(entry):
            sent = crew.provider.send_text(
                sender=answering.number or message.number,
                to=message.address,
                text=goodbye,
                key=idempotency_key(answering.event_id, 0),
            )
            crew.store.record_part(pk, answering.event_id, 0, sent or "sent")
    except (OptedOut, SendRejected, TransientError) as error:
        count("GoodbyeNotSent")
        logger.warning("goodbye not sent; erasing anyway", extra={"error": type(error).__name__})
    receipt = crew._forget(pk)
    count("ForgottenOnRequest")
    logger.info("forgotten at the person's request", extra={"removed": receipt.removed})
    return "forgotten"


def show_typing(crew: Crew, message: InboundMessage) -> None:
    """Read receipt and typing indicator. Cosmetic: a failure never fails the turn."""
    try:
        crew.provider.mark_read(message)
    except AgentError as error:
        count("TypingIndicatorFailed")
        logger.warning("typing indicator not shown", extra={"error": type(error).__name__})


def _erased_meanwhile(crew: Crew, pk: str) -> None:
    """The ledger entry is gone: the person was forgotten while we answered. The reply
    (stored without touching the state) may have landed after the erasure's deletes: finish
    the erasure, under the mark in force. A crash before this is finished by the
    redelivery, which finds the message older than the mark."""
    mark = crew.store.erasure_mark(pk)
    if mark is None:
        return  # no erasure mark: nothing to finish (the entry expired, or never was)
    crew._forget(pk, at=mark)
    count("ErasuresFinishedAfterTurn")
    logger.info("the person was forgotten during the turn; erasure finished")


def _unsay(crew: Crew, pk: str, reply_seq: int | None, sent: dict[int, str]) -> None:
    """Delete an undelivered reply's turn, before the event is finished: a crash in between
    is redelivered, refused again and ends here again (deleting twice is a no-op). What it
    answered no longer awaits a reply (a reply stored alone left the list as it was)."""
    if reply_seq is None or sent:
        return  # unknown, or the person saw part of it: it stays
    crew.store.clear_awaiting(pk)
    crew.store.delete_turns(pk, [reply_seq])
    count("RepliesUnsaid")
    logger.info("undelivered reply removed from memory", extra={"seq": reply_seq})
