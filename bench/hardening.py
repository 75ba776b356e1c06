"""Figure 7: the crash matrix, counted through the consumer handler as AWS invokes it, against
the reference design.

One inbound message per cell of (step x fault). Steps: after remember_inbound, after the model's
reply, after remember_reply, after the send, after finish_event. Faults: the process dies right
after the step (an exception), or the step's dependency fails (DynamoDB answers
InternalServerError; the model or whasp answers 5xx on every retry). The queue then redelivers
until the record succeeds (at most maxReceiveCount times, from template.yaml). Counted: replies
sent per inbound message (must be 1).

The checks with no reference to compare with are tests (docs/benchmarks.md, figure 7, names them).
"""

from __future__ import annotations

import time
from typing import Any

import harness
import reference_turn
from botocore.exceptions import ClientError

from devstack.resources import load_template, max_receive_count

STEPS = [
    ("remember_inbound", "store", "remember_inbound"),
    ("model reply", "model", "act"),  # a turn's round: request_human is offered on every turn
    ("remember_reply", "store", "remember_reply"),
    ("send", "provider", "send_text"),
    ("finish_event", "store", "finish_event"),
]
FAULTS = ["crash after the step", "the step's dependency fails"]
ASK = "Please answer exactly once."


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
        # the reply, in its reserved slot: the turn's second transaction
        _dynamodb_fails(client, "TransactWriteItems", 2)
    elif step == "finish_event":
        _dynamodb_fails(client, "UpdateItem", 1)
    elif step == "model reply":
        stack.openai.fail_next(3, status=500)  # the first call and the client's two retries
    elif step == "send":
        stack.whasp.fail_next(4, status=503)  # the first send and urllib3's three retries


def crash_matrix(stack: harness.Stack) -> dict[str, Any]:
    from conversation import realistic_model

    consumer = stack.consumer("cr", realistic_model)
    agent = consumer.consumer.agent
    context = harness.LambdaContext()
    attempts_allowed = max_receive_count(load_template())
    cells = []
    for step_index, (step, target, method) in enumerate(STEPS):
        for fault_index, fault in enumerate(FAULTS):
            phone = f"+4477009{step_index}{fault_index}0001"
            event = harness.whasp_message(ASK, chat=phone, created_at=harness.iso_now(5))
            calls_before = len(stack.answered_calls())
            if fault_index == 0:
                _crash_after(getattr(agent, target), method)
            else:
                _dependency_fails(stack, agent, step)
            with harness.captured_logs(harness.LogSink()):
                attempts, failed = harness.redeliver(
                    consumer.handler, event, context, limit=attempts_allowed
                )
                # and one more late redelivery after success: must change nothing
                harness.retried(
                    consumer.handler, harness.sqs_batch(event, receive_count=9), context
                )
            items = agent.store.everything(harness.pk(phone))
            stored = [i["role"] for i in items if i["sk"].startswith("MSG#")]
            cells.append(
                {
                    "step": step,
                    "fault": fault,
                    "attempts": attempts,
                    "first_attempt_failed": attempts > 1,
                    "succeeded": not failed,
                    "replies_sent": len(stack.whasp.texts_to(phone)),
                    "model_calls": len(stack.answered_calls()) - calls_before,
                    "stored_user": stored.count("user"),
                    "stored_agent": stored.count("assistant"),
                }
            )
    return {**_totals(cells), "max_receive_count": attempts_allowed}


def reference_crash_matrix(stack: harness.Stack) -> dict[str, Any]:
    """The same matrix on the reference design (bench/reference_turn.py). Its steps map to ours:
    remember_inbound = storing the person's message, remember_reply = storing the reply; it has
    no finish_event. A redelivery is simply handled again."""
    stack.openai.reset()
    resources = stack.resources("rc")
    # the model's first call and its two retries fail together, as in our matrix
    reference = reference_turn.on_stand_ins(stack, resources.table_name, model_retries=2)
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
            event = harness.whasp_message(ASK, chat=phone, created_at=harness.iso_now(5))
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
    return _totals(cells)


def _totals(cells: list[dict[str, Any]]) -> dict[str, Any]:
    replies = [cell["replies_sent"] for cell in cells]
    return {
        "cells": cells,
        "inbound": len(cells),
        "replies_sent": sum(replies),
        "cells_not_exactly_one": sum(n != 1 for n in replies),
    }


def run(stack: harness.Stack) -> dict[str, Any]:
    started = time.perf_counter()
    result = {
        "crash": crash_matrix(stack),
        "reference_crash": reference_crash_matrix(stack),
    }
    result["seconds"] = time.perf_counter() - started
    return result
