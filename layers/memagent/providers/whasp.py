"""The whasp adapter: everything whasp-specific lives here and nowhere else.

This module is written against our *assumed* whasp contract (docs/whasp.md, "The contract the
code assumes"; summarised here so the module stands on its own):

Inbound webhook (Standard Webhooks signing)
    Headers ``webhook-id`` (the event id), ``webhook-timestamp`` (Unix seconds) and
    ``webhook-signature`` (space-separated ``v1,<base64 HMAC-SHA256>`` entries over
    ``{id}.{timestamp}.{raw body}``, keyed with the base64 key after ``whsec_``). Accept when any
    entry matches any configured secret (two during rotation) and the timestamp is within the
    tolerance either way. Header names may arrive in any case.
Events
    Envelope ``{"id", "type", "created_at", "data"}``. Types we act on: ``message.received``
    (``data.number`` = our whasp number, ``data.chat`` = the person's E.164 phone,
    ``data.message`` = {id, type, text | media{url, mime_type, size} + caption, timestamp}),
    ``number.replaced`` (``data.old_number``, ``data.new_number``, ``data.label``) and
    ``chat.opted_out`` (``data.number``, ``data.chat``). Anything else is acknowledged and ignored.
Outbound
    ``POST {WHASP_API_URL}/v1/messages`` with ``Authorization: Bearer <key>`` and
    ``Idempotency-Key`` (<= 255 chars, 24 h), body ``{"from", "to", "type": "text", "text"}``.
    201 accepted; 400 invalid (no retry); 401/403 bad key: read the key again past its cache
    (it may have been rotated) and try once more, then a transient failure (the queue's backoff,
    the ProviderAuthFailed alarm), never parked; 409 ``opted_out`` (no retry,
    record it); 429 (honour Retry-After) and 5xx retried. Texts hold at most 4,096 characters.
Media
    ``GET {media.url}`` with the bearer key returns the bytes. A signed event names the URL, so
    it is fetched only on an allow-list of origins (by default WHASP_API_URL's scheme, host and
    port), the key goes only to WHASP_API_URL's origin, redirects are checked hop by hop, and
    the download has a total deadline and a size cap enforced while it streams.

The signature check is hand-written rather than taken from the ``standardwebhooks`` package: it
must try several secrets (rotation), map every failure to one error type without leaking which
part failed, and keep the webhook's cold path free of that package's dependencies. The tests sign
with ``standardwebhooks`` as an independent peer.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from memagent.errors import (
    BadRequest,
    InvalidSignature,
    MalformedEvent,
    OptedOut,
    SendRejected,
    TransientError,
)
from memagent.providers import download
from memagent.providers.origins import Origin, url_origin
from memagent.providers.seam import (  # noqa: F401 (split_text, idempotency_key: re-exported)
    MAX_TEXT_CHARS,
    ChatOptedOut,
    InboundMessage,
    Media,
    NumberReplaced,
    header,
    idempotency_key,
    json_body,
    post_with_fresh_key,
    split_text,
)
from memagent.providers.signing import SECRET_PREFIX

if TYPE_CHECKING:
    from memagent.environment import Secret
    from memagent.memory import Choices
    from memagent.providers.seam import TemplateMessage

HEADER_ID = "webhook-id"
HEADER_TIMESTAMP = "webhook-timestamp"
HEADER_SIGNATURE = "webhook-signature"
SIGNATURE_VERSION = "v1"

MESSAGE_RECEIVED = "message.received"
NUMBER_REPLACED = "number.replaced"
CHAT_OPTED_OUT = "chat.opted_out"
QUEUED_TYPES = frozenset({MESSAGE_RECEIVED, NUMBER_REPLACED, CHAT_OPTED_OUT})

MAX_RETRY_AFTER_SECONDS = 5
AUTH_STATUSES = frozenset({401, 403})
MAX_EVENT_ID = 255
# ASCII digits only (\d also matches other scripts' digits) and \Z, not $ (which also matches
# before a trailing newline), so `.match` and `.fullmatch` agree.
E164 = re.compile(r"\+[1-9][0-9]{6,14}\Z")

# --------------------------------------------------------------------------- signature


def _keys(secrets: Iterable[str]) -> list[bytes]:
    keys = []
    for secret in secrets:
        encoded = secret.removeprefix(SECRET_PREFIX)
        try:
            keys.append(base64.b64decode(encoded, validate=True))
        except (binascii.Error, ValueError):
            continue  # a misconfigured secret matches nothing: fail closed
    return keys


@dataclass(frozen=True)
class SignatureHeaders:
    """The three signature headers of a request, checked for shape and freshness only."""

    event_id: str
    timestamp: str
    signatures: str


def check_signature_headers(
    headers: Mapping[str, str] | None, *, tolerance_seconds: int = 300, now: float | None = None
) -> SignatureHeaders:
    """The cheap half of the check, run before any secret is read: the headers are present,
    printable ASCII (a lone surrogate or other undecodable text cannot be signed bytes) and the
    timestamp is within the tolerance. Raises InvalidSignature."""
    event_id = header(headers, HEADER_ID)
    timestamp = header(headers, HEADER_TIMESTAMP)
    signatures = header(headers, HEADER_SIGNATURE)
    if not event_id or not timestamp or not signatures:
        raise InvalidSignature("missing signature headers")
    if not all(value.isascii() and value.isprintable() for value in (event_id, signatures)):
        raise InvalidSignature("undecodable signature headers")
    if len(event_id) > MAX_EVENT_ID:
        raise InvalidSignature("webhook-id too long")
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        raise InvalidSignature("malformed timestamp")  # (int() refuses over 4,300 digits)
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > tolerance_seconds:
        raise InvalidSignature("timestamp outside tolerance")
    return SignatureHeaders(event_id, timestamp, signatures)


def verify_signed(secrets: Iterable[str], signed: SignatureHeaders, body: bytes) -> str:
    """The HMAC half of the check; return the event id, or raise InvalidSignature."""
    message = f"{signed.event_id}.{signed.timestamp}.".encode() + body
    expected = [
        base64.b64encode(hmac.new(key, message, hashlib.sha256).digest()) for key in _keys(secrets)
    ]
    for entry in signed.signatures.split(" "):
        version, _, candidate = entry.partition(",")
        if version != SIGNATURE_VERSION or not candidate:
            continue
        given = candidate.encode("ascii", errors="replace")
        # compare_digest against every key, without stopping early on a match
        if any([hmac.compare_digest(given, digest) for digest in expected]):
            return signed.event_id
    raise InvalidSignature("no matching signature")


def sign(secret: str, event_id: str, timestamp: int, body: bytes) -> str:
    """Produce a ``webhook-signature`` value, for the local stack and sample events."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    digest = hmac.new(key, f"{event_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(digest).decode()}"


