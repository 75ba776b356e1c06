"""The provider seam: what the turn, the memory and compaction know about a messaging provider.

A stack serves one provider (`PROVIDER`: `whasp`, the default, or `meta`). Each provider is one
module (`memagent.providers.whasp`, `memagent.providers.meta`) that turns its webhooks into the
events below and implements `Provider` for the consumer. Nothing outside those modules knows which
is in use.

Identities: `InboundMessage.chat` is the person's primary identifier (a phone number, or Meta's
business-scoped user id when the message has one); `aliases` are the person's other identifiers
carried by the same message, so the turn can keep one memory when a new identifier appears.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from memagent.errors import BadRequest, BodyTooLarge, TransientError

if TYPE_CHECKING:
    from memagent.memory import Choices

MAX_TEXT_CHARS = 4096  # both whasp and Meta cap a text message at 4,096 characters
MAX_SEND_KEY = 255  # whasp's Idempotency-Key limit (Meta's biz_opaque_callback_data takes 512)
SEND_KEY = re.compile(r"reply:(?P<event_id>.+):(?P<part>[0-9]{1,4})\Z")  # \Z, not $ (see PERSON_ID)

# a person's identifier: a phone in E.164 (whasp; Meta's wa_id with a "+"), or a Meta
# business-scoped user id ("US.13491208655302741918")
# ASCII digits and \Z (not $, which also matches before a trailing newline)
PERSON_ID = re.compile(r"(\+[1-9][0-9]{6,14}|[A-Z]{2}\.[A-Za-z0-9.]{1,140})\Z")


@dataclass(frozen=True)
class Media:
    url: str  # where the provider fetches it: a URL (whasp) or a media id (Meta)
    mime_type: str
    size: int | None
    filename: str | None = None  # a document's name, where the provider says it (Meta's)


@dataclass(frozen=True)
class InboundMessage:
    event_id: str
    created_at: datetime
    number: str  # our business number that carried it (whasp number, Meta phone_number_id)
    chat: str  # the person's primary identifier (phone, or BSUID)
    label: str | None
    message_id: str
    kind: str  # text, audio, image, video, document, sticker, location, contact, ...
    text: str | None
    caption: str | None
    media: Media | None
    sent_at: datetime
    aliases: tuple[str, ...] = ()  # the person's other identifiers in this message (a phone)
    reply_to: str | None = None  # where replies go, when not `chat` (Meta: the phone wins)
    # the name the person gave their WhatsApp profile, where the provider says it (Meta's
    # contacts[].profile.name; whasp's `label` is the business number's, not the person's)
    profile_name: str | None = None

    @property
    def address(self) -> str:
        return self.reply_to or self.chat


@dataclass(frozen=True)
class ChatOptedOut:
    event_id: str
    created_at: datetime
    number: str
    chat: str


@dataclass(frozen=True)
class NumberReplaced:
    event_id: str
    created_at: datetime
    old_number: str
    new_number: str
    label: str | None


@dataclass(frozen=True)
class IdentityChanged:
    """The person now goes by other identifiers (a new phone, a regenerated BSUID): their
    memory follows them."""

    event_id: str
    created_at: datetime
    previous: tuple[str, ...]  # at least one
    current: tuple[str, ...]  # at least one


@dataclass(frozen=True)
class ReplyStatus:
    """The provider's word on one reply part we sent (`key` is the send key we gave it)."""

    event_id: str
    created_at: datetime
    chat: str  # the recipient, as an identifier of the person
    aliases: tuple[str, ...]
    key: str
    message_id: str
    status: str  # sent | delivered | read | failed
    error_code: int | None = None


@dataclass(frozen=True)
class MarketingPreference:
    """The person stopped or resumed marketing messages (Meta's user_preferences). Recorded on
    their memory's state; it does not stop replies to what they write."""

    event_id: str
    created_at: datetime
    chat: str
    aliases: tuple[str, ...]
    value: str  # stop | resume | ...


@dataclass(frozen=True)
class StaffEcho:
    """What staff sent the person from the WhatsApp Business app on the stack's own number
    (Meta's Coexistence: an `smb_message_echoes` webhook): a human's reply, the business's
    words. The agent's own sends carry the same message ids it recorded as sent."""

    event_id: str
    created_at: datetime
    number: str  # our business number that carried it (Meta's phone_number_id)
    chat: str  # the person it went to (BSUID or phone)
    aliases: tuple[str, ...]
    message_id: str
    text: str


Event = (
    InboundMessage
    | ChatOptedOut
    | NumberReplaced
    | IdentityChanged
    | ReplyStatus
    | MarketingPreference
    | StaffEcho
)


ParseEvent = Callable[[Any], Event]


@dataclass(frozen=True)
class TemplateMessage:
    """An approved template as one message: its name and language as the provider approved
    them, and its body's parameters, in order (none for a body without placeholders)."""

    name: str
    language: str
    parameters: tuple[str, ...] = ()


