"""The local stack: the real handlers, unchanged, behind moto, a local whasp and a local model,
driven over HTTP as whasp drives the deployed webhook (devstack.stack, docs/local-stack.md)."""

from __future__ import annotations

import copy
import io
import json
import os
import random
import re
import subprocess
import sys
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from devstack.console import Console
from devstack.fake_openai import FakeOpenAI
from devstack.resources import create_all, load_template
from devstack.stack import DevStack
from memagent.store.memory_store import ledger_sk

ROOT = Path(__file__).resolve().parents[2]
PEOPLE = 20
MESSAGES = 60
ECHO = re.compile(r'You said: "(.*)"$')


def phone(index: int) -> str:
    return f"+4477009{index:05d}"


def stand_in_responder(calls: list[dict[str, Any]]):
    """An OpenAI-compatible server's answers: a fold for compaction, a short reply otherwise;
    answering a message containing "poison" makes the server fail, as a broken model would."""
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> str:
        with lock:
            calls.append(request)
        items = request.get("input") if isinstance(request.get("input"), list) else []
        said = [m for m in items if m.get("role") == "user"]
        if "poison" in json.dumps(said[-1:]):  # the message answered (the volatile tail follows)
            raise RuntimeError("the model cannot answer this")
        if ((request.get("text") or {}).get("format") or {}).get("type") == "json_schema":
            return json.dumps({"summary": "They chatted about their week.", "facts": ["Likes tea"]})
        return "stand-in reply"

    return respond


# ------------------------------------------------------------------ the whole flow, concurrently


@pytest.mark.parametrize(
    ("people", "messages", "compaction"),
    [
        # more people than consumer environments, each compacted while still writing
        # (threshold 6 / keep 2, 16 turns each: folds race the next messages, twice or more),
        # in a fifth of the messages the default compaction needs to fold once. In the slow
        # tier: make test checks the same through the handlers, without the stack's processes
        # (test_consumer's people in their order, test_compactor's interleaved writes, folds
        # and crashes)
        pytest.param(4, 8, (6, 2), id="4x8", marks=pytest.mark.slow),
        # the full run with the default compaction (40 / keep 20), in the slow tier
        # (make test-slow, run by CI): about 4 minutes on 2 cores
        pytest.param(PEOPLE, MESSAGES, (None, None), id="20x60", marks=pytest.mark.slow),
    ],
)
def test_many_people_many_messages_each_with_duplicates(tmp_path, people, messages, compaction):
    # given the local stack with the offline model and that compaction (threshold / keep)
    # One reply per message (COALESCE_BURSTS=false): this run checks that each message is
    # answered once and in order; a burst answered once is checked in tests/integration.
    threshold, keep = compaction
    settings = {"COALESCE_BURSTS": "false"}
    if threshold is not None:  # else the functions' own defaults (40 / keep 20)
        settings |= {"COMPACT_THRESHOLD": str(threshold), "COMPACT_KEEP": str(keep)}
    with DevStack(
        env={},
        extra_env=settings,
        level="quiet",
        log_path=tmp_path / "stack.log",
    ) as stack:
        said = {
            phone(i): [f"message {n} from person {i}" for n in range(messages)]
            for i in range(people)
        }
        events: dict[str, list[dict[str, Any]]] = {p: [] for p in said}
        statuses: list[int] = []
        chance = random.Random(6)

        # when they all write their messages, all at once, and whasp delivers 10% twice
        def person(number: str) -> None:
            for text in said[number]:
                event = stack.message_event(number, text)
                events[number].append(event)
                statuses.append(stack.post(event).status)
                if chance.random() < 0.1:
                    statuses.append(stack.post(event).status)

        with ThreadPoolExecutor(people) as pool:
            list(pool.map(person, said))
        assert stack.wait_idle(timeout=900), "the pipeline did not settle within 15 minutes"

        # then every delivery was accepted
        assert statuses and set(statuses) == {200}
        assert len(statuses) > people * messages
        table = stack.table()
        for number, texts in said.items():
            # every message answered exactly once, in the order it was written
            echoed = [ECHO.search(text).group(1) for text in stack.whasp.texts_to(number)]
            assert echoed == texts, number
            # stored once each, in order: message n is turn 2n+1, its reply turn 2n+2
            view = stack.view(number)
            assert view.last_seq == 2 * messages
            for n, event in enumerate(events[number]):
                entry = table.get_item(
                    Key={"pk": view.pk, "sk": ledger_sk(event["id"])}, ConsistentRead=True
                )["Item"]
                assert (entry["status"], int(entry["user_seq"])) == ("sent", 2 * n + 1)
            # compaction ran: the marker moved and only turns after it are held raw
            assert view.marker > 0 and view.summary
            assert [seq for seq, _, _ in view.turns] == list(
                range(view.marker + 1, 2 * messages + 1)
            )
            users = [text for _, role, text in view.turns if role == "user"]
            assert users == texts[len(texts) - len(users) :]
        # nothing was parked, nothing handed out twice at once, no compaction given up
        assert stack.queue_depth(stack.dead_letter_queue()) == 0
        assert stack.queue_depth("CompactionFailureQueue") == 0
        assert stack.queue_delivery.stats.group_conflicts == 0
        assert stack.stream_delivery.stats.sent_to_failure_queue == 0


