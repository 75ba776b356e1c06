"""Figure 10: tool turns. The example booking tools (examples/booking) behind a local Lambda
Invoke API, the offline model asking for them ("book me ... at 10:00": the free slots, then the
booking), through the real consumer: model and tool calls per booking turn, then a crash after
each step of that two-tool turn, redelivered until it succeeds. Every cell must end with one
reply and each position's effect once; the one window (the tool acted, the result unrecorded)
repeats the call under the same idempotency key, which the example's conditional write turns into
a no-op: each cell books in a calendar table of its own (the template's BookingTable)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import harness

from devstack.fake_lambda import FakeLambda
from devstack.fake_openai import offline_model

ROOT = Path(__file__).resolve().parent.parent
ARN = "arn:aws:lambda:eu-west-1:123456789012:function:booking"
ASK = "Can you book me a session on 2026-12-03 at 10:00?"
# (label, collaborator, method, nth call): the crash strikes after that call
STEPS = [
    ("none", None, None, 0),
    ("after the slots call", "tools", "call", 1),
    ("after recording the slots", "store", "record_tool", 2),
    ("after the booking call", "tools", "call", 2),
    ("after recording the booking", "store", "record_tool", 4),
    ("after storing the reply", "store", "remember_reply", 1),
    ("after sending the reply", "provider", "send_text", 1),
]


def run(stack: harness.Stack) -> dict[str, Any]:
    import os

    from hardening import _crash_after

    from devstack.resources import create_table, load_template

    booking = harness.load_handler(ROOT / "examples" / "booking" / "app.py", {})
    with FakeLambda({ARN: booking.handler}) as api:
        consumer = stack.consumer(
            "tl",
            offline_model,
            TOOLS_FILE=str(ROOT / "functions" / "consumer" / "tools.example.json"),
            BOOKING_TOOL_ARN=ARN,
            AWS_ENDPOINT_URL_LAMBDA=api.url,
        )
        agent, context, cells = consumer.consumer.agent, harness.LambdaContext(), []
        for index, (label, target, method, nth) in enumerate(STEPS):
            stack.openai.reset()
            stack.whasp.reset()
            api.requests.clear()
            calendar = f"tl-booking-{index}"
            create_table(load_template(), calendar, logical_id="BookingTable")
            os.environ["BOOKING_TABLE"] = calendar  # the example, in this process, reads it
            phone = f"+4477009{index:02d}0002"
            event = harness.whasp_message(ASK, chat=phone, created_at=harness.iso_now(5))
            if target is not None:
                _crash_after(getattr(agent, target), method, nth)
            with harness.captured_logs(harness.LogSink()):
                attempts, _ = harness.redeliver(consumer.handler, event, context, limit=5)
            keys = [p["idempotency_key"] for p in api.invocations(ARN)]
            cells.append(
                {
                    "step": label,
                    "attempts": attempts,
                    "model_calls": len(stack.openai.calls()),
                    "tool_calls": len(keys),
                    "positions": len(set(keys)),
                    "bookings": len(booking.bookings()),
                    "replies": len(stack.whasp.texts_to(phone)),
                }
            )
    crashed = cells[1:]
    return {
        "cells": cells,
        "model_calls_per_turn": cells[0]["model_calls"],
        "tool_calls_per_turn": cells[0]["tool_calls"],
        "cells_not_exactly_one": sum(c["replies"] != 1 or c["bookings"] != 1 for c in crashed),
        "repeats_under_one_key": sum(c["tool_calls"] - c["positions"] for c in crashed),
    }