class Provider(Protocol):
    """The consumer's side of a provider. Failures are typed (memagent.errors): TransientError
    (retried), SendRejected (parked), OptedOut (recorded)."""

    def send_text(self, *, sender: str, to: str, text: str, key: str) -> str:
        """Send one text part from business number `sender` to the person `to`; `key` is stable
        across redeliveries of one reply part. Returns the provider's message id."""
        ...

    def send_choices(self, *, sender: str, to: str, text: str, choices: Choices, key: str) -> str:
        """Send the reply `text`, which ends with `choices` as numbered lines
        (`Choices.numbered`), with the options to tap where the provider has interactive
        messages (Meta: reply buttons or a list); elsewhere the numbered text as it is. Only
        inside the window: outside it the turn sends a template instead. Returns the
        provider's message id."""
        ...

    def send_template(self, *, sender: str, to: str, template: TemplateMessage, key: str) -> str:
        """Send an approved template with its body's parameters: what may cross a closed
        window (Meta's 24 hours). A provider without templates refuses it for good
        (SendRejected). Returns the provider's message id."""
        ...

    def upload_voice(self, *, sender: str, audio: bytes) -> str | None:
        """Upload a voice note (ogg/opus) for business number `sender`; return the provider's
        media id, or None where the provider sends no audio (whasp's contract: text only), and
        the reply goes as text."""
        ...

    def send_voice(self, *, sender: str, to: str, media_id: str, key: str) -> str:
        """Send the uploaded voice note `media_id` as an audio message. Returns the provider's
        message id."""
        ...

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        """Download a media file (bytes, content type), refusing anything over max_bytes."""
        ...

    def mark_read(self, message: InboundMessage) -> None:
        """Mark the message read and show "typing..." (a no-op where the provider has none)."""
        ...


def header(headers: Mapping[str, str] | None, name: str) -> str | None:
    """A request header by its lower-case name, whatever case it arrived in (API Gateway v2
    lower-cases them, other callers may not); None when absent or not text."""
    for key, value in (headers or {}).items():
        if isinstance(key, str) and key.lower() == name:
            return value if isinstance(value, str) else None
    return None


def json_body(body: bytes, *, max_bytes: int) -> Any:
    """The parsed JSON of a verified webhook body; BadRequest when too large, not JSON, or
    nested deeper than the parser's recursion limit (a RecursionError, which is no ValueError)."""
    check_size(body, max_bytes=max_bytes)
    try:
        return json.loads(body)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadRequest("body is not JSON we accept") from None


def check_size(body: bytes, *, max_bytes: int) -> None:
    """The first check of a webhook body, before any signature is computed: hashing an unsigned
    6 MiB body only to refuse it is what a flood would make us do."""
    if len(body) > max_bytes:
        raise BodyTooLarge("body too large")


def post_with_fresh_key(
    http: Any,
    url: str,
    body: bytes,
    headers: Callable[[bool], dict[str, str]],
    *,
    refused: Callable[[Any], bool],
    name: str,
    dependency: str,
) -> Any:
    """POST `body` to the provider's API (`http`: a urllib3 PoolManager) with the key as cached
    (`headers(False)`). A refused key (`refused(response)`: nothing was sent) is read again past
    the secret cache (`headers(True)`) and tried once more: a renewed key works at once. An
    unreachable API is a TransientError naming `name`. Returns the last answer; refused twice,
    the caller says what that is."""
    import urllib3

    for fresh in (False, True):
        try:
            response = http.request("POST", url, body=body, headers=headers(fresh))
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(
                f"{name} unreachable: {type(error).__name__}",
                dependency=dependency,
                error=type(error).__name__,
            ) from None
        if not refused(response):
            break
    return response


def split_text(text: str, limit: int = MAX_TEXT_CHARS) -> list[str]:
    """Split a reply into message-sized parts: each ends at the last paragraph break in the
    second half of the limit, else the last line break there, else the last space, else is cut
    at the limit (a part shorter than half the limit would spend a message on a fragment)."""
    text = text.strip()
    parts: list[str] = []
    while len(text) > limit:
        window = text[: limit + 1]  # a break just past the limit still ends a full part
        breaks = (window.rfind(separator) for separator in ("\n\n", "\n", " "))
        cut = next((at for at in breaks if at >= limit // 2), limit)
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip()
    if text:
        parts.append(text)
    return parts


def shorten(text: str, max_parts: int, limit: int = MAX_TEXT_CHARS) -> str:
    """The reply cut to what `max_parts` messages hold (at a word, with an ellipsis), so a
    model that writes a novel costs a few messages, not forty."""
    if len(split_text(text, limit)) <= max_parts:
        return text
    room = max_parts * limit - 2
    while True:
        cut = text[:room]
        if " " in cut[room // 2 :]:
            cut = cut[: cut.rfind(" ")]
        shortened = cut.rstrip() + " \u2026"
        if len(split_text(shortened, limit)) <= max_parts:
            return shortened
        room -= limit // 8


def parse_send_key(key: str) -> tuple[str, int] | None:
    """(event id, part) of a key made by idempotency_key, or None (a hashed or foreign key)."""
    found = SEND_KEY.match(key)
    return (found["event_id"], int(found["part"])) if found else None


def idempotency_key(event_id: str, part: int) -> str:
    """The send key for part `part` of the reply to inbound event `event_id`: stable across
    redeliveries, so whasp turns a repeated send into a no-op (Meta echoes it in statuses)."""
    key = f"reply:{event_id}:{part}"
    if len(key) <= MAX_SEND_KEY:
        return key
    return f"reply:{hashlib.sha256(event_id.encode()).hexdigest()}:{part}"
