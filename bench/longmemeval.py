"""Play a LongMemEval-format file through the real handlers and score it with its judge prompts.

    python bench/longmemeval.py longmemeval_s.json \\
        --judge-prompts LongMemEval/src/evaluation/evaluate_qa.py \\
        --base-url https://api.openai.com/v1 --model gpt-6-luna --judge-model gpt-4o [--limit 20]

LongMemEval (github.com/xiaowu0162/LongMemEval, MIT) is downloaded by you; nothing of it is in this
repository. Each question is a new person: the user turns of its haystack sessions are sent, at
their haystack dates, through the consumer (which answers each, as it would a person) and the
compactor, folded as in production; then the question is sent at its question date and the
agent's reply is the hypothesis. The haystack's own assistant turns are not replayed (the agent
says its own words), so single-session-assistant questions measure less than the benchmark means.
The judge is asked with `get_anscheck_prompt` read from your copy of the benchmark's
evaluate_qa.py (`--judge-prompts`); without it, a short stand-in prompt is used and the results say
so. Without `--base-url` everything runs against the offline stand-in model (a smoke run: its
replies are not answers). Writes one JSON line per question and prints accuracy per type.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import warnings
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import harness
from conversation import iso
from pipeline import Pipeline

STAND_IN_JUDGE = (
    "Question: {}\nCorrect answer: {}\nModel response: {}\n"
    "Does the response contain the correct answer? Answer yes or no only."
)


def judge_prompts(path: Path | None) -> Any:
    """The benchmark's get_anscheck_prompt(task, question, answer, response, abstention), taken
    from its evaluate_qa.py without importing the rest (its imports need its own environment)."""
    if path is None:
        return lambda task, q, a, r, abstention=False: STAND_IN_JUDGE.format(q, a, r)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    [function] = [n for n in tree.body if getattr(n, "name", "") == "get_anscheck_prompt"]
    scope: dict[str, Any] = {}
    exec(compile(ast.Module([function], type_ignores=[]), str(path), "exec"), scope)  # noqa: S102
    return scope["get_anscheck_prompt"]


def when(text: str) -> str:
    """LongMemEval's "2023/05/20 (Sat) 02:21" as an event time."""
    return iso(
        datetime.strptime(text.split(" (")[0] + text[-6:], "%Y/%m/%d %H:%M").replace(tzinfo=UTC)
    )


def play(stack: harness.Stack, entry: dict[str, Any], number: int, env: dict[str, str]) -> str:
    """One question's haystack through the handlers, then the question; returns the reply."""
    phone = f"+4477009{number:05d}"
    pipeline = Pipeline(stack, f"lme{number}", env=env)
    for date, session in zip(entry["haystack_dates"], entry["haystack_sessions"], strict=True):
        for turn in session:
            if turn["role"] == "user" and turn["content"].strip():
                pipeline.turn(
                    harness.whasp_message(turn["content"], chat=phone, created_at=when(date))
                )
    question = entry["question"]
    at = when(entry["question_date"]) if entry.get("question_date") else harness.iso_now()
    pipeline.turn(harness.whasp_message(question, chat=phone, created_at=at))
    return stack.whasp.sent[-1]["text"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data", type=Path, help="a LongMemEval-format JSON file")
    parser.add_argument("--judge-prompts", type=Path, help="LongMemEval's evaluate_qa.py")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint (default: offline)")
    parser.add_argument("--model", default="gpt-6-luna")
    parser.add_argument("--judge-model", default="gpt-4o")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--out", type=Path, default=Path("longmemeval-results.jsonl"))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    os.environ.update(harness.POWERTOOLS_ENV)
    entries = json.loads(args.data.read_text(encoding="utf-8"))[: args.limit]
    prompt = judge_prompts(args.judge_prompts)
    scores: dict[str, list[bool]] = defaultdict(list)
    with harness.Stack.running() as stack, args.out.open("w", encoding="utf-8") as out:
        from openai import OpenAI

        url = args.base_url or f"{stack.openai.url}/v1"
        key = os.environ.get(args.api_key_env, "sk-offline") if args.base_url else "sk-offline"
        # the haystack's dates are months or years back: a ledger that old keeps them "recent"
        env = {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": key, "OPENAI_MODEL": args.model}
        env["LEDGER_TTL_DAYS"] = "36500"
        judge = OpenAI(base_url=url, api_key=key)
        for number, entry in enumerate(entries):
            hypothesis = play(stack, entry, number, env)
            abstention = "_abs" in entry["question_id"]
            asked = prompt(
                entry["question_type"], entry["question"], entry["answer"], hypothesis, abstention
            )
            verdict = judge.responses.create(
                model=args.judge_model, input=asked, store=False
            ).output_text
            label = "yes" in verdict.lower()
            scores[entry["question_type"]].append(label)
            row = {"question_id": entry["question_id"], "hypothesis": hypothesis, "label": label}
            out.write(json.dumps(row) + "\n")
    judged = "the benchmark's judge prompts" if args.judge_prompts else "a stand-in judge prompt"
    if not args.base_url:
        judged += "; offline: the stand-in model answers and judges, so this is no score"
    every = [label for labels in scores.values() for label in labels]
    print(f"accuracy {sum(every) / max(len(every), 1):.3f} over {len(every)} ({judged})")
    for kind, labels in sorted(scores.items()):
        print(f"  {kind}: {sum(labels) / len(labels):.3f} ({len(labels)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