# ------------------------------------------------------------------ any OpenAI-compatible server


@pytest.fixture(scope="module")
def stand_in():
    calls: list[dict[str, Any]] = []
    with FakeOpenAI(responder=stand_in_responder(calls)) as server:
        server.model_calls = calls
        yield server


PARK_AFTER = 5  # receives before the stand-in stack's queue parks a message
# The stand-in stack's other changes to template.yaml, which the stack must create as written
# (test_changing_the_template_changes_what_the_stack_creates). The consumer still has more
# than RECORD_TIME_BUDGET_SECONDS (300) to run, or it would defer every record, and the queue
# still hides a message for six times that (AWS's advice for SQS event sources).
CONSUMER_TIMEOUT = 360
VISIBILITY_TIMEOUT = 6 * CONSUMER_TIMEOUT


@pytest.fixture(scope="module")
def stand_in_stack(stand_in, tmp_path_factory):
    env = {"OPENAI_BASE_URL": f"{stand_in.url}/v1", "OPENAI_MODEL": "llama3.2"}
    # The redrive works the same after 5 receives as after the template's 100 (sized for a
    # 12-hour outage); each receive is a consumer invocation, so 5 keeps this test at seconds.
    template = load_template()
    queue = template["Resources"]["EventQueue"]["Properties"]
    queue["RedrivePolicy"]["maxReceiveCount"] = PARK_AFTER
    queue["VisibilityTimeout"] = VISIBILITY_TIMEOUT
    template["Resources"]["ConsumerFunction"]["Properties"]["Timeout"] = CONSUMER_TIMEOUT
    with DevStack(
        env=env,
        template=template,
        # quiet: only warnings, such as a failure named (test_a_message_failing_every_time...)
        console=Console(io.StringIO(), level="quiet"),
        # the poison message comes back after the consumer's backoff (10, 20, 40, 80, 160 s of
        # AWS time, ~5 s at 60x) until its sixth receive parks it: the queue's clock jumps to
        # each return when nothing else is left to do, instead of the test waiting for it
        idle_jump=True,
        # compaction early; the tests below count one reply per message
        extra_env={"OPENAI_MAX_RETRIES": "0", "COALESCE_BURSTS": "false"}
        | {"COMPACT_THRESHOLD": "6", "COMPACT_KEEP": "2"},
        log_path=tmp_path_factory.mktemp("stand-in") / "stack.log",
    ) as stack:
        yield stack


@pytest.mark.xdist_group("stand-in-stack")  # one stack for the module: one worker
def test_openai_base_url_points_the_stack_at_that_server(stand_in_stack, stand_in):
    # given OPENAI_BASE_URL names an OpenAI-compatible server (no key)
    stack = stand_in_stack
    assert stack.model.kind == "compatible" and stack.openai is None
    # when a person writes enough to be compacted
    for n in range(4):
        stack.send_message("+447700900501", f"hello {n}")
    assert stack.wait_idle(timeout=120)
    # then that server answered every reply and the fold, each call with store: false
    assert stack.whasp.texts_to("+447700900501") == ["stand-in reply"] * 4
    calls = stand_in.model_calls
    folds = [
        c for c in calls if (c.get("text") or {}).get("format", {}).get("type") == "json_schema"
    ]
    assert len(calls) > len(folds) >= 1
    assert all(call["store"] is False for call in calls)
    assert {call["model"] for call in calls} == {"llama3.2"}
    assert stack.view("+447700900501").facts == ["Likes tea"]