# --------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Envelope:
    """A signed webhook body, parsed just enough to route it."""

    id: str
    type: str
    chat: str | None  # the person's E.164 phone, for the per-person queue
    raw: dict[str, Any]

    @property
    def queued(self) -> bool:
        return self.type in QUEUED_TYPES


def parse_envelope(body: bytes, *, max_bytes: int) -> Envelope:
    """Parse a verified webhook body; raise BadRequest if we cannot accept it."""
    raw = json_body(body, max_bytes=max_bytes)
    if not isinstance(raw, dict):
        raise BadRequest("body is not a JSON object")
    event_id, event_type = raw.get("id"), raw.get("type")
    if not isinstance(event_id, str) or not event_id or not isinstance(event_type, str):
        raise BadRequest("envelope needs string id and type")
    chat = None
    if event_type in (MESSAGE_RECEIVED, CHAT_OPTED_OUT):
        data = raw.get("data")
        chat = data.get("chat") if isinstance(data, dict) else None
        if not isinstance(chat, str) or not E164.fullmatch(chat):
            raise BadRequest("event needs data.chat in E.164")
    return Envelope(id=event_id, type=event_type, chat=chat, raw=raw)


WhaspEvent = InboundMessage | ChatOptedOut | NumberReplaced


def _time(value: Any, field: str) -> datetime:
    if not isinstance(value, str):
        raise MalformedEvent(f"{field} missing")
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise MalformedEvent(f"{field} is not an ISO time") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _str(data: Mapping[str, Any], field: str, *, pattern: re.Pattern[str] | None = None) -> str:
    value = data.get(field)
    if not isinstance(value, str) or not value or (pattern and not pattern.fullmatch(value)):
        raise MalformedEvent(f"{field} missing or invalid")
    return value


