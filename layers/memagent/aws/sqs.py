"""SendMessage and SendMessageBatch without a boto3 client: the webhook's cold start.

`boto3.client("sqs")` costs a cold start 0.41x `import boto3` on top of it (botocore loads
its 1.25 MB endpoint table, the SQS service model and the endpoint ruleset), and the webhook,
whose cold start a person waits on, needs two operations of it. So the webhook speaks SQS's
AWS JSON 1.0 protocol itself: a POST with `X-Amz-Target: AmazonSQS.<Operation>` and the
operation's members as a JSON object. Everything that is not that mapping stays botocore's: the
credential chain (botocore.credentials), the SigV4 signer (botocore.auth), the HTTP session
(botocore.httpsession: urllib3, botocore's CA bundle, proxies from the environment) and its
exceptions, so callers catch BotoCoreError and ClientError exactly as with a client.
The consumer and the other functions keep boto3.

Measured by `make bench` (figure 1 in docs/benchmarks.md, Lambda-like environment): the webhook's
cold import + init 87 ms against 89 ms for `import boto3` (0.97x), where `import boto3` plus
one SQS client alone is 1.41x.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import botocore
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials, EnvProvider
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    NoRegionError,
)
from botocore.hooks import HierarchicalEmitter
from botocore.httpsession import URLLib3Session
from botocore.utils import get_environ_proxies

SERVICE = "sqs"  # the SigV4 signing name
USER_AGENT = f"memagent-webhook Botocore/{botocore.__version__}"  # names us in CloudTrail
CONTENT_TYPE = "application/x-amz-json-1.0"
# What is safe to send again (within 5 minutes a FIFO queue drops a resent message, batch entries
# included, by its deduplication id) and worth it: what botocore's standard mode retries, for the
# codes SQS answers with. Anything else (a bad queue URL, denied access) fails at once.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
RETRY_CODES = frozenset({"RequestThrottled", "ThrottlingException", "Throttling"})
RETRY_EXCEPTIONS = (ConnectionError, HTTPClientError)  # connect/read timeouts, resets, DNS


class UnreadableResponse(BotoCoreError):
    fmt = "SQS answered {operation} with HTTP {status} and a body that is not its JSON"


class ClientMeta:
    """The part of a boto3 client's `meta` that describes how it sends: its Config (timeouts,
    attempts), region and endpoint, and its event emitter."""

    def __init__(self, config: Config, region_name: str, endpoint_url: str):
        self.config = config
        self.region_name = region_name
        self.endpoint_url = endpoint_url
        self.events = HierarchicalEmitter()


def region_from_env(env: Mapping[str, str]) -> str:
    """AWS_REGION, else AWS_DEFAULT_REGION (Lambda sets both). botocore would also read a
    profile's region from ~/.aws/config; this does not: outside Lambda, set one of the two."""
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if not region:
        raise NoRegionError()
    return region


def _endpoint_override(env: Mapping[str, str]) -> str | None:
    """boto3's endpoint overrides, the service's own first."""
    return env.get("AWS_ENDPOINT_URL_SQS") or env.get("AWS_ENDPOINT_URL") or None


# SQS's regional host in each partition's DNS domain (commercial, China, the ISO ones, the EU
# sovereign cloud): sqs.<region>.<domain>. A queue URL's host is trusted only when it is one of
# these; `sqs.evil.example` merely starts like one, and signed requests must not go there.
SQS_HOST = re.compile(
    r"sqs\.(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]{1,2})\."
    r"(?:amazonaws\.com|amazonaws\.com\.cn|c2s\.ic\.gov|sc2s\.sgov\.gov|cloud\.adc-e\.uk"
    r"|csp\.hci\.ic\.gov|amazonaws\.eu)\Z"
)


def _queue_host(queue_url: str) -> re.Match[str] | None:
    """The queue URL's host when it is SQS's own (https, no credentials, no other port)."""
    parts = urlsplit(queue_url.strip())
    if parts.scheme != "https" or parts.username or parts.password or parts.port not in (None, 443):
        return None
    return SQS_HOST.fullmatch(parts.hostname or "")


