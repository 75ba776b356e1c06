"""Meta's webhook: the signature and subscription check, the notification cut into the units
we queue (parse_notification), and a queued unit read back as a domain event (parse_event).

Webhook verification (GET)
    ``hub.mode=subscribe``, ``hub.verify_token`` (ours) and ``hub.challenge``: answer 200 with the
    raw challenge as plain text when the token matches, a 4xx otherwise.
Webhook signature (POST)
    ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body, keyed with the app secret>``.
    No timestamp and no nonce: dedupe by message id (Meta retries non-200s for up to 7 days).
Notifications
    ``{"object": "whatsapp_business_account", "entry": [{"id", "changes": [{"field", "value"}]}]}``,
    ``value`` holding ``metadata{phone_number_id}``, ``contacts[{wa_id?, user_id?}]``,
    ``messages[]``, ``statuses[]``. One POST may carry many of each: we queue one event per
    message (its own one-message notification, so the queued body keeps Meta's shape), and the
    ``sent``/``failed`` statuses of our replies (matched through ``biz_opaque_callback_data``).
Coexistence (the WhatsApp Business app and the Cloud API on one number)
    ``field: smb_message_echoes``: ``value.message_echoes[{from (our display number), to,
    to_user_id?, id, timestamp, type, <type>{...}}]``, what staff sent from the app: each is
    queued in the person's FIFO group as a staff echo (its edits and revokes are acknowledged,
    not queued). ``field: history`` (the app's past chats) and ``smb_app_state_sync`` (its
    contacts) are acknowledged and counted, never queued: nothing in them is a turn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memagent.errors import BadRequest, InvalidSignature, MalformedEvent
from memagent.providers.meta.identity import (
    IDENTITY_CHANGES,
    _bsuid,
    _contact_for,
    _introduced,
    _object,
    _phone,
    _text,
    changed_identifiers,
    identities,
    preference_id,
)
from memagent.providers.seam import (
    IdentityChanged,
    InboundMessage,
    MarketingPreference,
    Media,
    ReplyStatus,
    StaffEcho,
    header,
    json_body,
)

if TYPE_CHECKING:
    from memagent.providers.seam import Event

HEADER_SIGNATURE = "x-hub-signature-256"
SIGNATURE_PREFIX = "sha256="
OBJECT = "whatsapp_business_account"

MESSAGE = "meta.message"  # one inbound message (or system message), queued
STATUS = "meta.status"  # the status of one of our replies, queued
PREFERENCE = "meta.user_preferences"  # a marketing stop/resume, queued to be recorded
ECHO = "meta.echo"  # what staff sent from the WhatsApp Business app (Coexistence), queued
QUEUED_TYPES = frozenset({MESSAGE, STATUS, PREFERENCE, ECHO})
ECHOES = "message_echoes"  # the list an smb_message_echoes change carries
SYNC_FIELDS = frozenset({"history", "smb_app_state_sync"})  # Coexistence's syncs: acknowledged
ECHOES_NOT_QUEUED = frozenset({"edit", "revoke", "reaction"})  # changes to what was said
QUEUED_STATUSES = frozenset({"sent", "failed"})  # `sent` proves a send; `failed` says why not
IGNORED_TYPES = frozenset({"reaction", "ephemeral"})  # acknowledged, not queued


def check_signature_header(headers: Mapping[str, str] | None) -> None:
    """The cheap check, before the app secret is read: an unsigned request is a 401 at once."""
    given = header(headers, HEADER_SIGNATURE)
    if not given or not given.startswith(SIGNATURE_PREFIX):
        raise InvalidSignature("missing signature header")


def verify_signature(app_secret: str, headers: Mapping[str, str] | None, body: bytes) -> None:
    """Check ``X-Hub-Signature-256`` over the raw bytes; raise InvalidSignature otherwise. The
    bytes are hashed as received: Meta signs its escaped-unicode body, so re-serialised JSON
    does not match."""
    given = header(headers, HEADER_SIGNATURE)
    if not given or not given.startswith(SIGNATURE_PREFIX) or not app_secret:
        raise InvalidSignature("missing signature header")
    expected = SIGNATURE_PREFIX + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(given.encode("ascii", errors="replace"), expected.encode()):
        raise InvalidSignature("no matching signature")


def sign(app_secret: str, body: bytes) -> str:
    """An ``X-Hub-Signature-256`` value, for the local stack, the tests and sample events."""
    return SIGNATURE_PREFIX + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def answer_challenge(verify_token: str, params: Mapping[str, str] | None) -> str:
    """The subscription check: the challenge to echo, or InvalidSignature if it is not ours."""
    params = params or {}
    token = params.get("hub.verify_token") or ""
    challenge = params.get("hub.challenge")
    if params.get("hub.mode") != "subscribe" or not challenge or not verify_token:
        raise InvalidSignature("not a subscription check")
    if not hmac.compare_digest(token.encode(), verify_token.encode()):
        raise InvalidSignature("wrong verify token")
    return challenge


@dataclass(frozen=True)
class Envelope:
    """One queued unit cut out of a notification (the queue needs id, chat, raw)."""

    id: str  # the SQS deduplication source: the wamid (statuses: wamid and status)
    type: str
    chat: str  # the FIFO group's identity
    raw: dict[str, Any]
    sender: frozenset[str] = frozenset()  # a message's BSUID and phone
    introduces: frozenset[str] = frozenset()  # an identity change's new BSUID or phone

    @property
    def queued(self) -> bool:
        return self.type in QUEUED_TYPES


@dataclass(frozen=True)
class Notification:
    """What one POST carried: the units to queue, and what we acknowledged without queueing."""

    envelopes: list[Envelope]
    ignored: int
    failed_codes: list[int]  # error codes of `failed` statuses, counted by the webhook
    preferences: list[str]  # user_preferences values (marketing stop/resume), counted
    groups: int = 0  # group messages: acknowledged and counted, never queued (out of scope)
    synced: int = 0  # Coexistence's history and app-state syncs: acknowledged, never queued


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _one(
    entry: Mapping[str, Any], change: Mapping[str, Any], value: dict[str, Any], **items: Any
) -> dict[str, Any]:
    """A one-item notification in Meta's own shape: what we queue."""
    sliced = {
        k: v for k, v in value.items() if k not in ("messages", "statuses", "contacts", ECHOES)
    }
    sliced.update(items)
    return {
        "object": OBJECT,
        "entry": [
            {"id": entry.get("id"), "changes": [{"field": change.get("field"), "value": sliced}]}
        ],
    }