@pytest.mark.xdist_group("stand-in-stack")
def test_a_message_failing_every_time_is_parked_after_max_receives(stand_in_stack):
    # given a person whose message the model can never answer, and someone else writing too
    stack = stand_in_stack
    dlq = stack.dead_letter_queue()
    before = stack.queue_depth(dlq)
    stack.send_message("+447700900502", "poison")
    stack.send_message("+447700900503", "hello")
    # when the queue has redelivered it maxReceiveCount times
    assert stack.wait_idle(timeout=180)
    # then it waits on the dead-letter queue, while the other person was answered
    assert stack.queue_depth(dlq) == before + 1
    messages = boto3.client("sqs").receive_message(
        QueueUrl=stack.resources.queue_urls[dlq], AttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    parked = [m for m in messages if "poison" in m["Body"]]
    assert parked and int(parked[0]["Attributes"]["ApproximateReceiveCount"]) > PARK_AFTER
    assert stack.whasp.texts_to("+447700900502") == []
    assert stack.whasp.texts_to("+447700900503") == ["stand-in reply"]
    # and every retry named the model, its status and the error's class: in the progress line
    # (what `make chat` prints) and in the function's log (local/stack.log), never the text
    shown = stack.console.stream.getvalue()
    assert shown.count("to retry") >= PARK_AFTER
    assert shown.count("model: HTTP 500 InternalServerError") >= PARK_AFTER
    logged = [
        json.loads(line) for line in stack.log_path.read_text().splitlines() if line[:1] == "{"
    ]
    named = [line for line in logged if line.get("dependency")]
    assert len(named) >= PARK_AFTER
    assert {(n["dependency"], n["status"], n["error"]) for n in named} == {
        ("model", 500, "InternalServerError")
    }
    assert all(n["function_name"].endswith("ConsumerFunction") for n in named)


# ------------------------------------------------------------------ template.yaml is the source


@pytest.mark.xdist_group("stand-in-stack")
def test_changing_the_template_changes_what_the_stack_creates(stand_in_stack):
    # given the stand-in stack, started from a copy of template.yaml with another redrive
    # count, visibility timeout and consumer timeout (stand_in_stack)
    stack = stand_in_stack
    changed = (PARK_AFTER, VISIBILITY_TIMEOUT, CONSUMER_TIMEOUT)
    # (each one unlike template.yaml's, so none can have come from the file itself)
    assert all(ours != written for ours, written in zip(changed, _as_written(), strict=True))
    # when we read what it created
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=stack.resources.queue_urls["EventQueue"], AttributeNames=["All"]
    )["Attributes"]
    # then the queue and the function are what the copy says
    assert attributes["VisibilityTimeout"] == str(VISIBILITY_TIMEOUT)
    assert json.loads(attributes["RedrivePolicy"])["maxReceiveCount"] == PARK_AFTER
    assert attributes["FifoQueue"] == "true"
    assert stack.functions["ConsumerFunction"].timeout == CONSUMER_TIMEOUT


def _as_written() -> tuple[int, int, int]:
    """template.yaml's redrive count, visibility timeout and consumer timeout."""
    resources = load_template()["Resources"]
    queue = resources["EventQueue"]["Properties"]
    return (
        int(queue["RedrivePolicy"]["maxReceiveCount"]),
        int(queue["VisibilityTimeout"]),
        int(resources["ConsumerFunction"]["Properties"]["Timeout"]),
    )


@pytest.mark.xdist_group("stand-in-stack")
def test_changing_the_table_in_the_template_changes_the_table_created(stand_in_stack):
    # (the stand-in stack's moto: the session's moto_server fixture would change the AWS
    # environment under the module's stack, which puts back its own when it stops)
    # given a copy of template.yaml with other key names
    template = copy.deepcopy(load_template())
    table = next(r for r in template["Resources"].values() if r["Type"] == "AWS::DynamoDB::Table")[
        "Properties"
    ]
    renamed = {"pk": "person", "sk": "item"}
    for field in table["AttributeDefinitions"] + table["KeySchema"]:
        if "AttributeName" in field:  # not an !If (the console's index keys: kept as they are)
            field["AttributeName"] = renamed.get(field["AttributeName"], field["AttributeName"])
    # when the stack's resources are created from it (DevStack.start creates them this way, from
    # its template: the test above shows the queue following its copy)
    created = create_all(f"t{uuid.uuid4().hex[:10]}", template)
    # then the table is what the copy says
    described = boto3.client("dynamodb").describe_table(TableName=created.table_name)["Table"]
    assert {k["AttributeName"]: k["KeyType"] for k in described["KeySchema"]} == {
        "person": "HASH",
        "item": "RANGE",
    }
    assert described["StreamSpecification"]["StreamViewType"] == "NEW_IMAGE"


