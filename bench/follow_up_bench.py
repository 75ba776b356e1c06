"""Figure 13: follow-ups. "Remind me tomorrow at 9 to call the dentist" through the real consumer
(the offline model asks for it with the built-in tool), moto's Scheduler (as strict as
Scheduler: devstack.moto_fixes) fired at 9:00 on the person's clock by devstack.scheduler,
twice (Scheduler delivers at least once), and the fired record handed to the consumer until it
takes it. Then the same with a crash after each step. Every cell must end with one reminder.

Measured on the clean cell: the firing turn's DynamoDB requests and capacity (DynamoMeter), its
model tokens (the stand-in's usage), and what Scheduler and SQS bill per follow-up, priced per
1,000 follow-ups with bench/cost.py's prices."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import harness
from cost import PRICES, Assumptions

from devstack.clock import SQS_CLOCK
from devstack.events import EVENT_QUEUE_ARN
from devstack.fake_openai import _texts, offline_model
from devstack.lambda_harness import retried, sqs_message_record
from devstack.scheduler import SchedulerFiring

ASK = "Remind me tomorrow at 9 to call the dentist"
ROLE = "arn:aws:iam::123456789012:role/bench-FollowUpSchedulerRole"
LONDON = ZoneInfo("Europe/London")
REMINDER = "Reminder, as you asked"
SCHEDULER_INVOCATION = 1.00 / 1e6  # EventBridge Scheduler, per invocation (after 14 M free)
# (label, collaborator of the consumer's agent, method, nth call): the crash strikes after it
STEPS = [
    ("none", None, None, 0),
    ("after the schedule is created", "schedules", "create", 1),
    ("after the model wrote the reminder", "model", "reply", 1),
    ("after storing the reminder", "store", "remember_follow_up", 1),
    ("after whasp took the reminder", "provider", "send_text", 2),  # the 1st: the ask's reply
    ("after the follow-up was dropped", "store", "drop_follow_up", 1),
]


def _fired(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    got = sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    return [sqs_message_record(m, EVENT_QUEUE_ARN) for m in got.get("Messages", [])]


def _cell(stack: harness.Stack, index: int, label: str, target: Any, method: Any, nth: int):
    import boto3
    from hardening import _crash_after

    from memagent.aws import FollowUpSchedules

    resources = stack.resources(f"fu{index}")
    scheduler = boto3.client("scheduler")
    group = f"bench-{uuid.uuid4().hex[:8]}"
    scheduler.create_schedule_group(Name=group)
    queue_url = resources.queue_urls["EventQueue"]
    env = {
        **stack.consumer_env(resources),
        "QUEUE_URL": queue_url,
        "FOLLOW_UP_SCHEDULE_GROUP": group,
        "FOLLOW_UP_ROLE_ARN": ROLE,
        "FOLLOW_UP_DEAD_LETTER_ARN": resources.queue_arns["FollowUpDeadLetterQueue"],
    }
    stack.openai.responder = offline_model
    stack.openai.reset()
    stack.whasp.reset()
    consumer = harness.load_function("consumer", env)
    agent, context = consumer.consumer.agent, harness.LambdaContext()
    if target == "schedules":  # a frozen dataclass: the crash goes on its class
        _crash_after(FollowUpSchedules, method, nth)
    elif target is not None:
        _crash_after(getattr(agent, target), method, nth)
    phone = f"+4477009{index:02d}0013"
    event = harness.whasp_message(ASK, chat=phone, created_at=harness.iso_now(1))
    with harness.captured_logs(harness.LogSink()):
        asked, _ = harness.redeliver(consumer.handler, event, context, limit=5)
        firing = SchedulerFiring(scheduler, boto3.client("sqs"), group)
        pending = firing.pending()
        local = datetime.fromisoformat(pending[0]["ScheduleExpression"][3:-1])
        nine = local.replace(tzinfo=LONDON).astimezone(UTC)
        SQS_CLOCK.advance(max(0.0, nine.timestamp() - SQS_CLOCK.now()) + 1)
        meter = harness.DynamoMeter()
        meter.attach(agent.store._client)
        used, calls_before = agent.model.tokens_used, len(stack.openai.requests)
        firing.fire_due(repeat=2)  # Scheduler invokes its target at least once
        records, attempts, failed = _fired(boto3.client("sqs"), queue_url), 0, ["x"]
        while failed and attempts < 5:
            attempts += 1
            failed = retried(consumer.handler, {"Records": records}, context)
        meter.enabled = False
    return {
        "step": label,
        "ask_attempts": asked,
        "fire_attempts": attempts,
        "schedules": len(firing.fired),
        "reminders": sum(REMINDER in t for t in stack.whasp.texts_to(phone)),
        "pending_after": len(firing.pending()),
        "dynamodb": meter.snapshot(),
        **_tokens(stack, calls_before, agent.model.tokens_used - used),
    }


def _tokens(stack: harness.Stack, since: int, total: int) -> dict[str, int]:
    """The firing turn's model tokens, as the stand-in counts them (4 characters a token):
    input from its requests, output the rest of what the client added up."""
    bodies = [r["json"] for r in list(stack.openai.requests)[since:] if r.get("status") == 200]
    prompt = sum(math.ceil(sum(len(t) for t in _texts(b)) / 4) for b in bodies if b)
    return {"input_tokens": prompt, "output_tokens": max(0, total - prompt)}


def run(stack: harness.Stack) -> dict[str, Any]:
    with SQS_CLOCK.kept():  # each cell lets AWS's clock run to 9:00; the next figures start fresh
        cells = [_cell(stack, i, *step) for i, step in enumerate(STEPS)]
    clean = cells[0]
    dynamodb = clean["dynamodb"]
    assumptions = Assumptions()
    per_follow_up = {
        "scheduler": 2 * SCHEDULER_INVOCATION,  # the schedule's creation and its firing
        "sqs": assumptions.sqs_requests_per_message * PRICES["sqs_fifo_request"],
        "dynamodb": dynamodb["wru"] * PRICES["dynamodb_wru"]
        + dynamodb["rru"] * PRICES["dynamodb_rru"],
        "model": (
            clean["input_tokens"] * assumptions.model_input_per_million
            + clean["output_tokens"] * assumptions.model_output_per_million
        )
        / 1e6,
    }
    return {
        "cells": cells,
        "reminders_per_follow_up": sum(c["reminders"] for c in cells) / len(cells),
        "cells_not_exactly_one": sum(c["reminders"] != 1 for c in cells),
        "firing_turn": {
            "requests": dynamodb["total_requests"],
            "wru": dynamodb["wru"],
            "rru": dynamodb["rru"],
            "input_tokens": clean["input_tokens"],
            "output_tokens": clean["output_tokens"],
        },
        "cost_per_1000": {k: v * 1000 for k, v in per_follow_up.items()},
        "cost_per_1000_total": sum(per_follow_up.values()) * 1000,
    }
