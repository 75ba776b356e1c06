"""Media downloads from a URL a webhook named: one set of rules for every provider.

A signed event (whasp) or a lookup answer (Meta) names where a voice note or photo lives. Whoever
controls that URL could point it at their own host (to collect our key), at an internal address,
or trickle bytes to hold a batch. So a download:

- goes only to origins (scheme, host, port, as urllib3 itself parses the URL, surrounding
  whitespace removed once for the check and the request alike; no credentials in the URL) on
  the caller's allow-list;
- sends the key only to the origins the caller names for it;
- follows no redirect blindly: each hop is checked against the allow-list (at most 3);
- stops at `max_bytes` while streaming (at once for a larger Content-Length), and at a total
  deadline however slowly the host sends: no single read outlives it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urljoin

from memagent.errors import MalformedEvent, MediaTooLarge, TransientError
from memagent.providers.origins import Origin, url_origin

REDIRECTS = 3
CHUNK = 64 * 1024


class Refused(Exception):
    """The host answered a status other than 200, 429 or 5xx (the caller decides what it means:
    a refused key, an expired URL, or an attachment that cannot be had)."""

    def __init__(self, status: int, *, sent_key: bool):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.sent_key = sent_key


def fetch(
    http: Any,
    url: str,
    *,
    allowed: frozenset[Origin],
    key_origins: frozenset[Origin],
    key: Callable[[], str],
    max_bytes: int,
    deadline_seconds: float,
    read_timeout: float,
) -> tuple[bytes, str]:
    """(bytes, content type) of `url`, through urllib3 PoolManager `http`. A URL off the
    allow-list or a redirect leaving it raises MalformedEvent, a file over max_bytes
    MediaTooLarge (a MalformedEvent); an unreachable or slow host (past the deadline), a 429 or
    a 5xx raises TransientError; any other status raises Refused."""
    import urllib3
    from urllib3.util import Timeout

    url = url.strip()  # what url_origin checks is what is requested
    deadline = time.monotonic() + deadline_seconds
    for _hop in range(REDIRECTS + 1):
        origin = url_origin(url)
        if origin is None or origin not in allowed:
            raise MalformedEvent("media URL is not on the allow-list")  # never fetched
        headers = {"Authorization": f"Bearer {key()}"} if origin in key_origins else {}
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TransientError("media download past its deadline")
        try:
            response = http.request(
                "GET",
                url,
                headers=headers,
                preload_content=False,
                redirect=False,  # each hop is checked against the allow-list above
                timeout=Timeout(connect=min(3.0, remaining), read=min(read_timeout, remaining)),
            )
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(f"media unreachable: {type(error).__name__}") from None
        try:
            location = response.get_redirect_location()
            if not location:
                return _read(
                    response, max_bytes=max_bytes, deadline=deadline, sent_key=bool(headers)
                )
            response.close()  # a redirect's body is of no use
        except BaseException:
            response.close()  # a body left unread or half read never goes back to the pool
            raise
        finally:
            response.release_conn()
        url = urljoin(url, location).strip()
    raise MalformedEvent("media redirected too many times")


def _read(response: Any, *, max_bytes: int, deadline: float, sent_key: bool) -> tuple[bytes, str]:
    import urllib3

    if response.status == 429 or response.status >= 500:
        raise TransientError(f"media download answered HTTP {response.status}")
    if response.status != 200:
        raise Refused(response.status, sent_key=sent_key)
    length = response.headers.get("Content-Length", "")
    if length.isdigit() and int(length) > max_bytes:
        raise MediaTooLarge("media larger than the configured cap")
    data = bytearray()
    sock = getattr(response.connection, "sock", None)
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TransientError("media download past its deadline")
            if sock is not None:  # no single read may outlive the deadline either
                sock.settimeout(remaining)
            chunk = response.read1(CHUNK)
            if not chunk:
                break
            data += chunk
            if len(data) > max_bytes:
                raise MediaTooLarge("media larger than the configured cap")
    except (urllib3.exceptions.HTTPError, OSError) as error:
        raise TransientError(f"media download broke off: {type(error).__name__}") from None
    return bytes(data), response.headers.get("Content-Type", "application/octet-stream")