# ------------------------------------------------------------------ make demo


def run_demo(
    tmp_path: Path, *, without: tuple[str, ...], **env: str
) -> subprocess.CompletedProcess[str]:
    """`make demo` in a fresh process, with none of our variables starting with `without`."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(without)}
    return subprocess.run(  # noqa: S603 (our interpreter, our module)
        [sys.executable, "-m", "devstack.demo", "--log", str(tmp_path / "demo.log")],
        cwd=ROOT,
        env={**inherited, "NO_COLOR": "1", **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.mark.slow
def test_the_demo_runs_end_to_end_offline_and_exits_0(tmp_path):
    # given no key and no model server: a fresh process, as `make demo` starts it
    # when the demo runs
    result = run_demo(tmp_path, without=("OPENAI_", "AWS_", "PERSON_KEY"))
    # then it passed every check, showing the compaction and the offline label
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "OFFLINE STAND-IN" in result.stdout
    # 40 turns pending: the 20 oldest fold, or 19 when the compactor runs while the model
    # writes the 20th reply (its slot is reserved, so it is counted as pending but not yet read)
    folded = re.search(r"folded turns 1-(\d+) into the summary", result.stdout)
    assert folded is not None and int(folded.group(1)) in (19, 20), result.stdout[-3000:]
    assert "checks passed" in result.stdout and "FAIL" not in result.stdout
    # the follow-up scene: asked for tomorrow at 9, arrived once when the clock got there
    assert "the reminder arrived, once" in result.stdout


@pytest.mark.slow
def test_the_meta_demo_on_bedrock_runs_end_to_end_offline_and_exits_0(tmp_path):
    # given no key, no model server and no network: `make demo PROVIDER=meta` in a fresh process
    # and with ModelProvider=bedrock (make demo PROVIDER=meta MODEL_PROVIDER=bedrock)
    result = run_demo(
        tmp_path,
        without=("OPENAI_", "AWS_", "META_", "PERSON_KEY"),
        PROVIDER="meta",
        MODEL_PROVIDER="bedrock",
    )
    # then the same story passes through Meta payloads and the Graph API stand-in, identity
    # changes included, and erasure by BSUID leaves only marks; every model call went to the
    # stand-in's bedrock-runtime path, which takes nothing but the roles' bearer tokens
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "ModelProvider bedrock" in result.stdout
    assert "Graph API stand-in" in result.stdout
    assert "the reply goes to her new BSUID" in result.stdout
    # a recycled number: its new owner is a stranger, Maya from her new number is herself
    assert "the stranger's context holds nothing of Maya's" in result.stdout
    assert "her new number reaches her" in result.stdout
    assert "(one per identifier she used)" in result.stdout
    assert "checks passed" in result.stdout and "FAIL" not in result.stdout


# ------------------------------------------------------------------ retention on AWS's clock


def test_the_local_stacks_ttl_deletes_an_expired_person_after_its_lag(tmp_path):
    import time
    from datetime import timedelta

    from devstack.clock import SQS_CLOCK

    # given the local stack, whose DynamoDB TTL deletes an expired item two days late (AWS time)
    retention = {"INACTIVE_RETENTION_DAYS": "10"}
    log = tmp_path / "stack.log"
    with DevStack(
        env={}, ttl_lag=2 * 86400, extra_env=retention, level="quiet", log_path=log
    ) as stack:
        # and a person who wrote 10 days and an hour ago (10 days' retention): expired an hour
        # ago, her state still there
        person = "+447700900777"
        then = stack.now() - timedelta(days=10, hours=1)
        stack.send_message(person, "my HIV test came back positive", at=then)
        assert stack.wait_idle(timeout=60)
        assert stack.view(person).last_seq == 2
        # when AWS's clock passes the lag
        SQS_CLOCK.advance(2 * 86400)
        # then the TTL deletes her state, with the record that fires the compactor, which
        # forgets her: only the content-free mark is left
        deadline = time.monotonic() + 30
        while "HIV" in json.dumps(stack.scan(), default=str) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "HIV" not in json.dumps(stack.scan(), default=str)
        assert stack.stream_delivery.stats.sent_to_failure_queue == 0
        rows = [r for r in stack.scan() if r["pk"] == stack.person_key(person)]
        assert [set(r) - {"pk", "sk"} for r in rows] == [{"erased_at"}]
