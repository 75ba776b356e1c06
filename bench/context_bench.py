"""Figures 3 and 4: the model's input per turn over a long conversation, and per compaction.

One person writes `turns` messages (1,000 messages with the replies for 500). Each goes through
the real consumer handler; compaction runs when the stream fires it, through the real compactor
handler. For every turn the request the model received is measured (instructions plus every
input item), against what sending the whole history would have cost (the system prompt plus every
message so far). For every compaction, our one structured request is measured against the
reference's two requests (bench/reference_compaction.py) built from the same folded messages.

The run also yields what the cost model needs: handler times (and the part spent waiting on
DynamoDB, the model and whasp), calls per turn and per fold, log bytes, model tokens.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from typing import Any

import harness
import memory_bench
import reference_compaction
from conversation import conversation, iso, realistic_model
from pipeline import Pipeline

PHONE = "+447700900777"
TIDY_EVERY = 25
WARM_TURNS = 5  # the first turns pay for lazy imports (openai) and connections: not timed


def _size(tokenizer: harness.Tokenizer, texts: list[str]) -> tuple[int, int]:
    return sum(len(t) for t in texts), tokenizer.count_all(texts)


def _new_calls(stack: harness.Stack, seen: int) -> list[dict[str, Any]]:
    return [r["json"] for r in stack.openai.requests[seen:] if r["path"] == "/v1/responses"]


def _is_fold(request: dict[str, Any]) -> bool:
    return ((request.get("text") or {}).get("format") or {}).get("type") == "json_schema"


def _fold_texts(request: dict[str, Any]) -> list[str]:
    """What a structured request puts in front of the model, its JSON schema included."""
    schema = ((request.get("text") or {}).get("format") or {}).get("schema")
    return [*harness.request_texts(request), json.dumps(schema) if schema else ""]


def run(stack: harness.Stack, *, turns: int, tokenizer: harness.Tokenizer) -> dict[str, Any]:
    stack.openai.responder = realistic_model
    pipeline = Pipeline(stack, "ctx")
    pk = harness.pk(PHONE)
    history: list[str] = []  # every message so far, for the full-history baseline
    rows: list[dict[str, Any]] = []
    reply_output: list[tuple[int, int]] = []
    sent: list[tuple[Any, dict[str, Any]]] = []  # (when, reply request): figure 12
    for index, said in enumerate(conversation(turns)):
        seen = len(stack.openai.requests)
        event = harness.whasp_message(said.text, chat=PHONE, created_at=iso(said.at))
        pipeline.turn(event)
        calls = _new_calls(stack, seen)
        replies = [c for c in calls if not _is_fold(c)]
        if len(replies) != 1:
            raise RuntimeError(f"turn {index}: expected one reply call, saw {len(replies)}")
        ours_chars, ours_tokens = _size(tokenizer, harness.request_texts(replies[0]))
        sent.append((said.at, replies[0]))
        history.append(said.text.strip())
        full_chars, full_tokens = _size(tokenizer, [harness.SYSTEM_PROMPT, *history])
        reply = stack.whasp.sent[-1]["text"]
        history.append(reply)
        reply_output.append(_size(tokenizer, [reply]))
        rows.append(
            {
                "turn": index + 1,
                "messages": 2 * index + 1,
                "ours_chars": ours_chars,
                "ours_tokens": ours_tokens,
                "ours_items": len(replies[0].get("input") or []),
                "full_chars": full_chars,
                "full_tokens": full_tokens,
                "folded": len(pipeline.folds),
            }
        )
        if index % TIDY_EVERY == TIDY_EVERY - 1:
            pipeline.tidy(pk)

    return {
        "turns": turns,
        "rows": rows,
        "context": _context_summary(rows),
        "compaction": _compaction(pipeline, tokenizer),
        "costing": _costing(pipeline, rows, reply_output),
        "memory_chars_at_end": _memory_chars(pipeline, pk),
        "cache": memory_bench.cache(sent, tokenizer),
    }


def _context_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    last = rows[-1]
    half = rows[len(rows) // 2 :]

    def total(key: str) -> int:
        return sum(r[key] for r in rows)

    return {
        "last": {k: last[k] for k in ("ours_chars", "ours_tokens", "full_chars", "full_tokens")},
        "ours_max_chars": max(r["ours_chars"] for r in rows),
        "ours_max_chars_second_half": max(r["ours_chars"] for r in half),
        "ours_max_tokens": max(r["ours_tokens"] for r in rows),
        "ours_mean_chars": statistics.fmean(r["ours_chars"] for r in rows),
        "ours_mean_tokens": statistics.fmean(r["ours_tokens"] for r in rows),
        "ours_total_chars": total("ours_chars"),
        "full_total_chars": total("full_chars"),
        "ours_total_tokens": total("ours_tokens"),
        "full_total_tokens": total("full_tokens"),
    }


def _compaction(pipeline: Pipeline, tokenizer: harness.Tokenizer) -> dict[str, Any]:
    folds = []
    for fold in pipeline.folds:
        if fold.request is None or not fold.turns:
            continue
        ours_chars, ours_tokens = _size(tokenizer, _fold_texts(fold.request))
        reference = reference_compaction.requests(
            "gpt-6-luna", fold.summary, fold.facts, fold.turns
        )
        ref_sizes = [_size(tokenizer, harness.request_texts(r)) for r in reference]
        out_chars, out_tokens = _size(tokenizer, [fold.output_text])
        folds.append(
            {
                "folded": len(fold.turns),
                "ours_calls": 1,
                "ours_chars": ours_chars,
                "ours_tokens": ours_tokens,
                "reference_calls": len(reference),
                "reference_chars": sum(c for c, _ in ref_sizes),
                "reference_tokens": sum(t for _, t in ref_sizes),
                "output_chars": out_chars,
                "output_tokens": out_tokens,
            }
        )
    if not folds:
        return {"folds": 0}
    folded = sum(f["folded"] for f in folds)

    def per20(key: str) -> float:
        return sum(f[key] for f in folds) * 20 / folded

    return {
        "folds": len(folds),
        "folded_messages": folded,
        "ours_calls_per20": sum(f["ours_calls"] for f in folds) * 20 / folded,
        "reference_calls_per20": sum(f["reference_calls"] for f in folds) * 20 / folded,
        "ours_chars_per20": per20("ours_chars"),
        "reference_chars_per20": per20("reference_chars"),
        "ours_tokens_per20": per20("ours_tokens"),
        "reference_tokens_per20": per20("reference_tokens"),
        "output_chars_per_fold": statistics.fmean(f["output_chars"] for f in folds),
        "output_tokens_per_fold": statistics.fmean(f["output_tokens"] for f in folds),
        "input_chars_per_fold": statistics.fmean(f["ours_chars"] for f in folds),
        "input_tokens_per_fold": statistics.fmean(f["ours_tokens"] for f in folds),
    }


def _costing(
    pipeline: Pipeline, rows: list[dict[str, Any]], reply_output: list[tuple[int, int]]
) -> dict[str, Any]:
    """Per turn and per compaction: what the cost model multiplies by prices."""
    timed = pipeline.turns[WARM_TURNS:] or pipeline.turns
    compactions = pipeline.compactions

    def mean(values: Iterable[float]) -> float:
        values = list(values)
        return statistics.fmean(values) if values else 0.0

    def waits(invocations: list[Any], name: str) -> float:
        return mean(i.waits.get(name, (0.0, 0))[1] for i in invocations)

    turns = len(pipeline.turns)
    return {
        "turns": turns,
        "consumer_ms": mean(i.seconds for i in timed) * 1000,
        "consumer_own_ms": mean(i.own_seconds for i in timed) * 1000,
        "consumer_dynamodb_calls": waits(timed, "dynamodb"),
        "consumer_model_calls": waits(timed, "model"),
        "consumer_whasp_calls": waits(timed, "whasp"),
        "compactor_invocations": len(compactions),
        "compactor_invocations_per_turn": len(compactions) / turns,
        "compactor_ms": mean(i.seconds for i in compactions) * 1000,
        "compactor_own_ms": mean(i.own_seconds for i in compactions) * 1000,
        "compactor_dynamodb_calls": waits(compactions, "dynamodb"),
        "compactor_model_calls": waits(compactions, "model"),
        "folds_per_turn": len(pipeline.folds) / turns,
        "reply_input_chars": mean(r["ours_chars"] for r in rows),
        "reply_input_tokens": mean(r["ours_tokens"] for r in rows),
        "reply_output_chars": mean(c for c, _ in reply_output),
        "reply_output_tokens": mean(t for _, t in reply_output),
        "chars_per_token": sum(r["ours_chars"] for r in rows) / sum(r["ours_tokens"] for r in rows),
        "consumer_log_bytes_per_turn": pipeline.consumer_logs.bytes / turns,
        "compactor_log_bytes_per_turn": pipeline.compactor_logs.bytes / turns,
        "metric_names": sorted(
            pipeline.consumer_logs.metric_names | pipeline.compactor_logs.metric_names
        ),
    }


def _memory_chars(pipeline: Pipeline, pk: str) -> dict[str, int]:
    memory = pipeline.store.load(pk)
    return {
        "summary": len(memory.summary.text) if memory.summary else 0,
        "facts": len(memory.facts),
        "pending_turns": len(memory.turns),
    }


def plot(result: dict[str, Any], path: Any) -> None:
    """Both curves, in tokens, to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import StrMethodFormatter

    rows = result["rows"]
    messages = [r["messages"] for r in rows]
    figure, axis = plt.subplots(figsize=(9, 5), dpi=110)
    axis.plot(messages, [r["full_tokens"] for r in rows], label="full history (baseline)")
    axis.plot(messages, [r["ours_tokens"] for r in rows], label="ours: summary + facts + recent")
    axis.set_xlabel("messages in the conversation (person's and agent's)")
    axis.set_ylabel("model input per turn, tokens (o200k_base)")
    axis.set_title(f"Model input per turn over a {2 * len(rows):,}-message conversation")
    axis.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    axis.grid(True, alpha=0.3)
    axis.legend(loc="upper left")
    for curve, offset in (("ours", (-40, 10)), ("full", (-60, -15))):  # each curve's last value
        last = rows[-1][f"{curve}_tokens"]
        axis.annotate(f"{last:,}", (messages[-1], last), textcoords="offset points", xytext=offset)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
