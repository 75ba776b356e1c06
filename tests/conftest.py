"""Shared fixtures: moto's server over HTTP for AWS, resources built from template.yaml, and the
Lambda handlers loaded from functions/<name>/app.py exactly as the runtime loads them."""

from __future__ import annotations

import base64
import functools
import gc
import json
import os
import sys
import time
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devstack import events, lambda_harness
from devstack.aws import MotoServer, aws_env
from devstack.events import http_event, sqs_batch, sqs_record  # noqa: F401 (for the tests)
from devstack.resources import LocalResources, create_all, load_template
from memagent.memory.person import LOCAL_PERSON_KEY

ROOT = Path(__file__).resolve().parent.parent
TEST_SECRET = "whsec_" + base64.b64encode(b"memagent-test-only-secret-do-not-use").decode()
OTHER_SECRET = "whsec_" + base64.b64encode(b"a-different-secret-for-rotation").decode()
AGENT = events.AGENT  # the template's AgentId default
BUSINESS = "+14155550100"
MAYA = "+447700900123"

os.environ.update(
    {
        "POWERTOOLS_SERVICE_NAME": "whasp-agent",
        "POWERTOOLS_METRICS_NAMESPACE": "WhaspAgentTest",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_DEV": "false",
        # a local run: the webhook accepts the published TEST_SECRET (refused in AWS)
        "MEMAGENT_LOCAL_STACK": "1",
        # the documented local key of person keys (memagent.memory.person): AWS generates its own
        "PERSON_KEY": LOCAL_PERSON_KEY,
    }
)