def _walk(raw: Mapping[str, Any]) -> Iterator[tuple[dict, dict, dict]]:
    for entry in _dicts(raw.get("entry")):
        for change in _dicts(entry.get("changes")):
            value = change.get("value")
            if isinstance(value, dict):
                yield entry, change, value


def _is_turn(message: Mapping[str, Any], system: Mapping[str, Any]) -> bool:
    """Whether a message is queued: what a person said, or a change of their identifiers. A
    reaction is not a turn (answering every emoji would be a nuisance); other system messages
    (e.g. customer_identity_changed, a security-code change) need nothing from us."""
    kind = message.get("type")
    if kind == "system":
        return system.get("type") in IDENTITY_CHANGES
    return kind not in IGNORED_TYPES


def _behind_changes(envelopes: list[Envelope]) -> list[Envelope]:
    """A new identifier's messages in the same POST as the identity change that introduces
    them (Meta may send the new id's first text before the change) go to the person's group,
    behind the change: they are answered from the person's memory, not as a stranger's."""
    joined = {i: e.chat for e in envelopes for i in e.introduces}
    moved = [
        dataclasses.replace(e, chat=next((joined[i] for i in e.sender if i in joined), e.chat))
        if e.type == MESSAGE and not e.introduces
        else e
        for e in envelopes
    ]
    for change in [e for e in moved if e.introduces]:
        at = moved.index(change)
        first = next(
            (
                i
                for i, e in enumerate(moved[:at])
                if e.chat == change.chat and e.sender & change.introduces
            ),
            None,
        )
        if first is not None:
            moved.insert(first, moved.pop(at))
    return moved


