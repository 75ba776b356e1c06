"""`make bench`: every benchmark of issue 7 in one run, written to bench/results.md.

    python bench/run.py [--out bench/results.md] [--quick] [--model-input-price 0.40] ...

Writes the results (bench/results.md), the context plot (bench/context.png) and the cost model
(docs/cost.md). Nothing here asserts anything: the figures are reported, with the must-be-zero
counts marked. `--quick` runs every benchmark with tiny sizes (a smoke run, for the tests).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import burst_bench
import context_bench
import cost
import e2e_bench
import hardening
import harness
import report
import retry_bench
import turn_bench
import webhook_bench

from devstack.resources import load_template

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent


@dataclass(frozen=True)
class Sizes:
    webhook_requests: int
    webhook_warmup: int
    import_runs: int
    turn_warmup: int
    turn_window: int
    context_turns: int
    e2e_people: int
    e2e_messages: int
    fuzz_examples: int
    duplicate_people: int
    duplicate_messages: int
    burst_people: int = 6
    burst_rounds: int = 8
    burst_crash_redeliveries: int = 3  # of hardening.BURST_REDELIVERIES


FULL = Sizes(200, 20, 8, 30, 40, 500, 8, 8, 2000, 5, 10)
QUICK = Sizes(10, 2, 1, 4, 4, 24, 2, 2, 30, 2, 2, 2, 2, 1)


def parse(argv: list[str] | None) -> argparse.Namespace:
    defaults = cost.Assumptions()
    parser = argparse.ArgumentParser(description="Benchmarks, cost model and hardening figures.")
    parser.add_argument("--out", type=Path, default=BENCH / "results.md")
    parser.add_argument("--plot", type=Path, default=BENCH / "context.png")
    parser.add_argument("--cost-doc", type=Path, default=ROOT / "docs" / "cost.md")
    parser.add_argument("--json", type=Path, help="also write every measured number as JSON")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument(
        "--model-input-price",
        type=float,
        default=defaults.model_input_per_million,
        help="dollars per 1M input tokens",
    )
    parser.add_argument(
        "--model-output-price",
        type=float,
        default=defaults.model_output_per_million,
        help="dollars per 1M output tokens",
    )
    parser.add_argument(
        "--model-latency",
        type=float,
        default=defaults.model_reply_seconds,
        help="seconds the model takes per reply (Lambda bills the wait)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    # a compactor run with nothing to fold publishes no metric; Powertools warns each time
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    for key, value in harness.POWERTOOLS_ENV.items():
        os.environ[key] = value
    sizes = QUICK if args.quick else FULL
    started = time.perf_counter()
    environment = report.environment(sys.argv)
    tokenizer = harness.Tokenizer()
    measured: dict = {"sizes": sizes.__dict__}

    def step(name: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {name}", file=sys.stderr, flush=True)

    with harness.Stack.running() as stack:
        step("1. webhook")
        measured["webhook"] = webhook_bench.run(
            stack,
            requests=sizes.webhook_requests,
            warmup=sizes.webhook_warmup,
            import_runs=sizes.import_runs,
        )
        step("2. a turn's DynamoDB traffic")
        measured["turn"] = turn_bench.run(stack, warmup=sizes.turn_warmup, window=sizes.turn_window)
        step(f"3-4. context and compaction over {2 * sizes.context_turns} messages")
        measured["context"] = context_bench.run(
            stack, turns=sizes.context_turns, tokenizer=tokenizer
        )
        step("7. hardening")
        measured["hardening"] = hardening.run(
            stack,
            examples=sizes.fuzz_examples,
            people=sizes.duplicate_people,
            messages=sizes.duplicate_messages,
            burst_redeliveries=sizes.burst_crash_redeliveries,
        )
        step("9. bursts: model calls per inbound message, with and without coalescing")
        measured["bursts"] = burst_bench.run(
            stack, people=sizes.burst_people, bursts=sizes.burst_rounds
        )
        step("8. failure timing")
        measured["retries"] = retry_bench.run(stack, samples=2 if args.quick else 10)
    step("5. the local stack end to end")
    measured["e2e"] = e2e_bench.run(people=sizes.e2e_people, messages=sizes.e2e_messages)

    step("6. cost")
    assumptions = cost.Assumptions(
        model_input_per_million=args.model_input_price,
        model_output_per_million=args.model_output_price,
        model_reply_seconds=args.model_latency,
    )
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
