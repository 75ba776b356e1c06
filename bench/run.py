"""`make bench`: every benchmark of issue 7 in one run, written to docs/benchmarks.md.

    python bench/run.py [--out docs/benchmarks.md] [--quick] [--model-input-price 0.40] ...
    python bench/run.py --only bursts [--quick]     # one benchmark alone, its numbers as JSON

Writes the results (docs/benchmarks.md), the context plot beside them
(docs/benchmarks-context.png) and the cost model (docs/cost.md): documents, with the others.
Nothing here asserts anything: the figures are reported, with the must-be-zero counts marked.
`--quick` runs every benchmark with tiny sizes (a smoke run, for the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

import burst_bench
import context_bench
import cost
import e2e_bench
import follow_up_bench
import hardening
import harness
import memory_bench
import outcomes_bench
import report
import retry_bench
import tool_bench
import turn_bench
import webhook_bench

from devstack.resources import load_template

ROOT = Path(__file__).resolve().parent.parent


# Each benchmark's keyword arguments (its sizes), as (full run, --quick).
SIZES = {
    "webhook": {"requests": (200, 10), "warmup": (20, 2), "import_runs": (8, 1)},
    "turn": {"warmup": (30, 4), "window": (40, 4)},
    "context": {"turns": (500, 24)},
    "bursts": {"people": (6, 2), "bursts": (8, 2)},
    "retries": {"samples": (10, 2)},
    "e2e": {"people": (8, 2), "messages": (8, 2)},
    "memory": {"fillers": (3, 1)},
    "outcomes": {"people_per_script": (4, 1)},
}


# The benchmarks on the shared stand-ins, in the order they run: (key, progress line, module),
# each run as module.run(stack, **its sizes); then figure 5 (e2e) brings up a stack of its own.
BENCHMARKS = [
    ("webhook", "1. webhook", webhook_bench),
    ("turn", "2. a turn's DynamoDB traffic", turn_bench),
    ("context", "3-4. context and compaction over a long conversation", context_bench),
    ("hardening", "7. hardening", hardening),
    (
        "bursts",
        "9. bursts: model calls per inbound message, with and without coalescing",
        burst_bench,
    ),
    ("retries", "8. failure timing", retry_bench),
    ("tools", "10. tool turns: calls per booking turn, and a crash after each step", tool_bench),
    ("memory", "11. memory over a month: facts that change, dated plans", memory_bench),
    ("follow_ups", "13. follow-ups: one reminder each, a crash after each step", follow_up_bench),
    ("outcomes", "14. outcomes over scripted conversations", outcomes_bench),
]

# What the cost model takes as given, each a flag: (option, cost.Assumptions field, what it is)
MODEL_OPTIONS = [
    ("--model-input-price", "model_input_per_million", "dollars per 1M input tokens"),
    (
        "--model-cached-input-price",
        "model_cached_input_per_million",
        "dollars per 1M cached input tokens",
    ),
    ("--model-output-price", "model_output_per_million", "dollars per 1M output tokens"),
    ("--model-latency", "model_reply_seconds", "seconds per reply (Lambda bills the wait)"),
    (
        "--whatsapp-service-fee",
        "whatsapp_service_fee",
        "dollars per delivered WhatsApp service message (your recipients' market)",
    ),
]


def sizes_for(quick: bool) -> dict[str, dict[str, int]]:
    pick = 1 if quick else 0
    return {
        bench: {name: both[pick] for name, both in args.items()} for bench, args in SIZES.items()
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    defaults = cost.Assumptions()
    parser = argparse.ArgumentParser(description="Benchmarks, cost model and hardening figures.")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--plot", type=Path, default=ROOT / "docs" / "benchmarks-context.png")
    parser.add_argument("--cost-doc", type=Path, default=ROOT / "docs" / "cost.md")
    parser.add_argument("--json", type=Path, help="also write every measured number as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    only = [key for key, _, _ in BENCHMARKS] + ["e2e"]
    parser.add_argument("--only", choices=only, help="one benchmark alone: its numbers as JSON")
    for flag, field, meaning in MODEL_OPTIONS:
        default = getattr(defaults, field)
        parser.add_argument(flag, type=float, dest=field, default=default, help=meaning)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # a compactor run with nothing to fold publishes no metric; Powertools warns each time
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    for key, value in harness.POWERTOOLS_ENV.items():
        os.environ[key] = value
    sizes = sizes_for(args.quick)
    started = time.perf_counter()
    environment = report.environment(sys.argv)
    tokenizer = harness.Tokenizer()
    measured: dict = {"sizes": sizes}

    def step(name: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {name}", file=sys.stderr, flush=True)

    with harness.Stack.running() as stack:
        for key, label, bench in BENCHMARKS:
            if args.only in (None, key):
                step(label)
                extra = {"tokenizer": tokenizer} if bench is context_bench else {}
                # each benchmark's functions read the environment it leaves (harness
                # .load_function keeps it set): the next one starts from the stack's, as each
                # function has its own in AWS
                kept = dict(os.environ)
                measured[key] = bench.run(stack, **sizes.get(key, {}), **extra)
                os.environ.clear()
                os.environ.update(kept)
    if args.only in (None, "e2e"):
        step("5. the local stack end to end")
        measured["e2e"] = e2e_bench.run(**sizes["e2e"])
    if args.only:  # one benchmark alone: its numbers, and no report
        json.dump(measured[args.only], sys.stdout, indent=1, default=str)
        return 0

    step("6. cost")
    assumptions = cost.Assumptions(**{field: getattr(args, field) for _, field, _ in MODEL_OPTIONS})
    template = load_template()
    cost_lines = cost.lines(measured, template, assumptions)
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    context_bench.plot(measured["context"], args.plot)
    elapsed = time.perf_counter() - started
    environment["run_seconds"] = elapsed
    environment["tokenizer"] = tokenizer.name
    text = report.results(measured, environment, cost_lines, assumptions, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    args.cost_doc.parent.mkdir(parents=True, exist_ok=True)
    args.cost_doc.write_text(
        report.cost_doc(measured, environment, cost_lines, assumptions, template),
        encoding="utf-8",
    )
    if args.json:
        args.json.write_text(json.dumps(measured, indent=1, default=str), encoding="utf-8")
    step(f"done: {args.out}, {args.plot}, {args.cost_doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