def parse_notification(body: bytes, *, max_bytes: int) -> Notification:
    """Cut a verified POST into queued units: one per message, one per status that matters."""
    raw = json_body(body, max_bytes=max_bytes)
    if not isinstance(raw, dict) or raw.get("object") != OBJECT:
        raise BadRequest("not a WhatsApp Business Account notification")
    envelopes: list[Envelope] = []
    failed_codes: list[int] = []
    ignored, groups, synced, preferences = 0, 0, 0, []
    for entry, change, value in _walk(raw):
        where = (entry, change, value)
        contacts = _dicts(value.get("contacts"))
        if change.get("field") in SYNC_FIELDS:
            synced += 1  # the app's past chats and contacts: no turn of anyone's (docs/meta.md)
            continue
        for echo in _dicts(value.get(ECHOES)):
            if echo.get("group_id"):
                groups += 1
            elif envelope := _echo_envelope(where, echo):
                envelopes.append(envelope)
            else:
                ignored += 1
        for message in _dicts(value.get("messages")):
            if message.get("group_id"):
                # said in a group, not to us in private: never answered 1:1 nor stored in the
                # sender's private memory (groups are out of scope: docs/meta.md)
                groups += 1
            elif envelope := _message_envelope(where, message, contacts):
                envelopes.append(envelope)
            else:
                ignored += 1
        for status in _dicts(value.get("statuses")):
            if status.get("status") == "failed":
                failed_codes.extend(
                    e["code"]
                    for e in _dicts(status.get("errors"))
                    if isinstance(e.get("code"), int)
                )
            if envelope := _status_envelope(where, status, contacts):
                envelopes.append(envelope)
            else:
                ignored += 1
        for preference in _dicts(value.get("user_preferences")):
            choice = _text(preference.get("value")) or "unknown"
            preferences.append(choice)
            if envelope := _preference_envelope(where, preference, choice, contacts):
                envelopes.append(envelope)
        if not any(value.get(k) for k in ("messages", "statuses", "user_preferences", ECHOES)):
            ignored += 1  # another field (account_update, templates...): acknowledged
    return Notification(
        _behind_changes(envelopes), ignored, failed_codes, preferences, groups, synced
    )


Where = tuple[dict, dict, dict]  # the entry, change and value an item came in


def _message_envelope(
    where: Where, message: dict[str, Any], contacts: list[dict[str, Any]]
) -> Envelope | None:
    """A person's message as its own queued unit; None if it is no turn of theirs."""
    wamid = _text(message.get("id"))
    contact = _contact_for(message, contacts)
    bsuid, phone = identities(message, contact)
    system = _object(message.get("system"))
    if message.get("type") == "system":
        bsuid = bsuid or _bsuid(system.get("previous_user_id"))
    who = bsuid or phone
    if not wamid or not who or not _is_turn(message, system):
        return None
    one = _one(*where, messages=[message], contacts=[contact] if contact else [])
    # the FIFO group: the phone when the payload has one, so a person seen first by
    # phone, then by phone and BSUID, stays one group (one turn at a time, in order)
    sender = frozenset(i for i in (bsuid, phone) if i)
    return Envelope(
        id=wamid,
        type=MESSAGE,
        chat=phone or who,
        raw=one,
        sender=sender,
        introduces=_introduced(message),
    )


