"""Figure 2: DynamoDB requests and consumed capacity per turn, ours against the reference design.

Both agents first hold the same conversation (`warmup` messages from the person, answered), so
each has a realistic memory: ours a summary, facts and up to 40 pending turns after compaction;
the reference the same summary and facts (copied from ours) and every message so far. Then the
next `window` messages are metered. Compaction (ours) runs whenever the stream fires it and is
metered apart: per fold, and spread over the turns of the window.
"""

from __future__ import annotations

from typing import Any

import harness
import reference_turn
from conversation import conversation, iso, realistic_model
from pipeline import Pipeline

PHONE = "+447700900123"


def _event(said: Any) -> dict[str, Any]:
    return harness.whasp_message(said.text, chat=PHONE, created_at=iso(said.at))


def _per_turn(total: dict[str, Any], turns: int) -> dict[str, Any]:
    return {
        "requests": {op: n / turns for op, n in sorted(total["requests"].items())},
        "total_requests": total["total_requests"] / turns,
        "rru": total["rru"] / turns,
        "wru": total["wru"] / turns,
        "wru_without_budget": total["wru_without_budget"] / turns,
        "moto_reported": total["moto_reported"] / turns,
    }


def run(stack: harness.Stack, *, warmup: int, window: int) -> dict[str, Any]:
    stack.openai.responder = realistic_model
    said = list(conversation(warmup + window, seed=11))

    # ours: warm up, then meter the consumer and the compactor apart
    ours = Pipeline(stack, "turn")
    for message in said[:warmup]:
        ours.turn(_event(message))
    memory = ours.store.load(harness.pk(PHONE))
    turn_meter, compaction_meter = harness.DynamoMeter(), harness.DynamoMeter()
    turn_meter.attach(ours.store._client)
    compaction_meter.attach(ours.compactor.compactor.store._client)
    folds_before = len(ours.folds)
    for message in said[warmup:]:
        ours.turn(_event(message))
    turn_meter.enabled = compaction_meter.enabled = False  # what follows is the bench reading
    folds = len(ours.folds) - folds_before
    folded_turns = sum(len(f.turns) for f in ours.folds[folds_before:])
    partition_bytes = sum(
        harness.item_size(item) for item in ours.store.everything(harness.pk(PHONE))
    )

    # the reference: the same conversation, the same summary and facts, then the same window
    resources = stack.resources("ref")
    reference = reference_turn.on_stand_ins(stack, resources.table_name, model_retries=0)
    for message in said[:warmup]:
        reference.handle(_event(message))
    reference.seed_memory(
        PHONE, memory.summary.text if memory.summary else "", [f.text for f in memory.facts]
    )
    reference_meter = harness.DynamoMeter()
    reference_meter.attach(reference.table.meta.client)
    for message in said[warmup:]:
        reference.handle(_event(message))

    turn = _per_turn(turn_meter.snapshot(), window)
    compaction = compaction_meter.snapshot()
    per_fold = _per_turn(compaction, max(folds, 1))
    amortised = {
        "rru": turn["rru"] + compaction["rru"] / window,
        "wru": turn["wru"] + compaction["wru"] / window,
        "total_requests": turn["total_requests"] + compaction["total_requests"] / window,
    }
    return {
        "warmup": warmup,
        "window": window,
        "ours": turn,
        "ours_with_compaction": amortised,
        "compaction_per_fold": per_fold,
        "folds": folds,
        "folded_turns": folded_turns,
        "memory": {
            "pending_turns": len(memory.turns),
            "facts": len(memory.facts),
            "summary_chars": len(memory.summary.text) if memory.summary else 0,
            "partition_bytes_after": partition_bytes,
        },
        "reference": _per_turn(reference_meter.snapshot(), window),
    }