def endpoint_for(queue_url: str, region: str, env: Mapping[str, str]) -> str:
    """Where to send: AWS_ENDPOINT_URL_SQS, then AWS_ENDPOINT_URL (boto3's own overrides: moto
    in tests and the local stack), else the queue URL's host when it is SQS's regional host in
    a partition's domain (SQS_HOST: `!Ref` in template.yaml gives https://sqs.<region>.<domain>
    /<account>/<name>). Any other URL (a legacy https://queue.amazonaws.com/... one, or a host
    that only starts with `sqs.`) gets the commercial partition's regional endpoint, as boto3
    derives it, never the URL's own host."""
    override = _endpoint_override(env)
    if override:
        return override.rstrip("/")
    found = _queue_host(queue_url)
    if found:
        return f"https://{found.group(0)}"
    return f"https://sqs.{region}.amazonaws.com"


def signing_region(queue_url: str, env: Mapping[str, str]) -> str:
    """The region the request is signed for: the queue's own (sqs.<region>.<domain>) when the
    request goes to the queue URL's host, so a queue in another region than the function's
    is still reached; else the environment's (an override such as moto, or any other URL)."""
    if not _endpoint_override(env):
        found = _queue_host(queue_url)
        if found:
            return found["region"]
    return region_from_env(env)


def resolve_credentials() -> Credentials | None:
    """botocore's credential chain. Its first link, the environment, is where Lambda puts the
    function's role credentials (with their session token): read by botocore's EnvProvider
    without building a session. Anywhere else (a profile, SSO, container or instance
    credentials) goes through botocore's whole resolver, at init like the rest: that imports
    botocore.session, the cost this module avoids, only where the environment has no keys.
    None if nothing is found: each send then fails with NoCredentialsError, as a client would."""
    found = EnvProvider().load()
    if found is not None:
        return found
    import botocore.session

    return botocore.session.get_session().get_credentials()


