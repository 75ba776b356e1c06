"""A stand-in for whasp's outbound API: sending texts and downloading media.

Implements the assumed contract in the project's whasp adapter (memagent.providers.whasp):

    POST /v1/messages   Authorization: Bearer <key>, Idempotency-Key: <= 255 chars
                        {"from", "to", "type": "text", "text" (<= 4,096 chars)}
        201 {"id": "msg_<n>", "status": "queued"}   accepted (recorded in `.sent`)
        400 {"error": "invalid_request", "detail"}  bad body or missing Idempotency-Key
        401 {"error": "unauthorized"}               wrong or missing key
        409 {"error": "opted_out"}                  `to` is in `.opted_out`
        A repeated Idempotency-Key within 24 h returns the first result (201 or 409) and sends
        nothing. Failed requests (400, 401, injected failures) store no result, so a retry with
        the same key is processed afresh, as with Stripe-style idempotency.
    GET /media/<id>     Authorization: Bearer <key> -> the bytes registered with `add_media`.

Stricter than it need be on purpose (E.164 numbers, Idempotency-Key required), so the tests catch
a client that drifts from the contract.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
import time
from collections.abc import Callable
from typing import Any

from devstack import RecordingServer, Reply, Request, announce

MESSAGES = "/v1/messages"
MEDIA = "/media/"
MAX_TEXT_CHARS = 4096
MAX_IDEMPOTENCY_KEY = 255
IDEMPOTENCY_TTL_SECONDS = 24 * 3600
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
_ERRORS = {
    400: "invalid_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "opted_out",
    429: "rate_limited",
}


class FakeWhasp(RecordingServer):
    """The whasp API stand-in. See the module docstring."""

    def __init__(
        self,
        api_key: str = "whasp-test-key",
        *,
        opted_out: set[str] | None = None,
        on_send: Callable[[dict[str, Any]], None] | None = None,
        delay_seconds: float = 0.0,
    ) -> None:
        super().__init__(delay_seconds=delay_seconds)
        self.api_key = api_key
        self.opted_out: set[str] = set(opted_out or ())
        self.on_send = on_send  # called with each accepted send, e.g. to print it
        self.sent: list[dict[str, Any]] = []
        self._media: dict[str, tuple[bytes, str]] = {}
        self._expired: set[str] = set()  # media ids past their URL's life (410)
        self._results: dict[str, tuple[float, Reply]] = {}  # idempotency key -> first result
        self._injected: list[tuple[str | None, Reply]] = []  # (path prefix, reply), in order
        self._ids = itertools.count(1)
        self._media_ids = itertools.count(1)
        self._key_locks: dict[str, threading.Lock] = {}

    # ------------------------------------------------------------------ test controls

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        retry_after: float | None = None,
        *,
        path: str | None = MESSAGES,
    ) -> None:
        """Answer the next `n` requests to `path` (a prefix; None = any) with a transient error.

        The default targets sends only, so a media download earlier in a turn does not use up
        the failure meant for the send.
        """
        headers = {} if retry_after is None else {"Retry-After": _seconds(retry_after)}
        reply = Reply.json(status, {"error": _ERRORS.get(status, "server_error")}, headers)
        with self._lock:
            self._injected.extend([(path, reply)] * n)

    def reject_next(self, n: int = 1, status: int = 400, *, path: str | None = MESSAGES) -> None:
        """Refuse the next `n` requests to `path` with a permanent error (400, 403, 409 ...)."""
        reply = Reply.json(status, {"error": _ERRORS.get(status, "rejected")})
        with self._lock:
            self._injected.extend([(path, reply)] * n)

    def add_media(self, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Register bytes for download and return their URL (the server must be started)."""
        if not self.url:
            raise RuntimeError("start the server before adding media")
        with self._lock:
            media_id = f"med_{next(self._media_ids)}"
            self._media[media_id] = (data, content_type)
        return f"{self.url}{MEDIA}{media_id}"

    def expire_media(self) -> None:
        """Every media URL handed out so far answers 410 Gone from now on, as whasp's
        short-lived URLs do once they expire."""
        with self._lock:
            self._expired.update(self._media)
            self._media.clear()

    def texts_to(self, phone: str) -> list[str]:
        """The texts accepted for `phone`, in order."""
        with self._lock:
            return [s["text"] for s in self.sent if s["to"] == phone]

    def reset(self) -> None:
        """Forget sends, requests, idempotency results, media, opt-outs and pending failures,
        and stop delaying replies. The api_key and on_send hook stay."""
        with self._lock:
            self.delay_seconds = 0.0
            for store in (self.sent, self.requests, self._injected):
                store.clear()
            self._media.clear()
            self._expired.clear()
            self._results.clear()
            self.opted_out.clear()

    # ------------------------------------------------------------------ HTTP

    def read(self, request: Request) -> dict[str, Any]:
        record: dict[str, Any] = {"replayed": False}
        if request.path == MESSAGES:
            with contextlib.suppress(ValueError):  # a body that is not JSON is refused later
                record["json"] = request.json()
        return record

    def answer(self, request: Request, record: dict[str, Any]) -> Reply:
        if injected := self._take_injected(request.path):
            return injected
        if request.headers.get("authorization") != f"Bearer {self.api_key}":
            return _error(401, "unauthorized")
        if request.method == "POST" and request.path == MESSAGES:
            return self._send(request, record)
        if request.method == "GET" and request.path.startswith(MEDIA):
            media_id = request.path.removeprefix(MEDIA)
            with self._lock:
                media = self._media.get(media_id)
                expired = media_id in self._expired
            if media is None:
                return _error(410, "gone") if expired else _error(404, "not_found")
            return Reply(200, media[0], {"Content-Type": media[1]})
        return _error(404, "not_found")

    def _take_injected(self, path: str) -> Reply | None:
        with self._lock:
            for index, (prefix, reply) in enumerate(self._injected):
                if prefix is None or path.startswith(prefix):
                    del self._injected[index]
                    return reply
        return None

    def _send(self, request: Request, record: dict[str, Any]) -> Reply:
        key = request.headers.get("idempotency-key", "")
        body = record["json"]
        if problem := _invalid(body, key):
            return _error(400, "invalid_request", problem)
        # One lock per key: two concurrent requests with the same key must not both send.
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            with self._lock:
                first = self._results.get(key)
                if first and time.time() - first[0] < IDEMPOTENCY_TTL_SECONDS:
                    record["replayed"] = True
                    return first[1]
            if body["to"] in self.opted_out:
                reply = _error(409, "opted_out")
                sent = None
            else:
                with self._lock:
                    message_id = f"msg_{next(self._ids)}"
                reply = Reply.json(201, {"id": message_id, "status": "queued"})
                sent = {
                    "id": message_id,
                    "from": body["from"],
                    "to": body["to"],
                    "text": body["text"],
                    "idempotency_key": key,
                    "at": time.time(),
                }
            with self._lock:
                self._results[key] = (time.time(), reply)
                if sent:
                    self.sent.append(sent)
        if sent:
            announce(self.on_send, sent)
        return reply


def _invalid(body: Any, key: str) -> str | None:
    """Why a send request is invalid, or None."""
    if not key or len(key) > MAX_IDEMPOTENCY_KEY:
        return f"Idempotency-Key header required, at most {MAX_IDEMPOTENCY_KEY} characters"
    if not isinstance(body, dict):
        return "body must be a JSON object"
    for field in ("from", "to"):
        if not isinstance(body.get(field), str) or not _E164.match(body[field]):
            return f"'{field}' must be an E.164 phone number"
    if body.get("type") != "text":
        return "'type' must be 'text'"
    text = body.get("text")
    if not isinstance(text, str) or not text.strip():
        return "'text' must be a non-empty string"
    if len(text) > MAX_TEXT_CHARS:
        return f"'text' holds at most {MAX_TEXT_CHARS} characters"
    return None


def _error(status: int, code: str, detail: str | None = None) -> Reply:
    return Reply.json(status, {"error": code} | ({"detail": detail} if detail else {}))


def _seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
