"""AWS on loopback: a moto server for DynamoDB, DynamoDB Streams and SQS.

    with MotoServer() as moto:
        os.environ.update(aws_env(moto.url))   # or pass it to a subprocess
        boto3.client("dynamodb")               # reaches moto through AWS_ENDPOINT_URL alone

moto keeps its state in module globals, so in-process `mock_aws()` and this server share it, and
`reset()` clears both.
"""

from __future__ import annotations

import logging
import types
import urllib.request
from typing import TYPE_CHECKING, Any, Self

from devstack import Started

if TYPE_CHECKING:
    from moto.server import ThreadedMotoServer

    from devstack.resources import LocalResources

REGION = "us-east-1"


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
        from moto.server import ThreadedMotoServer  # heavy: import only when started

        # Port 0 lets the OS pick a free port; werkzeug reports the real one after binding.
        if self._quiet:
            # werkzeug logs every request to stderr, drowning the local stack's terminal.
            logging.getLogger("werkzeug").setLevel(logging.WARNING)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
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
