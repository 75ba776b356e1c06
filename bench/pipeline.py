"""Our consumer and compactor handlers, driven as AWS drives them, with every outbound call timed.

Each inbound event goes to the consumer handler in an SQS FIFO batch. After it, the memory
table's stream is read (devstack.streams.StreamTap), passed through template.yaml's own filter,
and whatever passes goes to the compactor handler, as the event source mapping would do.

The time each handler spends waiting on DynamoDB (botocore's before-call to after-call), on the
model and on whasp is kept apart from the rest, its own code: on AWS the waiting is set by those
services' latency, not by this machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import harness

from devstack.lambda_harness import stream_filters
from devstack.resources import load_template
from devstack.streams import StreamTap


class Clock:
    """Seconds and calls spent waiting on one dependency."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started
                self.calls += 1

        return timed

    def watch_boto3(self, client: Any) -> Clock:
        """Time the client's API calls (botocore's before-call to after-call)."""

        def start(context: dict, **_: Any) -> None:
            context["bench_clock"] = time.perf_counter()

        def stop(context: dict, **_: Any) -> None:
            self.seconds += time.perf_counter() - context.get("bench_clock", time.perf_counter())
            self.calls += 1

        client.meta.events.register("before-call", start)
        client.meta.events.register("after-call", stop)
        return self


@dataclass
class Invocation:
    seconds: float  # the handler's wall time
    waits: dict[str, tuple[float, int]]  # dependency -> (seconds, calls)

    @property
    def own_seconds(self) -> float:
        return self.seconds - sum(s for s, _ in self.waits.values())


@dataclass
class Fold:
    summary: str
    facts: list[str]
    turns: list[Any]
    request: dict[str, Any] | None = None
    output_text: str = ""


@dataclass
class Pipeline:
    stack: harness.Stack
    prefix: str = "pl"
    turns: list[Invocation] = field(default_factory=list)
    compactions: list[Invocation] = field(default_factory=list)
    folds: list[Fold] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # settings over the stack's, for both

    def __post_init__(self) -> None:
        stack = self.stack
        self.resources = stack.resources(self.prefix)
        env = self.env
        self.consumer = harness.load_function(
            "consumer", {**stack.consumer_env(self.resources), **env}
        )
        self.compactor = harness.load_function(
            "compactor", {**stack.compactor_env(self.resources), **env}
        )
        for name in env:  # read at import: the next benchmark starts from the stack's own
            os.environ.pop(name, None)
        self.tap = StreamTap(self.resources.stream_arn, stream_filters(load_template()))
        self.tap.skip_to_end()
        self.context = harness.LambdaContext()
        self.consumer_logs = harness.LogSink()
        self.compactor_logs = harness.LogSink()

        agent = self.consumer.consumer.agent
        self.consumer_clocks = {"dynamodb": Clock(), "model": Clock(), "whasp": Clock()}
        self.consumer_clocks["dynamodb"].watch_boto3(agent.store._client)
        agent.model.reply = self.consumer_clocks["model"].wrap(agent.model.reply)
        agent.provider.send_text = self.consumer_clocks["whasp"].wrap(agent.provider.send_text)

        compactor = self.compactor.compactor
        self.compactor_clocks = {"dynamodb": Clock(), "model": Clock()}
        self.compactor_clocks["dynamodb"].watch_boto3(compactor.store._client)
        compactor.model.fold = self.compactor_clocks["model"].wrap(self._recording(compactor))

    @property
    def store(self) -> Any:
        return self.consumer.consumer.agent.store

    def _recording(self, compactor: Any) -> Callable[..., Any]:
        original = compactor.model.fold

        def fold(*, summary: str, facts: list[Any], turns: list[Any], **more: Any) -> Any:
            record = Fold(summary=summary, facts=[f.text for f in facts], turns=list(turns))
            seen = len(self.stack.openai.requests)
            folded = original(summary=summary, facts=facts, turns=turns, **more)
            calls = [r for r in self.stack.openai.requests[seen:] if r["path"] == "/v1/responses"]
            record.request = calls[-1]["json"] if calls else None
            record.output_text = folded.summary + "\n" + "\n".join(folded.facts)
            self.folds.append(record)
            return folded

        return fold

    def turn(self, event: dict[str, Any]) -> Invocation:
        """One inbound event through the consumer, then any compaction the stream fires."""
        invocation = self._invoke(
            self.consumer.handler,
            harness.sqs_batch(event),
            self.consumer_clocks,
            self.consumer_logs,
        )
        self.turns.append(invocation)
        self.compact()
        return invocation

    def tidy(self, pk: str) -> int:
        """Delete the ledger entries of answered events, outside any measurement.

        A turn never reads them (its Query starts at FACT#, after EVT#), so DynamoDB's cost is
        the same with or without them; but moto sorts the whole table for every Query and
        deep-copies it for every transaction, so a long run would slow down with them. On AWS
        their TTL removes them after LEDGER_TTL_DAYS."""
        import boto3
        from boto3.dynamodb.conditions import Attr, Key

        table = boto3.resource("dynamodb").Table(self.resources.table_name)
        answered = table.query(
            KeyConditionExpression=Key("pk").eq(pk) & Key("sk").begins_with("EVT#"),
            FilterExpression=Attr("status").eq("sent"),
            ProjectionExpression="pk, sk",
        )["Items"]
        with table.batch_writer() as batch:
            for key in answered:
                batch.delete_item(Key=key)
        self.tap.poll()  # read past the deletions (they never match the filter), then drop them
        harness.trim_stream(self.resources.table_name)
        return len(answered)

    def compact(self) -> None:
        records = self.tap.matching()
        harness.trim_stream(self.resources.table_name)  # all read: Lambda would have moved on
        if records:
            self.compactions.append(
                self._invoke(
                    self.compactor.handler,
                    {"Records": records},
                    self.compactor_clocks,
                    self.compactor_logs,
                )
            )

    def _invoke(
        self,
        handler: Callable[..., Any],
        event: dict[str, Any],
        clocks: dict[str, Clock],
        logs: harness.LogSink,
    ) -> Invocation:
        before = {name: (clock.seconds, clock.calls) for name, clock in clocks.items()}
        with harness.captured_logs(logs):
            started = time.perf_counter()
            failed = harness.retried(handler, event, self.context)
            elapsed = time.perf_counter() - started
        if failed:
            processor = getattr(
                getattr(handler, "__globals__", {}).get("processor"), "exceptions", []
            )
            causes = "; ".join(repr(info[1]) for info in processor or [])
            raise RuntimeError(f"{len(failed)} record(s) failed in a benchmark run: {causes}")
        waits = {
            name: (clock.seconds - before[name][0], clock.calls - before[name][1])
            for name, clock in clocks.items()
        }
        return Invocation(seconds=elapsed, waits=waits)
