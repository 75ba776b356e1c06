"""Figure 9: model calls per inbound message on a bursty conversation, with and without
coalescing (COALESCE_BURSTS), through the consumer handler as Lambda invokes it.

The conversation: `people` people each write `bursts` bursts of 1 to 4 lines (seeded: 40 % one
line, 30 % two, 20 % three, 10 % four), the lines of a burst seconds apart, bursts minutes apart.
Delivery, as the FIFO queue does it: while a person's turn is answered, their next lines wait in
their group, so a person's whole burst is waiting when the group is next polled. Each round, every
person's next burst is queued; the round's records go out in batches of at most 10 (the SQS batch
size), in queue order, so a burst that straddles two batches is answered in two parts, exactly as
it would be on AWS. Both runs get the same deliveries.

Counted per run: inbound messages, model calls (answered /v1/responses requests: replies only,
nothing else calls the model here), replies sent, the model input sent (characters), and the
must-be-zero counts: messages not stored exactly once, and messages not covered by exactly one
sent reply (read back from each message's ledger entry, `answered_by`).
"""

from __future__ import annotations

import os
import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import harness

SIZES = [1] * 4 + [2] * 3 + [3] * 2 + [4]  # 40 / 30 / 20 / 10 %


def conversation(*, people: int, bursts: int, seed: int = 15) -> list[list[list[dict[str, Any]]]]:
    """rounds[r][p]: person p's burst in round r, as whasp `message.received` events."""
    from conversation import SHORT, SMALL_TALK

    rng = random.Random(seed)
    phones = [f"+4477009{n:02d}8888" for n in range(people)]
    start = datetime.now(UTC) - timedelta(hours=2)
    rounds = []
    for r in range(bursts):
        row = []
        for p, phone in enumerate(phones):
            at = start + timedelta(minutes=5 * r, seconds=7 * p)
            lines = [rng.choice(SHORT + SMALL_TALK) for _ in range(rng.choice(SIZES))]
            row.append(
                [
                    harness.whasp_message(
                        text,
                        chat=phone,
                        created_at=(at + timedelta(seconds=4 * i)).isoformat(),
                    )
                    for i, text in enumerate(lines)
                ]
            )
        rounds.append(row)
    return rounds


def deliver(
    stack: harness.Stack, rounds: list[list[list[dict[str, Any]]]], *, coalesce: bool
) -> dict[str, Any]:
    """One run: a fresh table, the consumer cold-started with COALESCE_BURSTS, every round."""
    from conversation import realistic_model

    from memagent.providers.seam import idempotency_key

    consumer = stack.consumer(
        "bu", realistic_model, COALESCE_BURSTS="true" if coalesce else "false"
    )
    context = harness.LambdaContext()
    batches = failed = 0
    started = time.perf_counter()
    with harness.captured_logs(harness.LogSink()):
        for row in rounds:
            queued = [event for burst in row for event in burst]
            for start in range(0, len(queued), 10):
                batches += 1
                batch = harness.sqs_batch(*queued[start : start + 10])
                failed += len(harness.retried(consumer.handler, batch, context))
    seconds = time.perf_counter() - started
    calls = stack.answered_calls()
    events = [event for row in rounds for burst in row for event in burst]
    store = consumer.consumer.agent.store
    stored_wrong = uncovered = 0
    for phone in sorted({e["data"]["chat"] for e in events}):
        items = store.everything(harness.pk(phone))
        mine = [e for e in events if e["data"]["chat"] == phone]
        said = [i["text"] for i in items if i["sk"].startswith("MSG#") and i["role"] == "user"]
        stored_wrong += abs(len(said) - len(mine))
        ledger = {i.get("event_id"): i for i in items if i["sk"].startswith("EVT#")}
        sent_keys = {s["idempotency_key"] for s in stack.whasp.sent if s["to"] == phone}
        for event in mine:
            entry = ledger.get(event["id"]) or {}
            answerer = ledger.get(entry.get("answered_by")) or {}
            by = entry.get("answered_by", "")
            uncovered += not (
                answerer.get("status") == "sent" and idempotency_key(by, 0) in sent_keys
            )
    inbound = len(events)
    replies = len(stack.whasp.sent)
    input_chars = sum(
        len(m.get("content") or "") for r in calls for m in (r["json"] or {}).get("input") or []
    )
    return {
        "coalesce": coalesce,
        "inbound": inbound,
        "batches": batches,
        "failed_records": failed,
        "model_calls": len(calls),
        "replies_sent": replies,
        "model_calls_per_inbound": len(calls) / inbound,
        "replies_per_inbound": replies / inbound,
        "model_input_chars": input_chars,
        "model_input_chars_per_inbound": input_chars / inbound,
        "stored_not_once": stored_wrong,
        "not_covered_by_one_sent_reply": uncovered,
        "seconds": seconds,
    }


def run(stack: harness.Stack, *, people: int, bursts: int) -> dict[str, Any]:
    rounds = conversation(people=people, bursts=bursts)
    sizes = [len(burst) for row in rounds for burst in row]
    try:
        on = deliver(stack, rounds, coalesce=True)
        off = deliver(stack, rounds, coalesce=False)
    finally:
        os.environ.pop("COALESCE_BURSTS", None)  # load_function leaves it set: not for the rest
    return {
        "people": people,
        "bursts": len(sizes),
        "lines_per_burst": sum(sizes) / len(sizes),
        "burst_sizes": {n: sizes.count(n) for n in sorted(set(sizes))},
        "coalesced": on,
        "one_by_one": off,
        "model_calls_ratio": on["model_calls"] / off["model_calls"] if off["model_calls"] else None,
        "input_chars_ratio": (
            on["model_input_chars"] / off["model_input_chars"] if off["model_input_chars"] else None
        ),
    }
