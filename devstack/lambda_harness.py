"""Lambda's side of an invocation, in one place, for the tests, the benchmarks and the local stack:
the context a handler gets, how its module is loaded, the events it is given and what the event
source mapping does with its answer.

    LambdaContext                    the context object; its remaining time counts down
    import_function(code)            a function's module, imported as Lambda imports it (cold)
    invoke(handler, event, context)  one invocation in this process, reported as an Outcome
    failed_ids(outcome, ids)         which records the event source mapping delivers again
    retried(handler, event, context) the records Lambda would deliver again after this invocation
    reported_failures(response)      the ids a partial batch response names
    sqs_message_record(message, arn) a received SQS message, as the mapping hands it over
    stream_record(raw, arn)          a DynamoDB stream record, likewise
    stream_filters(template)         the FilterCriteria patterns of the compactor's stream
    passes_filters(record, patterns) whether the mapping hands a stream record over at all
    retry_from(sequence, failed)     a stream batch resumes from its first failed record
    memagent_logs_to(stream)         where memagent's own logger writes meanwhile

The events themselves are devstack.events. Everything heavy is imported on first use, so an
execution environment (devstack.runtime) that loads this module before the function still
measures the function's own cold start.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REGION = "us-east-1"  # as devstack.aws.REGION, without importing it (and boto3) here
ACCOUNT_ID = "123456789012"  # moto's default account, as devstack.cfn.ACCOUNT_ID
ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- the context


class LambdaContext:
    """The context object Lambda passes to a handler (the attributes Powertools reads).

    `get_remaining_time_in_millis` counts down from `timeout` seconds after creation, as the
    function's own deadline does, on `clock` (seconds; default the real monotonic clock: a
    devstack.clock.ScaledClock's `now` lets a test make time pass without waiting)."""

    def __init__(
        self,
        function_name: str = "test-function",
        *,
        memory: int = 512,
        timeout: float = 60.0,
        request_id: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = (
            f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{self.function_name}"
        )
        self.memory_limit_in_mb = int(memory)
        self.aws_request_id = request_id or str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{self.function_name}"
        self.log_stream_name = f"local/[$LATEST]{os.getpid()}"
        self._clock = clock
        self._deadline = clock() + float(timeout)

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - self._clock()) * 1000))


# --------------------------------------------------------------------------- the loader


def import_function(code: Path | str, *, module_name: str | None = None) -> Any:
    """Import a function's module from its file, as a fresh module: a cold start.

    With `module_name` the module is registered under that name (an execution environment uses
    the handler's module name, as Lambda does); without, under a unique one, so that a test can
    load the same function twice with different settings. Settings are read from the environment
    at import: set it first."""
    code = Path(code)
    name = module_name or f"lambda_{code.parent.name}_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, code)
    assert spec and spec.loader, f"cannot import {code}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def function_code(name: str) -> Path:
    """functions/<name>/app.py"""
    return ROOT / "functions" / name / "app.py"


@contextlib.contextmanager
def memagent_logs_to(stream: Any) -> Iterator[Any]:
    """memagent's Powertools logger writes to `stream` meanwhile: its handler was bound to
    stdout when the logger was created, so redirecting stdout alone would not move it."""
    from memagent.observability import logger

    previous = logger.registered_handler.setStream(stream)  # type: ignore[attr-defined]
    try:
        yield stream
    finally:
        logger.registered_handler.setStream(previous)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------- invocations


@dataclass(frozen=True)
class Outcome:
    """One invocation, as the event source sees it."""

    ok: bool
    result: Any = None
    error_type: str | None = None  # the exception's class name, "Timeout" or "Crashed"
    error_message: str | None = None
    duration_ms: float = 0.0
    cold: bool = False
    logs: tuple[str, ...] = ()  # the function's log lines of this invocation (Powertools JSON)

    def failures_named(self) -> list[str]:
        """What its log says failed ("model: HTTP 500 InternalServerError, 1 record(s)"), from
        the lines memagent.aws.backoff writes when it schedules a retry."""
        named = []
        for line in self.logs:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("dependency"):
                status = entry.get("status")
                named.append(
                    f"{entry['dependency']}: "
                    + (f"HTTP {status} " if status else "no answer, ")
                    + f"{entry.get('error')}"
                )
        return named


