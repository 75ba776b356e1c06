"""AWS on loopback: a moto server for DynamoDB, DynamoDB Streams and SQS.

    with MotoServer() as moto:
        os.environ.update(aws_env(moto.url))   # or pass it to a subprocess
        boto3.client("dynamodb")               # reaches moto through AWS_ENDPOINT_URL alone

moto keeps its state in module globals, so in-process `mock_aws()` and this server share it, and
`reset()` clears both.
"""

from __future__ import annotations

import logging
import selectors
import threading
import types
import urllib.request
from typing import TYPE_CHECKING, Any, Self

from devstack import Started

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

    from devstack.resources import LocalResources

REGION = "us-east-1"

_serving = threading.local()  # what the moto server's thread is answering now


def _keep_alive_server() -> type[ThreadedMotoServer]:
    """moto's ThreadedMotoServer, answering on keep-alive connections.

    werkzeug's development server closes the connection after every response, so each AWS call
    of a test paid for a new TCP connection, a new server thread and, after the response, a
    drain that waits for the client to hang up: about a third of a call's CPU on both sides
    (a GetItem: 2.2 ms of CPU with a new connection, 1.6 ms on a kept one). This serves HTTP/1.1
    as AWS does: a connection stays open for the client's next request once the request's body
    is read in full; after a chunked body, or a client gone mid-answer, it closes as before."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug import serving
    from werkzeug.serving import make_server
    from werkzeug.wsgi import LimitedStream

    class KeptAlive(MotoRequestHandler):
        protocol_version = "HTTP/1.1"
        # werkzeug writes the headers and the body apart: Nagle's algorithm would hold the body
        # for the client's delayed ACK (40 ms) on a connection kept open
        disable_nagle_algorithm = True
        _body: LimitedStream | None = None

        def make_environ(self) -> dict[str, Any]:
            environ = super().make_environ()
            self._body = None
            if not environ.get("wsgi.input_terminated"):  # not chunked: its length is known
                length = int(environ.get("CONTENT_LENGTH") or 0)
                self._body = LimitedStream(environ["wsgi.input"], length)
                environ["wsgi.input"] = self._body
            _serving.kept_alive = self._body is not None  # a chunked one is drained and closed
            return environ

        def run_wsgi(self) -> None:
            try:
                super().run_wsgi()  # make_environ, the application, the answer, the drain
            finally:
                _serving.kept_alive = False
            if self._body is None:
                self.close_connection = True
            else:
                self._body.exhaust()  # what moto left unread is not the next request's start

        def send_header(self, keyword: str, value: str) -> None:
            closing = self.close_connection or self._body is None
            if keyword.lower() == "connection" and value.lower() == "close" and not closing:
                return  # werkzeug's unconditional close, on a connection kept open
            super().send_header(keyword, value)

        def connection_dropped(self, error: BaseException, environ: Any = None) -> None:
            self.close_connection = True
            super().connection_dropped(error, environ)

    class KeptAliveServer(ThreadedMotoServer):
        def _server_entry(self) -> None:
            self._server = make_server(
                self._ip_address,
                self._port,
                DomainDispatcherApplication(create_backend_app),
                True,
                request_handler=KeptAlive,
            )
            self._server_ready_event.set()
            self._server.serve_forever()

    serving.selectors = _Drain  # type: ignore[assignment]  # the two names werkzeug uses
    return KeptAliveServer


class _Drain:
    """werkzeug.serving's `selectors`: after each response werkzeug waits up to 10 ms for more
    of the request to read and reads it, on a connection it always closes. On a kept-alive one
    that would wait for, and swallow, the client's next request: there the body was read to its
    length instead (KeptAlive.run_wsgi), and this selects nothing."""

    EVENT_READ = selectors.EVENT_READ

    @staticmethod
    def DefaultSelector() -> selectors.BaseSelector:  # the name werkzeug calls
        return _Nothing() if getattr(_serving, "kept_alive", False) else selectors.DefaultSelector()


class _Nothing(selectors.BaseSelector):
    def register(self, fileobj: Any, events: int, data: Any = None) -> Any:
        return None

    def unregister(self, fileobj: Any) -> Any:
        return None

    def select(self, timeout: float | None = None) -> list[Any]:
        return []

    def get_map(self) -> Any:
        return {}


def aws_env(url: str) -> dict[str, str]:
    """The environment a process needs to reach the moto server at `url` with boto3.

    No AWS_PROFILE: a profile from the developer's ~/.aws must never point a local run at a real
    account. Service-specific overrides (AWS_ENDPOINT_URL_DYNAMODB ...) would still win over
    AWS_ENDPOINT_URL, so callers should not set them.
    """
    return {
        "AWS_ENDPOINT_URL": url,
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
    }


class MotoServer(Started):
    """moto's ThreadedMotoServer on 127.0.0.1:<free port>."""

    def __init__(self, *, quiet: bool = True) -> None:
        self._server: ThreadedMotoServer | None = None
        self.url = ""
        self._quiet = quiet

    def start(self) -> Self:
        if self._server is not None:
            return self
        # Port 0 lets the OS pick a free port; werkzeug reports the real one after binding.
        if self._quiet:
            # werkzeug logs every request to stderr, drowning the local stack's terminal.
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = _keep_alive_server()(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        self._server = server
        self.url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def queue_maker(self) -> Any:
        """Creates queues as an SQS client's create_queue does (moto's own SQS model, so its
        checks of the name and attributes), but directly in this process: the tests create five
        queues for every test, and the request for each cost more than the queue."""
        from urllib.parse import urlparse

        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.sqs.models import sqs_backends

        backend = sqs_backends[DEFAULT_ACCOUNT_ID][REGION]
        here = urlparse(self.url)

        class Maker:
            meta = types.SimpleNamespace(region_name=REGION)

            @staticmethod
            def create_queue(*, QueueName: str, Attributes: dict[str, str]) -> dict[str, str]:
                return {"QueueUrl": backend.create_queue(QueueName, {}, **Attributes).url(here)}

        return Maker()

    def forget(self, made: LocalResources) -> None:
        """Drop a table and queues made by devstack.resources.create_all from moto's memory,
        directly, without a request (the server runs in this process): what one test made,
        freed when it ends. A worker that kept every test's items held millions of objects,
        and each of the garbage collector's full passes walked them all."""
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends
        from moto.sqs.models import sqs_backends

        dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].tables.pop(made.table_name, None)
        queues = sqs_backends[DEFAULT_ACCOUNT_ID][REGION].queues
        for url in made.queue_urls.values():
            queues.pop(url.rsplit("/", 1)[-1], None)

    def reset(self) -> None:
        """Delete every table, queue and stream (all moto state in this process)."""
        # S310: the URL is our own loopback server's, never user input.
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")  # noqa: S310
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            response.read()
