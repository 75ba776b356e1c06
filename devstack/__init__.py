"""Local stand-ins for the outside systems: OpenAI, whasp and AWS (moto).

Used by the test suite and by the local stack that runs the whole pipeline on one machine with no
AWS account and no API key. The HTTP stand-ins use only the standard library and bind to a free
port on 127.0.0.1, so they start in milliseconds from a test fixture or a CLI:

    with FakeOpenAI() as openai_server, FakeWhasp(api_key="k") as whasp:
        OpenAI(base_url=f"{openai_server.url}/v1", api_key="test")
        ...

Modules: ``devstack.fake_openai`` (FakeOpenAI), ``devstack.fake_whasp`` (FakeWhasp) and
``devstack.aws`` (MotoServer, aws_env). They are imported from their modules, not re-exported
here, so that importing one never drags in another (moto is heavy).

This module holds the small HTTP scaffolding the stand-ins share: `LoopbackServer`, `Request`
and `Reply`, and `RecordingServer`, the request log and hooks of the three fake services.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query string
    query: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON; raises ValueError when it is not JSON."""
        return json.loads(self.body or b"null")


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
        return cls(
            status,
            json.dumps(payload).encode(),
            {"Content-Type": "application/json", **(headers or {})},
        )


class Started:
    """`with X() as x:` starts x (its start returns it) and stops it however the block ends."""

    def __enter__(self) -> Self:
        return self.start()  # type: ignore[attr-defined]

    def __exit__(self, *exc_info: object) -> None:
        self.stop()  # type: ignore[attr-defined]


class LoopbackServer(Started):
    """A ThreadingHTTPServer on 127.0.0.1:<free port>, served from a daemon thread.

    Subclasses implement `handle(request) -> Reply`; it runs on the server's request threads,
    so shared state must be guarded with `self._lock`.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.url: str = ""

    def handle(self, request: Request) -> Reply:
        raise NotImplementedError

    def start(self) -> Self:
        if self._httpd is not None:
            return self
        handler = _handler_for(self)
        httpd = type("Server", (ThreadingHTTPServer,), {"request_queue_size": 64})(
            ("127.0.0.1", 0), handler
        )  # a backlog for many concurrent clients (the default is 5)
        httpd.daemon_threads = True  # a stuck client never blocks interpreter exit
        self._httpd = httpd
        self.url = f"http://127.0.0.1:{httpd.server_address[1]}"
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},  # stop() waits up to one poll: keep teardown quick
            name=f"{type(self).__name__}@{self.url}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        httpd.shutdown()
        httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


class RecordingServer(LoopbackServer):
    """A fake service that records every request it answers in `.requests` (method, path,
    headers, the JSON body, status), failed ones too, and answers `.delay_seconds` late.

    Subclasses implement `answer(request, record) -> Reply`; reading the body into
    `record["json"]` is theirs, as each service reads its bodies its own way.
    """

    def __init__(self, *, delay_seconds: float = 0.0) -> None:
        super().__init__()
        self.delay_seconds = delay_seconds
        self.requests: list[dict[str, Any]] = []

    def read(self, request: Request) -> dict[str, Any]:
        """Fields the record holds from the start (e.g. the parsed body), so that whoever
        reads `requests` while the answer is being made sees them."""
        return {}

    def answer(self, request: Request, record: dict[str, Any]) -> Reply:
        raise NotImplementedError

    def handle(self, request: Request) -> Reply:
        if self.delay_seconds:
            time.sleep(self.delay_seconds)
        record: dict[str, Any] = {
            "method": request.method,
            "path": request.path,
            "headers": request.headers,
            "json": None,
            "status": None,
            **self.read(request),
        }
        with self._lock:
            self.requests.append(record)
        reply = self.answer(request, record)
        record["status"] = reply.status
        return reply


def in_parallel(calls: Iterable[Callable[[], Any]]) -> None:
    """Run each call on a thread of its own; once all are done, raise the first one's failure."""
    calls = list(calls)
    with ThreadPoolExecutor(max_workers=max(1, len(calls))) as executor:
        futures = [executor.submit(call) for call in calls]
    for future in futures:
        future.result()


def announce(on_send: Callable[[dict[str, Any]], None] | None, sent: dict[str, Any]) -> None:
    """Call a stand-in's `on_send` hook (e.g. the local stack printing a reply) with a message it
    accepted."""
    if on_send is None:
        return
    try:
        on_send(sent)
    except Exception:  # a display bug must not turn an accepted send into a failure
        traceback.print_exc(file=sys.stderr)


def _handler_for(app: LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 keeps connections alive, as httpx and urllib3 expect; every reply below
        # therefore carries a Content-Length.
        protocol_version = "HTTP/1.1"
        # The headers and the body go out in two writes: with Nagle's algorithm the body waits
        # for the client's delayed ACK of the headers, 40 ms on every kept-alive request
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            request = Request(
                method=self.command,
                path=parts.path,
                query=parts.query,
                headers={name.lower(): value for name, value in self.headers.items()},
                body=self._read_body(),
            )
            try:
                reply = app.handle(request)
            except Exception as error:  # a bug in a stand-in must show up, not hang the client
                reply = Reply.json(500, {"error": f"stand-in crashed: {error!r}"})
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(reply.body)

        def _read_body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                chunks = []
                while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                    chunks.append(self.rfile.read(size))
                    self.rfile.readline()  # the CRLF after each chunk
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def __getattr__(self, name: str) -> Any:
            # any other method (TRACE, QUERY, ...) reaches the stand-in too, which answers it
            # as its service does (http.server's own answer would be a 501 no service gives)
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output and the local stack's terminal clean

    return Handler