def invoke(handler: Callable[[Any, Any], Any], event: Any, context: Any) -> Outcome:
    """Invoke `handler` in this process; an exception is a function error, as in Lambda."""
    started = time.perf_counter()
    try:
        result = handler(event, context)
    except Exception as error:
        return Outcome(False, None, type(error).__name__, str(error), _ms(started))
    return Outcome(True, result, duration_ms=_ms(started))


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def failed_ids(outcome: Outcome, ids: list[str]) -> set[str]:
    """The records the event source mapping delivers again: those reported in
    batchItemFailures, or every one after a function error or an answer Lambda cannot read."""
    if not outcome.ok:
        return set(ids)
    result = outcome.result
    if result is None:
        return set()
    if not isinstance(result, dict):
        return set(ids)
    failures = result.get("batchItemFailures") or []
    reported = [f.get("itemIdentifier") for f in failures if isinstance(f, dict)]
    known = {r for r in reported if isinstance(r, str) and r in ids}
    if len(known) != len(set(reported)):
        return set(ids)  # an unknown or empty identifier fails the whole batch, as in Lambda
    return known


def record_ids(event: dict[str, Any]) -> list[str]:
    """The identifiers batchItemFailures uses: SQS message ids or stream sequence numbers."""
    return [
        r["messageId"] if "messageId" in r else r["dynamodb"]["SequenceNumber"]
        for r in event["Records"]
    ]


def retried(
    handler: Callable[[Any, Any], Any],
    event: dict[str, Any],
    context: Any,
    *,
    expected: tuple[str, ...] = ("BatchProcessingError",),
) -> list[str]:
    """Invoke a batch handler; return the ids Lambda would deliver again, in event order.

    Powertools fails the whole invocation when every record failed (BatchProcessingError), which
    Lambda answers by retrying the whole batch. Any other exception is a bug in a test's eyes:
    it propagates instead of counting as a retry."""
    ids = record_ids(event)
    try:
        result = handler(event, context)
    except Exception as error:
        if type(error).__name__ not in expected:
            raise
        return ids
    failed = failed_ids(Outcome(True, result), ids)
    return [i for i in ids if i in failed]


def reported_failures(response: dict[str, Any]) -> list[str]:
    """The itemIdentifiers of a batch handler's partial batch response."""
    return [f["itemIdentifier"] for f in response["batchItemFailures"]]


# --------------------------------------------------------------------------- records


def sqs_message_record(message: dict[str, Any], queue_arn: str) -> dict[str, Any]:
    """A message received from SQS (ReceiveMessage, all attributes) in the shape Lambda's event
    source mapping delivers it."""
    attributes = {
        name: message.get("Attributes", {})[name]
        for name in (
            "ApproximateReceiveCount",
            "SentTimestamp",
            "SequenceNumber",
            "MessageGroupId",
            "SenderId",
            "MessageDeduplicationId",
            "ApproximateFirstReceiveTimestamp",
        )
        if name in message.get("Attributes", {})
    }
    record = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": attributes,
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": value.get("StringListValues", []),
                "binaryListValues": value.get("BinaryListValues", []),
                "dataType": value["DataType"],
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message.get("MD5OfBody") or hashlib.md5(message["Body"].encode()).hexdigest(),  # noqa: S324 (SQS's checksum)
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": REGION,
    }
    if message.get("MD5OfMessageAttributes"):
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def stream_record(raw: dict[str, Any], stream_arn: str) -> dict[str, Any]:
    """A DynamoDB Streams GetRecords record in the shape of a Lambda stream event record."""
    record = json.loads(json.dumps(raw, default=str))
    created = raw.get("dynamodb", {}).get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        record["dynamodb"]["ApproximateCreationDateTime"] = int(created.timestamp())
    if "userIdentity" in record:  # the TTL's deletions (devstack.ttl)
        from memagent.aws.stream import lambda_identity

        record["userIdentity"] = lambda_identity(record["userIdentity"])
    record["eventVersion"] = "1.1"
    record["eventSourceARN"] = stream_arn
    return record