def _echo_to(echo: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(BSUID, phone) of the person a staff echo went to."""
    return _bsuid(echo.get("to_user_id")), _phone(echo.get("to"))


def _echo_envelope(where: Where, echo: dict[str, Any]) -> Envelope | None:
    """A staff echo as its own queued unit, in the person's FIFO group (behind and before
    their own messages: the handoff it starts holds for what they write next); None if it is
    no words of staff's to a person (an edit, a revoke, a reaction, no recipient)."""
    wamid = _text(echo.get("id"))
    bsuid, phone = _echo_to(echo)
    who = bsuid or phone
    if not wamid or not who or echo.get("type") in ECHOES_NOT_QUEUED:
        return None
    one = _one(*where, message_echoes=[echo])
    return Envelope(id=wamid, type=ECHO, chat=phone or who, raw=one)


def _status_envelope(
    where: Where, status: dict[str, Any], contacts: list[dict[str, Any]]
) -> Envelope | None:
    """A status of one of our replies that matters, as its own queued unit; None if not."""
    state = status.get("status")
    ours = _text(status.get("biz_opaque_callback_data"))
    who = _bsuid(status.get("recipient_user_id")) or _phone(status.get("recipient_id"))
    wamid = _text(status.get("id"))
    if state not in QUEUED_STATUSES or not ours or not who or not wamid:
        return None
    one = _one(*where, statuses=[status], contacts=contacts[:1])
    # a group apart from the person's messages: a status must not wait behind the
    # redelivery of the very message whose reply it confirms (see delivery.py)
    return Envelope(id=f"{wamid}:{state}", type=STATUS, chat=f"status:{who}", raw=one)


def _preference_envelope(
    where: Where, preference: dict[str, Any], choice: str, contacts: list[dict[str, Any]]
) -> Envelope | None:
    """A marketing preference as its own queued unit; None without a person to set it on."""
    phone = _phone(preference.get("wa_id"))
    contact = next((c for c in contacts if _phone(c.get("wa_id")) == phone), {})
    who = _bsuid(contact.get("user_id")) or phone
    if not who:
        return None
    one = _one(*where, user_preferences=[preference], contacts=[contact])
    stamp = preference.get("timestamp")
    return Envelope(id=preference_id(who, stamp, choice), type=PREFERENCE, chat=who, raw=one)


# --------------------------------------------------------------------------- queued events


