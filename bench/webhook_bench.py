"""Figure 1: the webhook, warm, per request, against the minimal baseline handler; and every
function's cold import + init against `import boto3` and `import openai` (bench/import_time.py).

Both handlers are loaded by file path as Lambda loads them, get the same kind of signed HTTP API
v2 event and send to the same FIFO queue on moto over HTTP; the requests alternate between them
in a shuffled order so that drift in the machine's speed hits both alike. The time inside the SQS
call (botocore's before-call to after-call) is also reported apart, since on AWS that part is
SQS's latency, not ours. moto's SendMessage slows down as a FIFO queue fills (it scans what the
queue holds), so the queue is drained, untimed, every few requests.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import boto3
import harness
import import_time
from pipeline import Clock

BENCH = Path(__file__).resolve().parent
DRAIN_EVERY = 10


def drain(sqs: Any, queue_url: str) -> int:
    """Receive and delete everything queued (PurgeQueue is allowed once a minute only)."""
    drained = 0
    while batch := sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages"):
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[
                {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)
            ],
        )
        drained += len(batch)
    return drained


def handler_times(stack: harness.Stack, *, requests: int, warmup: int) -> dict[str, Any]:
    resources = stack.resources("wh")
    ours = harness.load_function("webhook", stack.webhook_env(resources))
    baseline = harness.load_handler(
        BENCH / "baseline_webhook.py",
        {"QUEUE_URL": resources.queue_urls["EventQueue"], "WEBHOOK_SECRET": harness.SECRET},
    )
    timers = {
        "ours": Clock().watch_boto3(ours.queue._sqs),
        "baseline": Clock().watch_boto3(baseline.sqs),
    }
    handlers = {"ours": ours.handler, "baseline": baseline.handler}
    context = harness.LambdaContext()
    rng = random.Random(1)
    samples: dict[str, list[float]] = {"ours": [], "baseline": []}
    inside: dict[str, list[float]] = {"ours": [], "baseline": []}
    sink = harness.LogSink()
    logged_requests = 0
    sqs = boto3.client("sqs")
    with harness.captured_logs(sink):
        for index in range(warmup + requests):
            order = ["ours", "baseline"]
            rng.shuffle(order)
            for name in order:
                phone = f"+4477009{rng.randint(10000, 99999)}"
                event = harness.whasp_message(
                    "I start the new job on Monday! Any tips?",
                    chat=phone,
                    created_at=harness.iso_now(1),
                )
                request = harness.signed_request(event)
                before = timers[name].seconds
                started = time.perf_counter()
                response = handlers[name](request, context)
                elapsed = time.perf_counter() - started
                if response["statusCode"] != 200:
                    raise RuntimeError(f"{name} webhook answered {response['statusCode']}")
                if index >= warmup:
                    samples[name].append(elapsed)
                    inside[name].append(timers[name].seconds - before)
                    if name == "ours":
                        logged_requests += 1
            if index == warmup - 1:
                sink.bytes = sink.lines = 0
            if index % DRAIN_EVERY == DRAIN_EVERY - 1:
                drain(sqs, resources.queue_urls["EventQueue"])
    result: dict[str, Any] = {}
    for name in ("ours", "baseline"):
        own = [total - sqs for total, sqs in zip(samples[name], inside[name], strict=True)]
        result[name] = {
            "total": harness.summary_ms(samples[name]),
            "sqs_call": harness.summary_ms(inside[name]),
            "own": harness.summary_ms(own),
            "sqs_calls_per_request": timers[name].calls / (warmup + requests),
        }
    result["log_bytes_per_request"] = sink.bytes / max(1, logged_requests)
    result["log_lines_per_request"] = sink.lines / max(1, logged_requests)
    result["metric_names"] = sorted(sink.metric_names)
    result["requests"] = requests
    return result


def import_times(runs: int) -> dict[str, Any]:
    """Cold import + init of every function, and the baselines (bench/import_time.py)."""
    results = import_time.compare(runs)
    measured: dict[str, Any] = {
        key: {"median": result.median, "p90": result.p90} for key, result in results.items()
    }
    for function in import_time.FUNCTIONS:
        measured[function]["packages"] = results[function].packages
        measured[function]["openai_imported"] = results[function].openai
    return {
        "runs": runs,
        **measured,
        "openai_imported": results["webhook"].openai,
        "packages": results["webhook"].packages,
    }


def run(stack: harness.Stack, *, requests: int, warmup: int, import_runs: int) -> dict[str, Any]:
    return {
        "handler": handler_times(stack, requests=requests, warmup=warmup),
        "import": import_times(import_runs),
    }
