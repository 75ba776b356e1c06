"""Figure 7: hardening figures, each counted through the handlers as AWS invokes them.

1. Webhook fuzzing: `examples` generated requests (hypothesis, derandomised so every run sends the
   same ones): arbitrary headers and bodies, correctly signed requests with arbitrary bodies, and
   signed requests spoiled afterwards (body, id, timestamp or signature changed, or another
   secret). Counted: 5xx answers (must be 0) and SendMessage calls made for a request that was
   not correctly and freshly signed (must be 0). The baseline webhook (bench/baseline_webhook.py)
   gets every request too; an exception there counts as the 500 API Gateway would answer.
2. Crash injection: one inbound message per cell of (step x fault). Steps: after remember_inbound,
   after the model's reply, after remember_reply, after the send, after finish_event. Faults: the
   process dies right after the step (an exception), or the step's dependency fails (DynamoDB
   answers InternalServerError; the model or whasp answers 5xx on every retry). The queue then
   redelivers until the record succeeds (at most maxReceiveCount times, from template.yaml).
   Counted: replies sent per inbound message (must be 1), against the reference design.

The tests hold the checks that have no baseline to compare with: the crash matrix for bursts
(tests/integration/test_bursts.py, every step x fault x way of splitting the redelivery) and
duplicate deliveries (tests/integration/test_consumer.py: the same event twice in a batch and
redelivered later; tests/integration/test_webhook_sqs.py: a re-posted webhook deduplicated).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import boto3
import harness
from botocore.exceptions import ClientError
from webhook_bench import BENCH, drain

from devstack.resources import load_template, max_receive_count

# --------------------------------------------------------------------------- 1. fuzzing


def fuzz(stack: harness.Stack, *, examples: int) -> dict[str, Any]:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st

    resources = stack.resources("fz")
    webhook = harness.load_function("webhook", stack.webhook_env(resources))
    baseline = harness.load_handler(
        BENCH / "baseline_webhook.py",
        {"QUEUE_URL": resources.queue_urls["EventQueue"], "WEBHOOK_SECRET": harness.SECRET},
    )
    sqs = boto3.client("sqs")
    queue_url = resources.queue_urls["EventQueue"]
    sends = Counter()
    webhook.queue._sqs.meta.events.register(
        "after-call.sqs.SendMessage", lambda **_: sends.update(["ours"])
    )
    baseline.sqs.meta.events.register(
        "after-call.sqs.SendMessage", lambda **_: sends.update(["baseline"])
    )
    handlers = {"ours": webhook.handler, "baseline": baseline.handler}
    context = harness.LambdaContext()
    counts: Counter = Counter()
    statuses: dict[str, Counter] = {"ours": Counter(), "baseline": Counter()}

    text = st.text(max_size=80)
    header_names = st.sampled_from(
        ["webhook-id", "webhook-timestamp", "webhook-signature", "Webhook-Signature", "x-other"]
    )
    headers = st.dictionaries(
        header_names,
        st.one_of(text, st.from_regex(r"v1,[A-Za-z0-9+/=]{0,60}", fullmatch=True)),
        max_size=5,
    )
    raw_body = st.one_of(st.binary(max_size=400), text.map(str.encode))
    phone = st.one_of(st.from_regex(r"\+[1-9][0-9]{6,14}", fullmatch=True), text)
    envelope = st.fixed_dictionaries(
        {
            "id": st.one_of(st.from_regex(r"evt_[a-z0-9]{1,20}", fullmatch=True), text),
            "type": st.one_of(
                st.sampled_from(["message.received", "chat.opted_out", "number.replaced"]), text
            ),
            "created_at": st.just(harness.iso_now(5)),
            "data": st.one_of(
                st.fixed_dictionaries(
                    {
                        "number": phone,
                        "chat": phone,
                        "message": st.fixed_dictionaries(
                            {"id": text, "type": st.just("text"), "text": text}
                        ),
                    }
                ),
                st.dictionaries(text, text, max_size=3),
                text,
            ),
        }
    )
    json_body = st.one_of(envelope, st.lists(st.integers(), max_size=3)).map(
        lambda value: json.dumps(value).encode()
    )
    spoilers = st.sampled_from(["body", "id", "timestamp_old", "signature", "secret"])

    def call(request: dict[str, Any], signed: bool) -> None:
        counts["requests"] += 1
        for name, handler in handlers.items():
            before = sends[name]
            try:
                with harness.captured_logs(harness.LogSink()):
                    status = handler(request, context)["statusCode"]
            except Exception:  # an unhandled error: Lambda fails, API Gateway answers 500
                status = 500
            statuses[name][status] += 1
            counts[f"{name}_server_errors"] += status >= 500
            if sends[name] > before:
                counts[f"{name}_enqueued"] += 1
                counts[f"{name}_unsigned_enqueues"] += not signed
        if counts["requests"] % 50 == 0:
            drain(sqs, queue_url)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        kind=st.sampled_from(["arbitrary", "signed", "spoiled"]),
        headers=headers,
        raw=raw_body,
        body=st.one_of(json_body, raw_body),
        spoil=spoilers,
        base64_encoded=st.booleans(),
    )
    def one(kind, headers, raw, body, spoil, base64_encoded):
        counts[kind] += 1
        if kind == "arbitrary":
            try:
                request = harness.http_event(raw, headers, base64_encoded=base64_encoded)
            except UnicodeDecodeError:
                request = harness.http_event(raw, headers, base64_encoded=True)
            call(request, signed=False)
            return
        event_id = f"evt_fuzz_{counts['requests']}"
        signed = harness.signed_headers(body, event_id)
        if kind == "spoiled":
            if spoil == "body":
                body = body + b" "
            elif spoil == "id":
                signed["webhook-id"] = event_id + "x"
            elif spoil == "timestamp_old":
                signed["webhook-timestamp"] = str(int(signed["webhook-timestamp"]) - 301)
            elif spoil == "signature":
                signed["webhook-signature"] = signed["webhook-signature"][:-6] + "AAAAA="
            else:
                other = "whsec_" + "b3RoZXItc2VjcmV0LW5vdC1vdXJzLTEyMzQ1Njc4OTA="
                signed = harness.signed_headers(body, event_id, secret=other)
        try:
            request = harness.http_event(body, signed, base64_encoded=base64_encoded)
        except UnicodeDecodeError:
            request = harness.http_event(body, signed, base64_encoded=True)
        call(request, signed=kind == "signed")

    one()
    drain(sqs, queue_url)
    return {
        "examples": counts["requests"],
        "by_kind": {k: counts[k] for k in ("arbitrary", "signed", "spoiled")},
        **{
            name: {
                "statuses": dict(sorted(statuses[name].items())),
                "server_errors": counts[f"{name}_server_errors"],
                "enqueued": counts[f"{name}_enqueued"],
                "unsigned_enqueues": counts[f"{name}_unsigned_enqueues"],
            }
            for name in handlers
        },
    }


# --------------------------------------------------------------------------- 2. crash injection

STEPS = [
    ("remember_inbound", "store", "remember_inbound"),
    ("model reply", "model", "reply"),
    ("remember_reply", "store", "remember_reply"),
    ("send", "provider", "send_text"),
    ("finish_event", "store", "finish_event"),
]
FAULTS = ["crash after the step", "the step's dependency fails"]


class Crash(Exception):
    """The process dying: the record fails and the queue redelivers it."""


def _crash_after(target: Any, name: str, nth: int = 1) -> None:
    """The `nth` call of `target.name` from now on completes, then the process dies (once)."""
    original = getattr(target, name)
    calls = {"n": 0}

    def crashing(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        calls["n"] += 1
        if calls["n"] == nth:
            setattr(target, name, original)
            raise Crash(f"crash after {name}")
        return result

    setattr(target, name, crashing)


def _dynamodb_fails(client: Any, operation: str, nth: int) -> None:
    """The `nth` call of `operation` from now on fails as DynamoDB's 500 does, after botocore's
    own retries (so the caller sees one ClientError)."""
    seen = {"calls": 0, "armed": True}

    def fail(**_: Any) -> None:
        if not seen["armed"]:
            return
        seen["calls"] += 1
        if seen["calls"] == nth:
            seen["armed"] = False
            raise ClientError(
                {"Error": {"Code": "InternalServerError", "Message": "injected"}}, operation
            )

    client.meta.events.register(f"before-call.dynamodb.{operation}", fail)


def _dependency_fails(stack: harness.Stack, agent: Any, step: str) -> None:
    client = agent.store._client if agent is not None else None
    if step == "remember_inbound":
        _dynamodb_fails(client, "TransactWriteItems", 1)
    elif step == "remember_reply":
        _dynamodb_fails(client, "PutItem", 1)  # the reply goes alone into its reserved slot
    elif step == "finish_event":
        _dynamodb_fails(client, "UpdateItem", 1)
    elif step == "model reply":
        stack.openai.fail_next(3, status=500)  # the first call and the client's two retries
    elif step == "send":
        stack.whasp.fail_next(4, status=503)  # the first send and urllib3's three retries


def _fresh_consumer(stack: harness.Stack, prefix: str) -> Any:
    """The consumer on fresh resources named `prefix`, with the realistic model and clean
    stand-ins, for a crash matrix to break."""
    from conversation import realistic_model

    stack.openai.responder = realistic_model
    stack.openai.reset()
    stack.whasp.reset()
    return harness.load_function("consumer", stack.consumer_env(stack.resources(prefix)))


def crash_matrix(stack: harness.Stack) -> dict[str, Any]:
    consumer = _fresh_consumer(stack, "cr")
    agent = consumer.consumer.agent
    context = harness.LambdaContext()
    attempts_allowed = max_receive_count(load_template())
    cells = []
    for step_index, (step, target, method) in enumerate(STEPS):
        for fault_index, fault in enumerate(FAULTS):
            phone = f"+4477009{step_index}{fault_index}0001"
            event = harness.whasp_message(
                "Please answer exactly once.", chat=phone, created_at=harness.iso_now(5)
            )
            calls_before = _model_answers(stack)
            if fault_index == 0:
                _crash_after(getattr(agent, target), method)
            else:
                _dependency_fails(stack, agent, step)
            attempts, failed = 0, ["x"]
            with harness.captured_logs(harness.LogSink()):
                while failed and attempts < attempts_allowed:
                    attempts += 1
                    batch = harness.sqs_batch(event, receive_count=attempts)
                    failed = harness.retried(consumer.handler, batch, context)
                # and one more late redelivery after success: must change nothing
                harness.retried(
                    consumer.handler, harness.sqs_batch(event, receive_count=9), context
                )
            pk = _pk(phone)
            stored = [i["role"] for i in agent.store.everything(pk) if i["sk"].startswith("MSG#")]
            cells.append(
                {
                    "step": step,
                    "fault": fault,
                    "attempts": attempts,
                    "first_attempt_failed": attempts > 1,
                    "succeeded": not failed,
                    "replies_sent": len(stack.whasp.texts_to(phone)),
                    "model_calls": _model_answers(stack) - calls_before,
                    "stored_user": stored.count("user"),
                    "stored_agent": stored.count("assistant"),
                }
            )
    return {
        "cells": cells,
        "inbound": len(cells),
        "replies_sent": sum(c["replies_sent"] for c in cells),
        "cells_not_exactly_one": sum(c["replies_sent"] != 1 for c in cells),
        "max_receive_count": attempts_allowed,
    }


def reference_crash_matrix(stack: harness.Stack) -> dict[str, Any]:
    """The same matrix on the reference design (bench/reference_turn.py). Its steps map to ours:
    remember_inbound = storing the person's message, remember_reply = storing the reply; it has
    no finish_event. A redelivery is simply handled again."""
    stack.openai.reset()
    resources = stack.resources("rc")
    reference = _reference_agent(stack, resources)
    client = reference.table.meta.client
    attempts_allowed = max_receive_count(load_template())
    crash_points = {
        "remember_inbound": (reference, "remember", 1),
        "model reply": (reference, "ask", 1),
        "remember_reply": (reference, "remember", 2),
        "send": (reference.whasp, "send_text", 1),
    }
    cells = []
    for step_index, (step, _, _) in enumerate(STEPS):
        if step not in crash_points:
            continue
        for fault_index, fault in enumerate(FAULTS):
            phone = f"+4477008{step_index}{fault_index}0001"
            event = harness.whasp_message(
                "Please answer exactly once.", chat=phone, created_at=harness.iso_now(5)
            )
            if fault_index == 0:
                _crash_after(*crash_points[step])
            elif step == "remember_inbound":
                _dynamodb_fails(client, "PutItem", 2)  # after the dedupe mark, as in the design
            elif step == "remember_reply":
                _dynamodb_fails(client, "PutItem", 3)
            else:
                _dependency_fails(stack, None, step)
            attempts, done = 0, False
            while not done and attempts < attempts_allowed:
                attempts += 1
                try:
                    reference.handle(event)
                    done = True
                except Exception:  # the record fails; the queue redelivers it
                    done = False
            cells.append(
                {
                    "step": step,
                    "fault": fault,
                    "attempts": attempts,
                    "replies_sent": len(stack.whasp.texts_to(phone)),
                    "stored_user": len(reference.messages(phone, "user")),
                    "stored_agent": len(reference.messages(phone, "assistant")),
                }
            )
    return {
        "cells": cells,
        "inbound": len(cells),
        "replies_sent": sum(c["replies_sent"] for c in cells),
        "cells_not_exactly_one": sum(c["replies_sent"] != 1 for c in cells),
    }


def _reference_agent(stack: harness.Stack, resources: Any) -> Any:
    from openai import OpenAI
    from reference_turn import ReferenceAgent

    from memagent.whasp import WhaspClient

    return ReferenceAgent(
        resources.table_name,
        model=OpenAI(base_url=f"{stack.openai.url}/v1", api_key="sk-bench", max_retries=2),
        model_name="gpt-6-luna",
        whasp=WhaspClient(stack.whasp.url, "whasp-key"),
        system_prompt=harness.SYSTEM_PROMPT,
    )


def _model_answers(stack: harness.Stack) -> int:
    """Model calls that were answered (injected failures are not calls the model served)."""
    return sum(
        1
        for r in list(stack.openai.requests)
        if r["path"] == "/v1/responses" and r["status"] == 200
    )


def _pk(phone: str) -> str:
    from memagent.person import person_key

    return person_key(harness.AGENT, phone)


def run(stack: harness.Stack, *, examples: int) -> dict[str, Any]:
    started = time.perf_counter()
    result = {
        "fuzz": fuzz(stack, examples=examples),
        "crash": crash_matrix(stack),
        "reference_crash": reference_crash_matrix(stack),
    }
    result["seconds"] = time.perf_counter() - started
    return result