class SqsSender:
    """The two calls, shaped like a boto3 SQS client's: `send_message(QueueUrl=...,
    MessageBody=..., ...)` and `send_message_batch(QueueUrl=..., Entries=[...])` take the same
    keyword arguments, return the same dicts (MessageId; Successful and Failed) and raise the
    same exceptions (ClientError with the SQS error code, BotoCoreError subclasses for the
    network), after the attempts and timeouts in `config`. Each call emits botocore's
    `before-call.sqs.<Operation>` (params, context) and, when it succeeds,
    `after-call.sqs.<Operation>` (parsed, context) on `meta.events`, at a client's points (the
    body built; the answer parsed), so what times or counts a client's calls (the benchmarks)
    reads this sender too."""

    def __init__(
        self,
        queue_url: str,
        *,
        config: Config,
        env: Mapping[str, str] | None = None,
        credentials: Credentials | None = None,
    ):
        env = os.environ if env is None else env
        region = signing_region(queue_url, env)
        self.meta = ClientMeta(config, region, endpoint_for(queue_url, region, env))
        # Credentials, or RefreshableCredentials (container, SSO, AWS_CREDENTIAL_EXPIRATION):
        # frozen again for each request, so a refreshed set is used as soon as botocore has it
        self._credentials = credentials if credentials is not None else resolve_credentials()
        # botocore-stubs know neither a CA bundle's path for verify, nor a (connect, read)
        # timeout, nor a Config's attributes: botocore takes all three
        self._http = URLLib3Session(
            verify=env.get("AWS_CA_BUNDLE") or True,  # type: ignore[arg-type]
            proxies=get_environ_proxies(self.meta.endpoint_url),
            timeout=(config.connect_timeout, config.read_timeout),  # type: ignore[arg-type,attr-defined]
        )

    def send_message(self, **members: Any) -> dict[str, Any]:
        return self._call("SendMessage", members)

    def send_message_batch(self, **members: Any) -> dict[str, Any]:
        return self._call("SendMessageBatch", members)

    def _call(self, operation: str, members: dict[str, Any]) -> dict[str, Any]:
        """The members are the operation's JSON body as they are (the JSON protocol names them
        as boto3 does, and these two operations' members are strings, numbers and lists of
        such objects)."""
        body = json.dumps(members, separators=(",", ":")).encode()
        context: dict[str, Any] = {}
        self.meta.events.emit(f"before-call.sqs.{operation}", params=members, context=context)
        answer = self._send(operation, body)
        self.meta.events.emit(f"after-call.sqs.{operation}", parsed=answer, context=context)
        return answer

    def _send(self, operation: str, body: bytes) -> dict[str, Any]:
        """One call: retries what RETRY_* allow, with botocore standard mode's pause."""
        attempts = _attempts(self.meta.config)
        attempt = 1
        while True:
            try:
                response = self._http.send(self._signed(operation, body))
            except RETRY_EXCEPTIONS:
                if attempt >= attempts:
                    raise
            else:
                status = response.status_code
                answer = _json(response.content)
                if status == 200 and answer is not None:
                    return answer
                if answer is None and status < 300:
                    raise UnreadableResponse(operation=operation, status=status)
                error = _client_error(operation, status, answer or {}, response.headers)
                codes = {
                    error.response["Error"]["Code"],
                    error.response["Error"].get("QueryErrorCode"),
                }
                retryable = status in RETRY_STATUS or bool(codes & RETRY_CODES)
                if attempt >= attempts or not retryable:
                    raise error
            # botocore standard mode: a random pause up to 1 s x 2^(attempt - 1)
            pause(random.random() * 2 ** (attempt - 1))
            attempt += 1

    def _signed(self, operation: str, body: bytes) -> Any:
        """A fresh request each attempt: SigV4 signs the time and the current credentials."""
        if self._credentials is None:
            raise NoCredentialsError()
        request = AWSRequest(
            method="POST",
            url=self.meta.endpoint_url + "/",
            data=body,
            headers={
                "Content-Type": CONTENT_TYPE,
                "X-Amz-Target": f"AmazonSQS.{operation}",
                "x-amzn-query-mode": "true",  # as botocore sends it to query-compatible services
                "User-Agent": USER_AGENT,
            },
        )
        frozen = self._credentials.get_frozen_credentials()
        SigV4Auth(frozen, SERVICE, self.meta.region_name).add_auth(request)
        return request.prepare()


def pause(seconds: float) -> None:
    """The wait between attempts (looked up at each call: tests record it instead)."""
    time.sleep(seconds)


def _json(content: bytes) -> dict[str, Any] | None:
    try:
        answer = json.loads(content or b"{}")
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _attempts(config: Config) -> int:
    """Attempts in all, from a Config's retries as botocore reads them (max_attempts counts the
    retries only); botocore's standard-mode default, 3, when it names neither."""
    retries = config.retries or {}  # type: ignore[attr-defined]  # botocore-stubs lack it
    if "total_max_attempts" in retries:
        return int(retries["total_max_attempts"])
    if "max_attempts" in retries:
        return int(retries["max_attempts"]) + 1
    return 3


def _client_error(
    operation: str, status: int, answer: dict[str, Any], headers: Mapping[str, str]
) -> ClientError:
    """SQS's JSON error, read as botocore reads it: the shape's name from `__type`
    ("com.amazonaws.sqs#QueueDoesNotExist"), and, where SQS adds the query-compatible header
    `x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender`, that code as `Code`
    with the shape's name kept as `QueryErrorCode` (what a boto3 client's ClientError holds)."""
    shape = str(answer.get("__type") or answer.get("code") or f"HTTP{status}")
    shape = shape.split(":", 1)[0].rpartition("#")[2]
    message = str(answer.get("message") or answer.get("Message") or "")
    error = {"Code": shape, "Message": message}
    code, _, kind = (headers.get("x-amzn-query-error") or "").partition(";")
    if code and kind:
        error.update(Code=code, QueryErrorCode=shape, Type=kind)
    # botocore-stubs: an error's Code and Message only, and every ResponseMetadata key required
    response: Any = {"Error": error, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, operation)