def stream_failure_record(
    records: list[dict[str, Any]],
    *,
    shard_id: str,
    function_arn: str,
    attempts: int,
    function_error: str | None = "Unhandled",
) -> dict[str, Any]:
    """The message Lambda sends a stream mapping's OnFailure destination (SQS) when a batch of
    `records` (Lambda's stream records, in order) ran out of retries: where the batch was,
    never what it held."""
    created = [r["dynamodb"].get("ApproximateCreationDateTime", 0) for r in records]
    return {
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": function_arn,
            "condition": "RetryAttemptsExhausted",
            "approximateInvokeCount": attempts,
        },
        "responseContext": {
            "statusCode": 200,
            "executedVersion": "$LATEST",
            "functionError": function_error,
        },
        "version": "1.0",
        "timestamp": datetime.now(UTC).isoformat(),
        "DDBStreamBatchInfo": {
            "shardId": shard_id,
            "startSequenceNumber": records[0]["dynamodb"]["SequenceNumber"],
            "endSequenceNumber": records[-1]["dynamodb"]["SequenceNumber"],
            "approximateArrivalOfFirstRecord": _iso_seconds(min(created)),
            "approximateArrivalOfLastRecord": _iso_seconds(max(created)),
            "batchSize": len(records),
            "streamArn": records[0].get("eventSourceARN"),
        },
    }


def _iso_seconds(value: Any) -> str:
    try:
        return datetime.fromtimestamp(float(value), UTC).isoformat()
    except (TypeError, ValueError):
        return str(value)


def stream_filters(template: dict[str, Any], function: str = "CompactorFunction") -> list[str]:
    """The FilterCriteria patterns of a function's DynamoDB stream event, as written."""
    events = template["Resources"][function]["Properties"]["Events"]
    for event in events.values():
        if event["Type"] == "DynamoDB":
            criteria = event["Properties"].get("FilterCriteria", {})
            return [f["Pattern"] for f in criteria.get("Filters", [])]
    return []


def passes_filters(record: dict[str, Any], patterns: list[str]) -> bool:
    """Lambda hands a record over if any filter pattern matches it (no patterns: all), by moto's
    EventBridge-style pattern matcher, the grammar Lambda's filters use. moto's own event source
    mappings apply no filter.

    A stream record's pattern may name nothing but its `dynamodb` key: "DynamoDB event source
    mappings only support filtering on the dynamodb key" (Lambda's guide, "Using event filtering
    with a DynamoDB event source"). One that names more (eventName, userIdentity) is refused
    here, rather than matched as no mapping on AWS is documented to match it."""
    from moto.events.models import EventPattern

    if not patterns:
        return True
    if record.get("eventSource", "aws:dynamodb") == "aws:dynamodb" and "dynamodb" in record:
        for pattern in patterns:
            if other := sorted(set(json.loads(pattern)) - {"dynamodb"}):
                raise ValueError(
                    f"a DynamoDB stream filter names {other}: DynamoDB event source mappings "
                    "only support filtering on the dynamodb key"
                )
    # moto types the record as an EventBridge event's shape; a stream record is matched alike
    return any(EventPattern.load(pattern).matches_event(record) for pattern in patterns)  # type: ignore[arg-type]


def retry_from(sequence: list[str], failed: Iterable[str]) -> int:
    """Where a failed stream batch resumes: Lambda retries from the lowest failed sequence
    number, that record and every one after it (the index into `sequence`)."""
    return min(sequence.index(s) for s in failed)
