"""A stand-in for Meta's Graph API (WhatsApp Cloud API): sending, read/typing, media.

Implements what memagent.providers.meta uses (docs/meta.md), with Meta's error envelope
``{"error": {"message", "type", "code", "fbtrace_id"}}``:

    POST /{phone_number_id}/messages   Authorization: Bearer <token>
        text:  {"messaging_product": "whatsapp", "to" | "recipient", "type": "text",
                "text": {"body" (<= 4,096 chars)}, "biz_opaque_callback_data"? (<= 512)}
               -> 200 {"messaging_product", "contacts": [...], "messages": [{"id": "wamid..."}]}
               recorded in `.sent`. No idempotency: a repeat sends again, as at Meta.
        template: {..., "type": "template", "template": {"name", "language": {"policy":
                "deterministic", "code"}, "components": [{"type": "body", "parameters":
                [{"type": "text", "text"}]}]}} -> as text; only a template in `.templates`
                (approved, in that language, with that many body parameters), else 132001
                (no such template or language, or not approved: PENDING, REJECTED), 132015
                (PAUSED), 132016 (DISABLED) or 132000 (the parameters do not match), as
                Meta's error codes page names them
        interactive: {..., "type": "interactive", "interactive": {"type": "button" | "list",
                "body": {"text"}, "action": {...}}} -> as text (the body, recorded with its
                `interactive`); Meta's limits (3 buttons of 20 characters; 10 rows of 24, their
                descriptions 72; a body of 1,024) else 131009
        read:  {"messaging_product": "whatsapp", "status": "read", "message_id",
                "typing_indicator"?: {"type": "text"}} -> 200 {"success": true}, in `.reads`
        A phone_number_id not in `.numbers` is error 100; a wrong token is error 190 (HTTP 401).
    GET /{waba_id}/message_templates?fields=...&limit=&after=   (a WABA in `.wabas`)
                        -> {"data": [{"id", "name", "language", "status", "category",
                            "parameter_format": "POSITIONAL", "components": [{"type": "BODY",
                            "text"}]}], "paging": {"cursors": {"before", "after"}, "next"?}},
                        one entry per template and language, `limit` a page (Meta: at most
                        the page's `limit`; `next` only when there is more)
    POST /{phone_number_id}/media  multipart: messaging_product=whatsapp, type, file
               -> 200 {"id": media_id}; Meta's supported types and sizes ("Supported media
               types"): audio (aac, amr, mpeg, mp4, ogg with the opus codec only) up to 16 MB,
               images (jpeg, png) 5 MB, video (mp4, 3gpp) 16 MB, documents (text, pdf, the
               Word, Excel and PowerPoint types) 100 MB, no other type; an audio/ogg
               file that is no Ogg/Opus stream is refused (131053, "Media upload error")
        audio: {..., "type": "audio", "audio": {"id": media_id}} -> as text, recorded with its
               `audio` (the uploaded bytes and type); an id this number never uploaded: 131053
    add_media(data, mime_type): what a person sent, by the same limits for documents
    GET /{media_id}     -> {"url", "mime_type", "sha256", "file_size", "id", "messaging_product"}
    GET /download/<token>  (the url above, Bearer) -> the bytes; the url expires after
                        `url_ttl_seconds` (404 then), like Meta's 5-minute urls.

Stricter than it need be on purpose (Bearer required on the download too), so the tests catch a
client that drifts from the contract.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import re
import secrets
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from devstack import RecordingServer, Reply, Request, announce

MAX_TEXT_CHARS = 4096
MAX_CALLBACK = 512  # biz_opaque_callback_data, characters
# interactive messages (Meta's reply buttons and list pages)
MAX_BUTTONS, MAX_BUTTON_TITLE = 3, 20
MAX_ROWS, MAX_ROW_TITLE, MAX_ROW_DESCRIPTION, MAX_LIST_BUTTON = 10, 24, 72, 20
MAX_INTERACTIVE_BODY = 1024
DOWNLOAD = "/download/"
_BSUID = re.compile(r"^[A-Z]{2}\.[A-Za-z0-9.]{1,140}$")
_WA_ID = re.compile(r"^\+?[1-9]\d{6,14}$")
_MESSAGES = re.compile(r"^/(?P<number>[0-9]+)/messages$")
_MEDIA = re.compile(r"^/(?P<media>[0-9]+)$")
_TEMPLATES = re.compile(r"^/(?P<waba>[0-9]+)/message_templates$")
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")
# a template's status -> the error Meta answers a send of it (132001 for anything not approved)
_TEMPLATE_REFUSALS = {"PAUSED": 132015, "DISABLED": 132016}
_UPLOAD = re.compile(r"^/(?P<number>[0-9]+)/media$")
MB = 1024 * 1024
# Meta's "Supported media types": the type as uploaded (codecs aside) -> its size limit
UPLOAD_LIMITS = {
    "audio/aac": 16 * MB,
    "audio/amr": 16 * MB,
    "audio/mpeg": 16 * MB,
    "audio/mp4": 16 * MB,
    "audio/ogg": 16 * MB,  # opus only
    "image/jpeg": 5 * MB,
    "image/png": 5 * MB,
    "video/mp4": 16 * MB,
    "video/3gpp": 16 * MB,
    # documents: Meta's "Supported media types" names these and no others
    "text/plain": 100 * MB,
    "application/pdf": 100 * MB,
    "application/vnd.ms-excel": 100 * MB,
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": 100 * MB,
    "application/msword": 100 * MB,
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": 100 * MB,
    "application/vnd.ms-powerpoint": 100 * MB,
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": 100 * MB,
}
DOCUMENT_TYPES = frozenset(t for t in UPLOAD_LIMITS if t.startswith(("application/", "text/")))
_TITLES = {
    100: "Invalid parameter",
    190: "Invalid OAuth access token",
    130429: "Rate limit hit",
    131000: "Something went wrong",
    131047: "Re-engagement message",
    131050: "User has stopped receiving marketing messages",
    131009: "Parameter value is not valid",
    132000: "Number of parameters does not match the expected number of params",
    132001: "Template name does not exist in the translation",
    132015: "Template is Paused",
    132016: "Template is Disabled",
}


def _too_long(value: Any, limit: int) -> bool:
    return not isinstance(value, str) or not value.strip() or len(value) > limit


def _buttons_problem(action: dict[str, Any]) -> str | None:
    buttons = action.get("buttons")
    if not isinstance(buttons, list) or not 1 <= len(buttons) <= MAX_BUTTONS:
        return f"action.buttons: 1 to {MAX_BUTTONS} buttons"
    replies = [(b or {}).get("reply") or {} for b in buttons]
    if any((b or {}).get("type") != "reply" for b in buttons):
        return "action.buttons[].type: reply"
    if any(_too_long(r.get("title"), MAX_BUTTON_TITLE) for r in replies):
        return f"button title: 1 to {MAX_BUTTON_TITLE} characters"
    if any(_too_long(r.get("id"), 256) for r in replies):
        return "button id: 1 to 256 characters"
    titles, ids = [r["title"] for r in replies], [r["id"] for r in replies]
    if len(set(titles)) < len(titles) or len(set(ids)) < len(ids):
        return "button titles and ids must be unique"
    return None


def _list_problem(action: dict[str, Any]) -> str | None:
    if _too_long(action.get("button"), MAX_LIST_BUTTON):
        return f"action.button: 1 to {MAX_LIST_BUTTON} characters"
    sections = action.get("sections")
    if not isinstance(sections, list) or not 1 <= len(sections) <= MAX_ROWS:
        return f"action.sections: 1 to {MAX_ROWS} sections"
    if len(sections) > 1 and any(
        _too_long((s or {}).get("title"), MAX_ROW_TITLE) for s in sections
    ):
        return f"section title: 1 to {MAX_ROW_TITLE} characters, with more than one section"
    rows = [row or {} for s in sections for row in ((s or {}).get("rows") or [])]
    if not 1 <= len(rows) <= MAX_ROWS:
        return f"rows: 1 to {MAX_ROWS} in all sections"
    if any(_too_long(r.get("title"), MAX_ROW_TITLE) for r in rows):
        return f"row title: 1 to {MAX_ROW_TITLE} characters"
    if any("description" in r and _too_long(r["description"], MAX_ROW_DESCRIPTION) for r in rows):
        return f"row description: at most {MAX_ROW_DESCRIPTION} characters"
    ids = [r.get("id") for r in rows]
    if any(_too_long(i, 200) for i in ids) or len(set(ids)) < len(ids):
        return "row ids: 1 to 200 characters, unique"
    return None


def error_reply(code: int, status: int = 400, message: str | None = None) -> Reply:
    """A Graph API error, as Meta shapes it."""
    return Reply.json(
        status,
        {
            "error": {
                "message": message or _TITLES.get(code, "Error"),
                "type": "OAuthException",
                "code": code,
                "error_data": {"messaging_product": "whatsapp", "details": "stand-in"},
                "fbtrace_id": secrets.token_hex(8),
            }
        },
    )


class FakeGraph(RecordingServer):
    """The Graph API stand-in. See the module docstring."""

    def __init__(
        self,
        access_token: str = "meta-test-token",  # noqa: S107 (a stand-in's test token)
        *,
        numbers: set[str] | None = None,
        wabas: set[str] | None = None,
        on_send: Callable[[dict[str, Any]], None] | None = None,
        url_ttl_seconds: float = 300.0,
    ) -> None:
        super().__init__()
        self.access_token = access_token
        self.numbers: set[str] = set(numbers or {"1122334455667"})
        self.wabas: set[str] = set(wabas or {"1234567890987654321"})
        self.on_send = on_send
        self.url_ttl_seconds = url_ttl_seconds
        self.download_base: str | None = None  # where lookups send downloads (default: here)
        self.sent: list[dict[str, Any]] = []
        self.reads: list[dict[str, Any]] = []
        # templates: name -> {"languages": {...}, "parameters": n, "status"?: "APPROVED" (or
        # PENDING, REJECTED, PAUSED, DISABLED), "body"?: "Hi {{1}}", "category"?: "UTILITY"};
        # a test adds its own
        self.templates: dict[str, dict[str, Any]] = {}
        self._media: dict[str, tuple[bytes, str]] = {}
        self._urls: dict[str, tuple[str, float]] = {}  # download token -> (media id, expiry)
        self._injected: list[tuple[str, Reply]] = []  # (kind: send | read | media, reply)
        self._ids = itertools.count(1)
        self._media_ids = itertools.count(7_000_001)

    # ------------------------------------------------------------------ test controls

    def fail_next(self, n: int = 1, *, code: int = 131000, status: int = 500, kind: str = "send"):
        """Answer the next `n` requests of `kind` (send, read, media) with a Graph error."""
        with self._lock:
            self._injected.extend([(kind, error_reply(code, status))] * n)

    def add_media(self, data: bytes, mime_type: str = "audio/ogg; codecs=opus") -> str:
        """Register bytes and return their media id, as a webhook would carry it. A document
        Meta would not carry (a type not among its supported document types, over 100 MB) is
        refused: no test can deliver what no person could send."""
        mime = mime_type.split(";")[0].strip().lower()
        if mime.startswith(("application/", "text/")):
            if mime not in DOCUMENT_TYPES:
                raise ValueError(f"Meta carries no document of type {mime}")
            if not data or len(data) > UPLOAD_LIMITS[mime]:
                raise ValueError(f"Meta carries documents of 1 byte to {UPLOAD_LIMITS[mime]}")
        with self._lock:
            media_id = str(next(self._media_ids))
            self._media[media_id] = (data, mime_type)
        return media_id

    def texts_to(self, who: str) -> list[str]:
        """The texts accepted for a phone (with or without "+") or a BSUID, in order."""
        who = who.removeprefix("+")
        with self._lock:
            return [s["text"] for s in self.sent if s["to"] == who]

    def reset(self) -> None:
        with self._lock:
            for store in (self.sent, self.reads, self.requests, self._injected):
                store.clear()
            self._media.clear()
            self._urls.clear()
            self.templates.clear()
            self.download_base = None

    # ------------------------------------------------------------------ HTTP

    def read(self, request: Request) -> dict[str, Any]:
        if request.method == "POST":
            with contextlib.suppress(ValueError):  # a body that is not JSON is refused later
                return {"json": request.json()}
        return {}

    def _take(self, kind: str) -> Reply | None:
        with self._lock:
            for index, (wanted, reply) in enumerate(self._injected):
                if wanted == kind:
                    del self._injected[index]
                    return reply
        return None

    def answer(self, request: Request, record: dict[str, Any]) -> Reply:
        if request.headers.get("authorization") != f"Bearer {self.access_token}":
            return error_reply(190, 401)
        if request.method == "POST" and (found := _MESSAGES.match(request.path)):
            body = record["json"]
            if not isinstance(body, dict) or body.get("messaging_product") != "whatsapp":
                return error_reply(100, message="messaging_product must be whatsapp")
            if found["number"] not in self.numbers:
                return error_reply(100, message="Unknown phone_number_id")
            if body.get("status") == "read":
                return self._read(found["number"], body)
            return self._send(found["number"], body)
        if request.method == "POST" and (found := _UPLOAD.match(request.path)):
            if found["number"] not in self.numbers:
                return error_reply(100, message="Unknown phone_number_id")
            return self._upload(request)
        if request.method == "GET" and request.path.startswith(DOWNLOAD):
            return self._download(request.path.removeprefix(DOWNLOAD))
        if request.method == "GET" and (found := _TEMPLATES.match(request.path)):
            return self._list_templates(found["waba"], request)
        if request.method == "GET" and (found := _MEDIA.match(request.path)):
            return self._media_url(found["media"])
        return error_reply(100, 404, "Unsupported request")

    def _send(self, number: str, body: dict[str, Any]) -> Reply:
        if injected := self._take("send"):
            return injected
        to, recipient = body.get("to"), body.get("recipient")
        # Meta: when both are given, `to` wins
        target = to if isinstance(to, str) and _WA_ID.match(to) else None
        if target is None and isinstance(recipient, str) and _BSUID.match(recipient):
            target = recipient
        if target is None:
            return error_reply(100, message="'to' (a phone) or 'recipient' (a BSUID) required")
        audio: tuple[bytes, str] | None = None
        if body.get("type") == "template":
            text, refused = self._template(body.get("template"))
            if refused is not None:
                return refused
        elif body.get("type") == "interactive":
            text, refused = self._interactive(body.get("interactive"))
            if refused is not None:
                return refused
        elif body.get("type") == "audio":
            media_id = (body.get("audio") or {}).get("id")
            with self._lock:
                audio = self._media.get(media_id) if isinstance(media_id, str) else None
            if audio is None:
                return error_reply(131053, message="Media upload error: unknown media id")
            from devstack.ogg import spoken

            # what it says, where the Polly stand-in wrote it (devstack.ogg)
            text = f"[voice note] {spoken(audio[0]) or ''}".rstrip()
        else:
            text = (body.get("text") or {}).get("body") if body.get("type") == "text" else None
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT_CHARS:
            return error_reply(100, message=f"text.body: 1 to {MAX_TEXT_CHARS} characters")
        callback = body.get("biz_opaque_callback_data")
        if callback is not None and (not isinstance(callback, str) or len(callback) > MAX_CALLBACK):
            return error_reply(
                100, message=f"biz_opaque_callback_data: at most {MAX_CALLBACK} characters"
            )
        with self._lock:
            wamid = f"wamid.STANDIN{next(self._ids):08d}"
            sent = {
                "id": wamid,
                "from": number,
                "to": target.removeprefix("+"),
                "field": "to" if target == to else "recipient",
                "text": text,
                "callback": callback,
                "context": body.get("context"),
                "interactive": body.get("interactive"),
                "audio": audio,
                "at": time.time(),
            }
            self.sent.append(sent)
        announce(self.on_send, sent)
        contact = {"input": target, "wa_id" if target == to else "user_id": target}
        return Reply.json(
            200,
            {"messaging_product": "whatsapp", "contacts": [contact], "messages": [{"id": wamid}]},
        )

    def _upload(self, request: Request) -> Reply:
        """A media upload (multipart), by Meta's type and size limits."""
        from email.parser import BytesParser
        from email.policy import HTTP

        from devstack.ogg import opus_seconds

        if injected := self._take("upload"):
            return injected
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            return error_reply(100, message="multipart/form-data required")
        parsed = BytesParser(policy=HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + request.body
        )
        fields: dict[str, tuple[bytes, str]] = {}
        for part in parsed.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if isinstance(name, str):
                payload = part.get_payload(decode=True)
                fields[name] = (
                    payload if isinstance(payload, bytes) else b"",
                    part.get("content-type", ""),
                )
        if fields.get("messaging_product", (b"",))[0] != b"whatsapp":
            return error_reply(100, message="messaging_product must be whatsapp")
        if "file" not in fields:
            return error_reply(100, message="file required")
        data, declared = fields["file"]
        mime = (fields.get("type", (b"",))[0].decode() or declared).split(";")[0].strip().lower()
        limit = UPLOAD_LIMITS.get(mime)
        if limit is None:
            return error_reply(131053, message=f"Media upload error: unsupported type {mime}")
        if not data or len(data) > limit:
            return error_reply(131053, message=f"Media upload error: 1 byte to {limit} bytes")
        if mime == "audio/ogg" and not opus_seconds(data):
            return error_reply(131053, message="Media upload error: audio/ogg must be Opus")
        with self._lock:
            media_id = str(next(self._media_ids))
            self._media[media_id] = (data, f"{mime}; codecs=opus" if mime == "audio/ogg" else mime)
        return Reply.json(200, {"id": media_id})

    def voice_notes_to(self, who: str) -> list[bytes]:
        """The voice notes (their bytes) accepted for a phone or a BSUID, in order."""
        who = who.removeprefix("+")
        with self._lock:
            return [s["audio"][0] for s in self.sent if s["to"] == who and s.get("audio")]

    def _template(self, template: Any) -> tuple[str | None, Reply | None]:
        """A template message's text as the person sees it (its name and parameters), or the
        error Meta answers (132001: no such approved template or language; 132000: the
        parameters do not match it)."""
        if not isinstance(template, dict):
            return None, error_reply(100, message="template required")
        name, language = template.get("name"), (template.get("language") or {}).get("code")
        known = self.templates.get(name) if isinstance(name, str) else None
        status = (known or {}).get("status", "APPROVED")
        if (
            known is None
            or language not in known["languages"]
            or status
            not in (
                "APPROVED",
                *_TEMPLATE_REFUSALS,
            )
        ):
            return None, error_reply(132001)
        if status in _TEMPLATE_REFUSALS:
            return None, error_reply(_TEMPLATE_REFUSALS[status])
        bodies = [c for c in template.get("components") or [] if c.get("type") == "body"]
        given = [p.get("text") for c in bodies for p in c.get("parameters") or []]
        if len(given) != known["parameters"] or not all(isinstance(t, str) and t for t in given):
            expected = known["parameters"]
            return None, error_reply(
                132000,
                message=f"(#132000) Number of parameters does not match the expected number of "
                f"params: body: number of localizable_params ({len(given)}) does not match the "
                f"expected number of params ({expected})",
            )
        if known.get("body"):  # what the person sees: the body with its parameters filled in
            values = iter(given)
            return _PLACEHOLDER.sub(lambda _m: next(values, ""), known["body"]), None
        return f"[template {name}] " + " | ".join(given), None

    def _interactive(self, interactive: Any) -> tuple[str | None, Reply | None]:
        """An interactive message's body text, or Meta's refusal of the whole message: reply
        buttons (1 to 3, titles up to 20 characters, ids up to 256, both unique) or a list
        (a button label up to 20, up to 10 sections and 10 rows in all, row titles up to 24,
        descriptions up to 72, ids up to 200 and unique; a section title past one section);
        a body of 1 to 1,024 characters. Past a limit: 131009, "Parameter value is not
        valid"; a missing part: 100."""
        if not isinstance(interactive, dict) or interactive.get("type") not in ("button", "list"):
            return None, error_reply(100, message="interactive.type: button or list")
        body = (interactive.get("body") or {}).get("text")
        action = interactive.get("action")
        if not isinstance(body, str) or not body.strip() or not isinstance(action, dict):
            return None, error_reply(100, message="interactive.body.text and action required")
        problem = (
            _buttons_problem(action) if interactive["type"] == "button" else _list_problem(action)
        )
        if problem is None and len(body) > MAX_INTERACTIVE_BODY:
            problem = f"body.text: at most {MAX_INTERACTIVE_BODY} characters"
        if problem is not None:
            return None, error_reply(131009, message=f"Parameter value is not valid: {problem}")
        return body, None

    def _list_templates(self, waba: str, request: Request) -> Reply:
        """GET /{waba_id}/message_templates: every template in every language, a page at a
        time (the `after` cursor is the index of the page's next entry)."""
        if waba not in self.wabas:
            return error_reply(100, message="Unsupported get request: unknown WABA id")
        with self._lock:
            listed = [
                {
                    "id": str(1_000_000 + index),
                    "name": name,
                    "language": language,
                    "status": known.get("status", "APPROVED"),
                    "category": known.get("category", "UTILITY"),
                    "parameter_format": "POSITIONAL",
                    "components": [
                        {
                            "type": "BODY",
                            "text": known.get("body")
                            or " ".join(f"{{{{{n + 1}}}}}" for n in range(known["parameters"])),
                        }
                    ],
                }
                for index, (name, known) in enumerate(sorted(self.templates.items()))
                for language in sorted(known["languages"])
            ]
        query = parse_qs(request.query)
        start = int((query.get("after") or ["0"])[0] or 0)
        limit = int((query.get("limit") or ["25"])[0] or 25)
        page = listed[start : start + limit]
        paging: dict[str, Any] = {"cursors": {"before": str(start), "after": str(start + limit)}}
        if start + limit < len(listed):
            paging["next"] = f"{self.url}/{waba}/message_templates?after={start + limit}"
        return Reply.json(200, {"data": page, "paging": paging})

    def _read(self, number: str, body: dict[str, Any]) -> Reply:
        if injected := self._take("read"):
            return injected
        if not isinstance(body.get("message_id"), str):
            return error_reply(100, message="message_id required")
        with self._lock:
            self.reads.append({"from": number, **body})
        return Reply.json(200, {"success": True})

    def _media_url(self, media_id: str) -> Reply:
        if injected := self._take("media"):
            return injected
        with self._lock:
            media = self._media.get(media_id)
            if media is None:
                return error_reply(100, 404, "Unknown media id")
            token = secrets.token_urlsafe(12)
            self._urls[token] = (media_id, time.time() + self.url_ttl_seconds)
        data, mime_type = media
        return Reply.json(
            200,
            {
                "messaging_product": "whatsapp",
                "url": f"{self.download_base or self.url}{DOWNLOAD}{token}",
                "mime_type": mime_type,
                "sha256": hashlib.sha256(data).hexdigest(),
                "file_size": len(data),
                "id": media_id,
            },
        )

    def _download(self, token: str) -> Reply:
        with self._lock:
            media_id, expires = self._urls.get(token, ("", 0.0))
            media = self._media.get(media_id)
        if media is None or time.time() > expires:
            return Reply(404, b"", {"Content-Type": "text/plain"})
        return Reply(200, media[0], {"Content-Type": media[1].split(";")[0]})