# ------------------------------------------------------------------ xdist groups


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Make `--dist loadgroup` group again under pytest 9.2 (pytest-xdist issue #1386).

    xdist tells the scheduler a test's xdist_group by appending "@group" to the test's id in
    `item._nodeid`; pytest 9.2 reads ids from `item._id`, so the suffix is lost and every test is
    scheduled alone: a module's shared local stack, sam build or cfn-lint run then starts on each
    worker. Until an xdist release fixes it (pytest-xdist PR #1388), copy the suffixed id over."""
    if not getattr(config.option, "loadgroup", False):
        return  # not an xdist worker under --dist loadgroup
    try:
        from _pytest.nodeid import NodeId  # only pytest >= 9.2 has it: older ones need no help
    except ImportError:
        return

    for item in items:
        suffixed = getattr(item, "_nodeid", None)
        if isinstance(suffixed, str) and "@" in suffixed and item.nodeid != suffixed:
            item._id = NodeId.parse(suffixed)


_FREEZE_AFTER = {1, 10, 100}  # tests run: most of what tests load, they load on first use
_tests_run = 0
# Young collections every 50,000 allocations, not 700: most of a test's objects (requests,
# responses, parsed items) are freed by reference counting before one runs, and fewer reach
# the older generations whose passes cost more (the collector's CPU in a test: -30%)
gc.set_threshold(50_000, 20, 10)


def pytest_runtest_logfinish() -> None:
    """What the process has loaded by then (modules, botocore's service models, moto's
    backends: hundreds of thousands of objects, most made on first use) is left out of the
    garbage collector's full passes from then on, which walk only what tests make. A test's
    cold starts make and drop whole clients, so full passes come every few tests: walking
    everything loaded each time was about a tenth of the suite's CPU."""
    global _tests_run
    _tests_run += 1
    if _tests_run in _FREEZE_AFTER:
        gc.collect()
        gc.freeze()


# ------------------------------------------------------------------ no real waiting

# AWS's clock is not the test's: a retry schedule, a Retry-After or a poll is scaled or replaced
# by an event in tests, never slept through. Every time.sleep in this process (ours, boto3's,
# urllib3's, openai's) goes through this guard, and a test during which one asked for more than
# MAX_SLEEP_SECONDS fails, naming where. tests/test_no_long_sleeps.py checks the code that runs
# in child processes (the local stack's functions) by reading it.
MAX_SLEEP_SECONDS = 0.05
_real_sleep = time.sleep
_long_sleeps: list[tuple[float, str]] = []


def _guarded_sleep(seconds: float) -> None:
    if seconds > MAX_SLEEP_SECONDS:
        where = "".join(traceback.format_stack(limit=4)[:-1])
        _long_sleeps.append((seconds, where))
    _real_sleep(seconds)


time.sleep = _guarded_sleep


@pytest.fixture(autouse=True)
def aws_clock_kept() -> Iterator[None]:
    """AWS's clock (devstack.clock.SQS_CLOCK) is as it was before each test: one that lets a
    day pass, or runs the clock faster, leaves the next test in its worker on AWS time as it
    was. (A test of compaction retries left it 15 minutes ahead, and the life model after it,
    whose queue clock follows the functions', lost a message: only in that order.)"""
    from devstack.clock import SQS_CLOCK

    with SQS_CLOCK.kept():
        yield


# ------------------------------------------------------------------ no TLS here


# No test speaks TLS: moto and the stand-ins for OpenAI, whasp and Meta are plain HTTP on
# loopback. Yet every OpenAI client (made at each handler's import: one or more per test) builds
# an SSL context and loads the system's CA bundle into it, ~28 ms of CPU each time. One context,
# built on first use, serves them all in this process (each one a function runs in the local
# stack's environments still builds its own).
def _share_the_tls_context() -> None:
    import httpcore2  # the openai client's HTTP stack (layers/requirements.txt)

    httpcore2.default_ssl_context = functools.cache(httpcore2.default_ssl_context)


_share_the_tls_context()


@pytest.fixture(autouse=True)
def no_long_sleeps() -> Iterator[None]:
    seen = len(_long_sleeps)
    yield
    found = _long_sleeps[seen:]
    if found:
        seconds, where = max(found)
        pytest.fail(
            f"{len(found)} real sleep(s) over {MAX_SLEEP_SECONDS} s in this test, the longest "
            f"{seconds:.3g} s at:\n{where}",
            pytrace=False,
        )


@pytest.fixture(autouse=True)
def cold_starts_freed() -> Iterator[None]:
    """What a test's cold starts left in process-wide lists is dropped when it ends (each
    load_function's module leaves sys.modules then too): SnapStart's hooks and the stack
    budget's per-table cache hold the functions' clients, and a worker that kept every test's
    held millions of objects, each of the garbage collector's full passes walking them all. In
    Lambda an environment cold-starts once, so these hold one of each there."""
    import snapshot_restore_py as snapstart

    from memagent.memory import budget

    hooks = snapstart._before_snapshot_registry, snapstart._after_restore_registry
    kept = [len(hook) for hook in hooks]
    yield
    for hook, count in zip(hooks, kept, strict=True):
        del hook[count:]
    budget._stacks.clear()


@pytest.fixture(autouse=True)
def iam_sufficient(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every local stack a test starts checks each AWS call against the function's role
    (devstack.iam): a call its role would be refused in AWS fails the test, naming the function,
    the action and the resource, unless the test expects refusals (`iam_refusals_expected`)."""
    from devstack import stack

    yield
    refused = stack.unread_refusals()
    if refused and request.node.get_closest_marker("iam_refusals_expected") is None:
        lines = sorted(
            {f"{r['function']} ({r['role']}): {r['action']} on {r['resource']}" for r in refused}
        )
        pytest.fail(
            "AWS would refuse these calls (the role does not grant them):\n  " + "\n  ".join(lines),
            pytrace=False,
        )


@pytest.fixture
def aws_retry_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """botocore's pauses between retries, recorded instead of waited: a test of an unreachable
    service sees the client retry (and how long AWS would wait) without spending the seconds."""
    import types

    import botocore.endpoint

    pauses: list[float] = []
    clock = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if n[0] != "_"})
    clock.sleep = pauses.append
    monkeypatch.setattr(botocore.endpoint, "time", clock)
    return pauses


@pytest.fixture(scope="session")
def moto_server() -> Iterator[MotoServer]:
    from devstack import moto_fixes

    moto_fixes.apply()  # moto's own concurrency and ordering gaps (see the module)
    with MotoServer() as server:
        previous = {key: os.environ.get(key) for key in aws_env(server.url)}
        os.environ.update(aws_env(server.url))
        os.environ.pop("AWS_PROFILE", None)
        yield server
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@functools.cache
def _template() -> dict[str, Any]:
    """template.yaml, parsed once, for reading only (load_template gives a copy to change: a deep
    copy per test costs ~10 ms)."""
    return load_template()


@pytest.fixture
def resources(moto_server: MotoServer) -> Iterator[LocalResources]:
    """A fresh table and fresh queues per test, created from template.yaml, and dropped from
    moto's memory when the test ends."""
    made = create_all(f"t{uuid.uuid4().hex[:10]}", _template(), sqs=moto_server.queue_maker())
    yield made
    moto_server.forget(made)


def load_function(name: str, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import functions/<name>/app.py as a fresh module (a cold start) with `env` set."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    module = lambda_harness.import_function(lambda_harness.function_code(name))
    # out of sys.modules when the test ends, so its clients and their models are freed: a worker
    # that kept every test's cold start held millions of objects, and each full collection of
    # the garbage collector walked them all
    del sys.modules[module.__name__]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


@pytest.fixture
def lambda_context() -> lambda_harness.LambdaContext:
    return lambda_harness.LambdaContext()


def signed_headers(
    body: bytes, event_id: str, *, secret: str = TEST_SECRET, timestamp: int | None = None
) -> dict[str, str]:
    return events.signed_headers(body, event_id, secret=secret, timestamp=timestamp)


def whasp_message(
    text: str = "I start the new job on Monday!",
    *,
    chat: str = MAYA,
    created_at: str = "2026-11-29T09:30:00Z",
    **kwargs: Any,
) -> dict[str, Any]:
    return events.whasp_message(text, chat=chat, created_at=created_at, **kwargs)


def to_bytes(event: dict[str, Any]) -> bytes:
    return json.dumps(event).encode()


@pytest.fixture(scope="session")
def openai_server() -> Iterator[Any]:
    from devstack.fake_openai import FakeOpenAI

    with FakeOpenAI() as server:
        yield server


@pytest.fixture(scope="session")
def whasp_server() -> Iterator[Any]:
    from devstack.fake_whasp import FakeWhasp

    with FakeWhasp(api_key="whasp-test-key") as server:
        yield server


@pytest.fixture
def openai(openai_server) -> Any:
    from devstack.fake_openai import offline_model, offline_transcriber

    openai_server.reset()
    openai_server.responder = offline_model
    openai_server.transcriber = offline_transcriber
    return openai_server


def reset_for_each_test(server_fixture: str, *, name: str) -> Any:
    """A fixture `name`: the session's `server_fixture` (a stand-in server), reset before each
    test so that it sees only its own requests."""

    @pytest.fixture(name=name)
    def fresh(request: pytest.FixtureRequest) -> Any:
        server = request.getfixturevalue(server_fixture)
        server.reset()
        return server

    return fresh


whasp = reset_for_each_test("whasp_server", name="whasp")


def dynamodb_table(name: str) -> Any:
    """boto3's Table `name`, through which a test reads or changes what the functions stored:
    one resource per process and endpoint (making one is about 3 ms of CPU, and the suite's
    helpers ask for one on every read)."""
    return _dynamodb(os.environ["AWS_ENDPOINT_URL"], os.environ["AWS_ACCESS_KEY_ID"]).Table(name)


@functools.cache
def _dynamodb(_endpoint: str, _key_id: str) -> Any:
    import boto3

    return boto3.resource("dynamodb")


@functools.cache
def _s3(_endpoint: str) -> Any:
    """The tests' own S3 client, one per moto server (an S3 client takes ~12 ms to make)."""
    import boto3

    return boto3.client("s3")


@pytest.fixture
def consumer_env(resources, openai, whasp) -> dict[str, str]:
    media_bucket = f"{resources.table_name}-media"  # the template's MediaBucket
    _s3(os.environ["AWS_ENDPOINT_URL"]).create_bucket(Bucket=media_bucket)
    return {
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "WHASP_API_URL": whasp.url,
        "WHASP_API_KEY": "whasp-test-key",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_MODEL": "gpt-6-luna",
        "OPENAI_BASE_URL": f"{openai.url}/v1",
        "SYSTEM_PROMPT": "You are Coach, a warm running coach.",
        "PARKING_QUEUE_URL": resources.queue_urls["EventDeadLetterQueue"],
        "QUEUE_URL": resources.queue_urls["EventQueue"],  # failed records' retry backoff
        "MEDIA_BUCKET": media_bucket,  # voice notes and photos kept between attempts
        # the sample events carry fixed dates; a long dedupe window keeps them "recent"
        "LEDGER_TTL_DAYS": "3650",
    }


@pytest.fixture
def consumer(consumer_env, monkeypatch) -> Any:
    return load_function("consumer", consumer_env, monkeypatch)


@pytest.fixture
def compactor_env(resources, openai) -> dict[str, str]:
    return {
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_MODEL": "gpt-6-luna",
        "OPENAI_BASE_URL": f"{openai.url}/v1",
        # what failed on the stream is retried from here (memagent.compaction.retry)
        "FAILURE_QUEUE_URL": resources.queue_urls["CompactionFailureQueue"],
    }


@pytest.fixture
def compactor(compactor_env, monkeypatch) -> Any:
    return load_function("compactor", compactor_env, monkeypatch)


@pytest.fixture
def store(compactor) -> Any:
    """The compactor's memory store (the tests' way to seed and read memory)."""
    return compactor.compactor.store


@pytest.fixture
def bus(resources) -> dict[str, str]:
    """The operator event bus, with a rule that copies every event to a queue we read
    (tests.integration.test_operator.notifications)."""
    import boto3

    events, sqs = boto3.client("events"), boto3.client("sqs")
    name = f"{resources.table_name}-operator"
    events.create_event_bus(Name=name)
    queue = sqs.create_queue(QueueName=f"{resources.table_name}-seen")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]
    events.put_rule(
        Name="all", EventBusName=name, EventPattern=json.dumps({"source": ["memagent"]})
    )
    events.put_targets(Rule="all", EventBusName=name, Targets=[{"Id": "q", "Arn": arn["QueueArn"]}])
    return {"name": name, "queue": queue}


@pytest.fixture
def tap(resources) -> Any:
    """The memory table's stream from now on, as the compactor's event source mapping reads it:
    in Lambda's record shape, through the template's filter (`tap.matching()`)."""
    from devstack.lambda_harness import stream_filters
    from devstack.streams import StreamTap

    tap = StreamTap(resources.stream_arn, stream_filters(_template()))
    tap.skip_to_end()
    return tap


@pytest.fixture
def ttl(resources) -> Any:
    """DynamoDB's TTL process on the test's table (devstack.ttl), on a clock of its own that
    starts at real time (`ttl.clock.advance(seconds)`); an expired item stays, readable, for
    the lag a test sets (`ttl.lag`, hours by default), then `ttl.sweep()` deletes it, with the
    stream record AWS writes."""
    from devstack.clock import ScaledClock
    from devstack.ttl import TimeToLive

    return TimeToLive(clock=ScaledClock(), table=resources.table_name)


def seed_turns(
    store: Any,
    phone: str,
    texts: list[str],
    *,
    start: Any = None,
    threshold: int = 40,
    agent: str = AGENT,
) -> None:
    """Store turns (user, agent, user, ...) through the memory store's own writes, raising the
    compaction flag as the consumer does. Faster than whole turns when a test needs history.

    The state is read once: each write is conditional on the last_seq before it, so a write
    that raced anything would fail here rather than go unnoticed."""
    from dataclasses import replace
    from datetime import UTC, datetime, timedelta

    from memagent.memory.person import person_key
    from memagent.memory.types import Turn

    start = start or datetime(2026, 11, 1, 8, tzinfo=UTC)
    pk = person_key(agent, phone)
    memory = store.load(pk)
    state, seq = memory.state, memory.next_seq - 1
    for index, text in enumerate(texts):
        user = index % 2 == 0
        seq += 1  # a reply takes the slot its message reserved
        event_id = f"evt_seed_{seq if user else seq - 1}_{pk[-6:]}"
        turn = Turn(
            seq=seq,
            role="user" if user else "assistant",
            text=text,
            at=start + timedelta(minutes=seq),
            number=BUSINESS,
            event_id=event_id if user else None,
        )
        if user:
            reply_follows = index + 1 < len(texts)
            newest = seq + 1 if reply_follows else seq
            due = newest - state.marker >= threshold
            store.remember_inbound(
                pk,
                previous=state,
                turn=turn,
                event_time=turn.at,
                compact=due,
                ledger_ttl=timedelta(days=30),
                reserve_reply=reply_follows,
            )
            state = replace(state, last_seq=newest, compaction_due=due, awaiting=(event_id,))
        else:
            store.remember_reply(pk, event_id=event_id, turn=turn, event_time=turn.at)
            state = replace(state, awaiting=())  # what a reply follows no longer awaits (load)