def parse_event(raw: Mapping[str, Any]) -> WhaspEvent:
    """Turn a queued whasp event into a typed domain event; raise MalformedEvent if we cannot."""
    if not isinstance(raw, Mapping):
        raise MalformedEvent("event is not an object")
    event_id, event_type = _str(raw, "id"), _str(raw, "type")
    created_at = _time(raw.get("created_at"), "created_at")
    data = raw.get("data")
    if not isinstance(data, Mapping):
        raise MalformedEvent("data missing")
    head: dict[str, Any] = {"event_id": event_id, "created_at": created_at}
    label = data.get("label") if isinstance(data.get("label"), str) else None
    if event_type == MESSAGE_RECEIVED:
        message = data.get("message")
        if not isinstance(message, Mapping):
            raise MalformedEvent("data.message missing")
        media_raw = message.get("media")
        media = None
        if isinstance(media_raw, Mapping) and isinstance(media_raw.get("url"), str):
            size = media_raw.get("size")
            media = Media(
                url=media_raw["url"],
                mime_type=str(media_raw.get("mime_type") or "application/octet-stream"),
                size=size if isinstance(size, int) else None,
            )
        text, caption = message.get("text"), message.get("caption")
        return InboundMessage(
            **head,
            number=_str(data, "number", pattern=E164),
            chat=_str(data, "chat", pattern=E164),
            label=label,
            message_id=str(message.get("id") or event_id),
            kind=str(message.get("type") or "unknown"),
            text=text if isinstance(text, str) else None,
            caption=caption if isinstance(caption, str) else None,
            media=media,
            sent_at=_time(message.get("timestamp") or raw.get("created_at"), "message.timestamp"),
        )
    if event_type == CHAT_OPTED_OUT:
        return ChatOptedOut(
            **head,
            number=_str(data, "number", pattern=E164),
            chat=_str(data, "chat", pattern=E164),
        )
    if event_type == NUMBER_REPLACED:
        return NumberReplaced(
            **head,
            old_number=_str(data, "old_number", pattern=E164),
            new_number=_str(data, "new_number", pattern=E164),
            label=label,
        )
    raise MalformedEvent("event type is not one we queue")


# --------------------------------------------------------------------------- outbound