def _time(value: Any, field: str) -> datetime:
    try:
        return datetime.fromtimestamp(int(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        raise MalformedEvent(f"{field} is not a Unix time") from None


def _reply_text(message: Mapping[str, Any], kind: str) -> str | None:
    """The words of a tap: a reply button's or a list row's title (interactive button_reply,
    list_reply: the options a reply offered), a template's quick-reply button (`button`), or
    the answers of a WhatsApp Flow (interactive nfm_reply). The person's choice is their
    message, as if they had typed it."""
    body = _object(message.get(kind))
    if kind == "button":
        return _text(body.get("text"))
    reply = body.get(body["type"]) if isinstance(body.get("type"), str) else None
    if body.get("type") == "nfm_reply" and isinstance(reply, dict):
        return _flow_answers(reply)
    if not isinstance(reply, dict):
        return None
    title, description = _text(reply.get("title")), _text(reply.get("description"))
    # a row whose option was longer than its title holds it whole in its description
    # (memagent.providers.meta.graph.interactive): the person chose the whole option
    if title and description and title.endswith("\u2026") and description.startswith(title[:-1]):
        return description
    return title


def _flow_answers(reply: Mapping[str, Any]) -> str:
    """A Flow's answers ({name, body, response_json: a JSON string}) as the person's words."""
    try:
        answers = json.loads(reply.get("response_json") or "{}")
    except (TypeError, ValueError, RecursionError):
        answers = {}
    fields = [
        f"{key}: {value}"
        for key, value in (answers.items() if isinstance(answers, dict) else [])
        if key != "flow_token" and isinstance(value, str | int | float | bool | list)
    ]
    title = _text(reply.get("body")) or _text(reply.get("name")) or "a form"
    return f"[filled in {title}] " + ("; ".join(fields) or "(no answers)")


def _shared(message: Mapping[str, Any], kind: str) -> str | None:
    """What is useful in a location, a contact card or an order (memagent.turn.inbound labels it
    as shared): the place's name and address, the contacts' names, the order's items."""
    body = message.get(kind)
    if kind == "location" and isinstance(body, dict):
        where = [_text(body.get("name")), _text(body.get("address"))]
        named = ", ".join(w for w in where if w)
        lat, lon = body.get("latitude"), body.get("longitude")
        return named or (f"{lat}, {lon}" if lat is not None and lon is not None else None)
    if kind == "contacts":
        names = [_text((c.get("name") or {}).get("formatted_name")) for c in _dicts(body)]
        return ", ".join(n for n in names if n) or None
    if kind == "order" and isinstance(body, dict):
        items = [
            f"{i.get('quantity', 1)} x {i.get('product_retailer_id', 'an item')}"
            + (
                f" ({i['item_price']} {i.get('currency', '')})".replace(" )", ")")
                if "item_price" in i
                else ""
            )
            for i in _dicts(body.get("product_items"))
        ]
        note = _text(body.get("text"))
        return "; ".join(items + ([note] if note else [])) or None
    return None


def _inbound(message: dict, value: dict, contact: dict) -> InboundMessage:
    wamid = _text(message.get("id"))
    number = _text((value.get("metadata") or {}).get("phone_number_id"))
    if not wamid or not number:
        raise MalformedEvent("message id or phone_number_id missing")
    bsuid, phone = identities(message, contact)
    if not bsuid and not phone:
        raise MalformedEvent("message has neither a BSUID nor a phone")
    at = _time(message.get("timestamp"), "timestamp")
    kind = _text(message.get("type")) or "unknown"
    text = caption = media = None
    if kind == "text":
        text = _text((message.get("text") or {}).get("body")) or ""
    elif kind in ("button", "interactive"):
        text, kind = _reply_text(message, kind), "text"
    elif kind in ("audio", "image", "video", "document", "sticker"):
        body = _object(message.get(kind))
        caption = _text(body.get("caption"))
        if _text(body.get("id")):
            media = Media(
                url=body["id"],  # the media id: a fresh download URL is fetched at use
                mime_type=_text(body.get("mime_type")) or "application/octet-stream",
                size=None,
                filename=_text(body.get("filename")) if kind == "document" else None,
            )
    elif kind in ("location", "contacts", "order"):
        text = _shared(message, kind)
        kind = "contact" if kind == "contacts" else kind
    who = bsuid or phone
    assert who is not None
    return InboundMessage(
        event_id=wamid,
        created_at=at,
        number=number,
        chat=who,
        label=None,
        message_id=wamid,
        kind=kind,
        text=text,
        caption=caption,
        media=media,
        sent_at=at,
        aliases=(phone,) if bsuid and phone else (),
        reply_to=phone,  # Meta: a phone in `to` wins over `recipient`; BSUID only without one
        profile_name=_profile_name(contact),
    )


PROFILE_NAME_CHARS = 100  # bounded: what a person types as their profile name is theirs to size


def _profile_name(contact: Mapping[str, Any]) -> str | None:
    """The sender's profile name (`contacts[].profile.name`), from their own contact entry only
    (`_contact_for`): shown to operators in the console, never logged."""
    profile = contact.get("profile")
    name = _text(profile.get("name")) if isinstance(profile, dict) else None
    name = " ".join(name.split()) if name else None
    return name[:PROFILE_NAME_CHARS] if name else None


def _identity_change(message: dict) -> IdentityChanged:
    old, new = changed_identifiers(message)
    wamid = _text(message.get("id"))
    if not wamid or not old or not new:
        raise MalformedEvent("identity change without previous and new identifiers")
    return IdentityChanged(
        event_id=wamid,
        created_at=_time(message.get("timestamp"), "timestamp"),
        previous=old,
        current=new,
    )


def _status(status: dict) -> ReplyStatus:
    bsuid, phone = _bsuid(status.get("recipient_user_id")), _phone(status.get("recipient_id"))
    wamid, key = _text(status.get("id")), _text(status.get("biz_opaque_callback_data"))
    state = _text(status.get("status"))
    if not wamid or not key or not state or not (bsuid or phone):
        raise MalformedEvent("status without id, callback data or recipient")
    codes = [e.get("code") for e in _dicts(status.get("errors")) if isinstance(e.get("code"), int)]
    return ReplyStatus(
        event_id=f"{wamid}:{state}",
        created_at=_time(status.get("timestamp"), "timestamp"),
        chat=bsuid or phone,  # type: ignore[arg-type]
        aliases=(phone,) if bsuid and phone else (),
        key=key,
        message_id=wamid,
        status=state,
        error_code=codes[0] if codes else None,
    )


def _preference(preference: dict, contacts: list[dict]) -> MarketingPreference:
    phone = _phone(preference.get("wa_id"))
    contact = next((c for c in contacts if _phone(c.get("wa_id")) == phone), {})
    bsuid = _bsuid(contact.get("user_id"))
    choice = _text(preference.get("value"))
    if not (bsuid or phone) or not choice:
        raise MalformedEvent("user_preferences without a person or a value")
    at = _time(preference.get("timestamp"), "timestamp")
    return MarketingPreference(
        event_id=preference_id(bsuid or phone, int(at.timestamp()), choice),  # type: ignore[arg-type]
        created_at=at,
        chat=bsuid or phone,  # type: ignore[arg-type]
        aliases=(phone,) if bsuid and phone else (),
        value=choice,
    )


def _echo_text(echo: Mapping[str, Any]) -> str:
    """What staff sent, as the memory keeps the business's words: the text, or what was
    shared (a place, a contact), or a note of the media with its caption."""
    kind = _text(echo.get("type")) or "unknown"
    if kind == "text":
        return _text(_object(echo.get("text")).get("body")) or ""
    if kind in ("location", "contacts"):
        return f"[shared {kind}] " + (_shared(echo, kind) or "")
    caption = _text(_object(echo.get(kind)).get("caption"))
    return f"[sent {kind}]" + (f" {caption}" if caption else "")


def _echo(echo: dict, value: Mapping[str, Any]) -> StaffEcho:
    bsuid, phone = _echo_to(echo)
    wamid = _text(echo.get("id"))
    if not wamid or not (bsuid or phone):
        raise MalformedEvent("echo without id or recipient")
    number = _text(_object(value.get("metadata")).get("phone_number_id")) or ""
    return StaffEcho(
        event_id=wamid,
        created_at=_time(echo.get("timestamp"), "timestamp"),
        number=number,
        chat=bsuid or phone,  # type: ignore[arg-type]
        aliases=(phone,) if bsuid and phone else (),
        message_id=wamid,
        text=_echo_text(echo),
    )


def parse_event(raw: Mapping[str, Any]) -> Event:
    """Turn a queued one-item notification into a domain event; MalformedEvent if we cannot."""
    if not isinstance(raw, Mapping) or raw.get("object") != OBJECT:
        raise MalformedEvent("not a WhatsApp Business Account notification")
    for _entry, _change, value in _walk(raw):
        contacts = _dicts(value.get("contacts"))
        for message in _dicts(value.get("messages")):
            if message.get("type") == "system":
                system = _object(message.get("system"))
                if system.get("type") in IDENTITY_CHANGES:
                    return _identity_change(message)
                raise MalformedEvent("a system message we do not act on")
            return _inbound(message, value, _contact_for(message, contacts))
        for status in _dicts(value.get("statuses")):
            return _status(status)
        for preference in _dicts(value.get("user_preferences")):
            return _preference(preference, contacts)
        for echo in _dicts(value.get(ECHOES)):
            return _echo(echo, value)
    raise MalformedEvent("no message or status in the notification")
