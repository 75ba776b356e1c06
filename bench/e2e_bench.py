"""Figure 5: the local stack end to end (devstack.stack.DevStack), with an instant model.

Every function runs in its own execution-environment process, as template.yaml declares it; the
webhook is reached over HTTP, signed as whasp signs; SQS FIFO and the stream are delivered by the
stack's event source mappings. People write concurrently (one sender thread each, each message
posted once the previous one was accepted, as whasp does per chat). Measured from the POST to
whasp's acceptance of the reply: messages per second, p50 and p95. Checked: every message
answered, answers in each person's order (ordering violations), and no message answered twice
(duplicates sent).

Run with COALESCE_BURSTS=false: one reply per message, so each latency is a message's own.

The baseline is the same number of messages from a single person: one FIFO group, so strictly
one at a time. The ratio shows what processing different people in parallel buys.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import harness
from conversation import instant_model


def _event_id(send: dict[str, Any]) -> str:
    key = send.get("idempotency_key", "")
    return key.split(":", 1)[1].rsplit(":", 1)[0] if key.startswith("reply:") else ""


def _inversions(order: list[int]) -> int:
    """How many answers came after the answer to a later message of the same person."""
    violations, highest = 0, -1
    for index in order:
        if index < highest:
            violations += 1
        highest = max(highest, index)
    return violations


def _drive(stack: Any, label: str, phones: list[str], per_person: int, timeout: float) -> dict:
    posted: dict[str, tuple[str, int, float]] = {}
    lock = threading.Lock()
    rejected = []
    already = len(stack.whasp.sent)

    def person(phone: str) -> None:
        for index in range(per_person):
            event = stack.message_event(phone, f"{label} message {index}, please answer")
            with lock:
                posted[event["id"]] = (phone, index, time.time())
            delivery = stack.post(event)
            if delivery.status != 200:
                rejected.append(delivery.status)

    started = time.time()
    threads = [threading.Thread(target=person, args=(p,)) for p in phones]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = len(phones) * per_person
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        answered = {_event_id(s) for s in stack.whasp.sent[already:]} & posted.keys()
        if len(answered) >= total:
            break
        time.sleep(0.05)
    stack.wait_idle(timeout=max(1.0, deadline - time.monotonic()))

    sends = [s for s in stack.whasp.sent[already:] if _event_id(s) in posted]
    latencies = [s["at"] - posted[_event_id(s)][2] for s in sends]
    answered = {_event_id(s) for s in sends}
    violations = stored_violations = 0
    for phone in phones:
        order = [posted[_event_id(s)][1] for s in sends if s["to"] == phone]
        violations += _inversions(order)
        stored = [
            int(text.split(" message ")[1].split(",")[0])
            for _, role, text in stack.view(phone).turns
            if role == "user" and " message " in text
        ]
        stored_violations += _inversions(stored)
    finished = max((s["at"] for s in sends), default=time.time())
    return {
        "people": len(phones),
        "messages_per_person": per_person,
        "messages": total,
        "rejected_posts": len(rejected),
        "answered": len(answered),
        "missing": total - len(answered),
        "duplicates_sent": len(sends) - len(answered),
        "ordering_violations": violations,
        "stored_order_violations": stored_violations,
        "seconds": finished - started,
        "messages_per_second": total / (finished - started) if finished > started else 0.0,
        "latency_ms": harness.summary_ms(latencies),
    }


def run(*, people: int, messages: int, timeout: float = 180.0) -> dict[str, Any]:
    from devstack.stack import DevStack

    with (
        tempfile.TemporaryDirectory() as folder,
        DevStack(
            env={},
            level="quiet",
            log_path=Path(folder) / "stack.log",
            # people here post without waiting for replies, so their lines would queue up into
            # bursts with one reply each; this figure checks one reply per message (figure 9
            # measures bursts)
            extra_env={"COALESCE_BURSTS": "false"},
        ) as stack,
    ):
        stack.openai.responder = instant_model
        stack.openai.transcriber = lambda audio: "ok"
        batches_before = _queue_stats(stack)
        baseline = _drive(stack, "solo", ["+447700900600"], people * messages, timeout=timeout)
        batches_mid = _queue_stats(stack)
        phones = [f"+4477009007{n:02d}" for n in range(people)]
        parallel = _drive(stack, "many", phones, messages, timeout=timeout)
        batches_after = _queue_stats(stack)
        return {
            "parallel": {**parallel, **_delta(batches_mid, batches_after)},
            "baseline": {**baseline, **_delta(batches_before, batches_mid)},
            "consumer_environments": stack.consumer_concurrency,
            "group_conflicts": stack.queue_delivery.stats.group_conflicts,
        }


def _queue_stats(stack: Any) -> tuple[int, int, list[float]]:
    stats = stack.queue_delivery.stats
    return stats.batches, stats.records, list(stats.durations_ms)


def _delta(before: tuple, after: tuple) -> dict[str, float]:
    batches, records = after[0] - before[0], after[1] - before[1]
    durations = after[2][len(before[2]) :]
    return {
        "consumer_batches": batches,
        "records_per_batch": records / batches if batches else 0,
        "invocation_ms": sum(durations) / len(durations) if durations else 0.0,
    }