class WhaspClient:
    """Sends replies and fetches media over HTTP (urllib3, already shipped with botocore)."""

    def __init__(
        self,
        api_url: str,
        api_key: str | Secret,
        *,
        timeout_seconds: float = 10.0,
        retries: int = 2,
        backoff_factor: float = 0.5,
        media_origins: frozenset[Origin] | None = None,
        media_deadline_seconds: float = 30.0,
    ):
        import urllib3
        from urllib3.util import Retry, Timeout

        class CappedRetry(Retry):
            """Honour Retry-After, but never sleep past our own deadline."""

            def get_retry_after(self, response):  # type: ignore[no-untyped-def]
                seconds = super().get_retry_after(response)
                return None if seconds is None else min(seconds, MAX_RETRY_AFTER_SECONDS)

        self._api_url = api_url.rstrip("/")
        self._api_key = api_key  # a Secret is read on first use, so cold starts never wait on SSM
        self._api_origin = url_origin(self._api_url)
        self._media_origins = media_origins or frozenset(
            {self._api_origin} if self._api_origin else ()
        )
        self._media_deadline = media_deadline_seconds
        self._read_timeout = timeout_seconds
        retry = CappedRetry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            backoff_factor=backoff_factor,
            status_forcelist=(429, 500, 502, 503, 504),
            allowed_methods=frozenset({"GET", "POST"}),  # POST is safe: Idempotency-Key
            respect_retry_after_header=True,
            raise_on_status=False,
        )
        self._http = urllib3.PoolManager(
            retries=retry, timeout=Timeout(connect=3.0, read=timeout_seconds)
        )

    def _key(self, *, fresh: bool = False) -> str:
        return self._api_key if isinstance(self._api_key, str) else self._api_key.get(fresh=fresh)

    def send_text(self, *, sender: str, to: str, text: str, key: str) -> str:
        """Send one text part. Return whasp's message id; raise a typed error otherwise."""
        body = json.dumps({"from": sender, "to": to, "type": "text", "text": text})
        response = post_with_fresh_key(
            self._http,
            f"{self._api_url}/v1/messages",
            body.encode(),
            lambda fresh: {
                "Authorization": f"Bearer {self._key(fresh=fresh)}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
            refused=lambda response: response.status in AUTH_STATUSES,
            name="whasp",
            dependency="whasp",
        )
        if response.status in AUTH_STATUSES:  # refused twice: the key itself is wrong
            _count("ProviderAuthFailed")  # alarmed: the key needs fixing; the reply waits
            raise TransientError(
                f"whasp refused the API key (HTTP {response.status})",
                dependency="whasp",
                status=response.status,
                error="Unauthorized",
            )
        status = response.status
        if status in (200, 201, 202):
            try:
                return str(json.loads(response.data).get("id", ""))
            except (ValueError, AttributeError):
                return ""
        if status == 409 and _error_code(response.data) == "opted_out":
            raise OptedOut("chat opted out")
        if status == 429 or status >= 500:
            raise TransientError(
                f"whasp answered HTTP {status}",
                dependency="whasp",
                status=status,
                error="HTTPError",
            )
        raise SendRejected(status)

    def send_choices(self, *, sender: str, to: str, text: str, choices: Choices, key: str) -> str:
        """whasp's contract sends text only: the reply goes as it is stored, the options as its
        numbered lines, and the person answers with a number or the option's words."""
        return self.send_text(sender=sender, to=to, text=text, key=key)

    def send_template(self, *, sender: str, to: str, template: TemplateMessage, key: str) -> str:
        """whasp has no templates (nor a window to cross: the turn asks for one only on Meta's
        closed window), so nothing is sent: a permanent refusal, as a 4xx would be."""
        raise SendRejected(400)

    def upload_voice(self, *, sender: str, audio: bytes) -> str | None:
        """whasp's contract (docs/whasp.md) sends text only, with no media upload: a voice
        reply goes as its text (None)."""
        return None

    def send_voice(self, *, sender: str, to: str, media_id: str, key: str) -> str:
        """Never called (upload_voice gives no media id); refused for good, as a 4xx would be."""
        raise SendRejected(400)

    def mark_read(self, message: InboundMessage) -> None:
        """whasp's contract has no read receipt or typing indicator: nothing to do."""

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        """Download a media file (bytes, content type) by memagent.providers.download's rules, the
        key sent only to WHASP_API_URL's origin. A URL off the allow-list, a redirect leaving it, a
        file over max_bytes or a refusal raises MalformedEvent (the message becomes a note);
        an unreachable or slow host (past the deadline) raises TransientError (retried), and so
        does a refused key, after one more try with the key read again past its cache."""
        for fresh in (False, True):
            try:
                return download.fetch(
                    self._http,
                    url,
                    allowed=self._media_origins,
                    key_origins=frozenset({self._api_origin} if self._api_origin else ()),
                    key=functools.partial(self._key, fresh=fresh),
                    max_bytes=max_bytes,
                    deadline_seconds=self._media_deadline,
                    read_timeout=self._read_timeout,
                )
            except download.Refused as refused:
                if not (refused.sent_key and refused.status in AUTH_STATUSES):
                    raise MalformedEvent(f"media download answered HTTP {refused.status}") from None
                status = refused.status
        _count("ProviderAuthFailed")
        raise TransientError(f"media download refused the API key (HTTP {status})")


def _count(name: str) -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    from memagent.observability import metrics

    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


def _error_code(data: bytes) -> str | None:
    try:
        body = json.loads(data)
    except ValueError:
        return None
    return body.get("error") if isinstance(body, dict) else None
