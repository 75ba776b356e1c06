"""Figure 6: dollars per 1,000 messages on AWS, computed from the counts measured in this run.

A "message" is one inbound message from a person, answered with one reply (so two stored
turns). Every line is (a count measured by a benchmark) x (a list price), plus the stated
assumptions that this machine cannot measure: AWS-side latencies (Lambda bills wall time, most
of it spent waiting on the model) and how much slower a fraction of a vCPU runs our own code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# us-east-1 list prices, as known to the authors; check https://aws.amazon.com/pricing before
# relying on them. No free tier is applied.
PRICES_AS_OF = "2025"
PRICES_NOTE = "not re-checked online: the machine that ran this has no internet access"
PRICES = {
    "lambda_gb_second_arm64": 0.0000133334,  # first 7.5 billion GB-s a month
    "lambda_request": 0.20 / 1e6,
    "apigw_http_request": 1.00 / 1e6,  # HTTP API, first 300 million a month, per 512 KB
    "sqs_fifo_request": 0.50 / 1e6,  # per 64 KB chunk of payload
    "dynamodb_wru": 0.625 / 1e6,  # on-demand, after the November 2024 price cut
    "dynamodb_rru": 0.125 / 1e6,
    "dynamodb_storage_gb_month": 0.25,
    "cloudwatch_logs_ingest_gb": 0.50,
    "xray_trace_recorded": 5.00 / 1e6,
    "cloudwatch_metric_month": 0.30,  # custom metric, first 10,000, prorated by the hour
    # SnapStart (Python, .NET): the cached snapshot per published version, while it is active
    # (at least 3 hours), and each environment restored from it, both by the function's memory
    "snapstart_cache_gb_second": 0.0000015046,
    "snapstart_restore_gb": 0.0001397998,
}


@dataclass
class Assumptions:
    """What the cost model needs and this machine cannot measure; all overridable from run.py."""

    model_input_per_million: float = 0.40  # a small model's list price; gpt-6-luna's is yours
    model_output_per_million: float = 1.60
    model_cached_input_per_million: float = 0.10  # the same model's cached-input price
    model_reply_seconds: float = 1.5  # the model's latency per reply (Lambda waits, and bills)
    model_fold_seconds: float = 4.0  # per compaction call (longer output)
    dynamodb_call_ms: float = 6.0
    sqs_call_ms: float = 8.0
    whasp_send_ms: float = 150.0
    full_vcpu_mb: int = 1769  # Lambda gives one full vCPU at 1,769 MB; less, proportionally
    sqs_requests_per_message: float = 3.0  # send, receive, delete: batches of one (low traffic)
    sqs_idle_requests_per_month: float = 5 * 3 * 60 * 24 * 30  # 5 pollers, 20 s long polls
    traces_per_message: float = 2.0  # webhook and consumer; an upper bound (sampling records less)
    platform_log_bytes_per_invocation: int = 350  # Lambda's own START / END / REPORT lines
    # Meta's fee per delivered service message (a free-form reply inside the 24-hour window),
    # charged from 1 October 2026: CHANNEL_FEE_SOURCE says where this default comes from
    whatsapp_service_fee: float = 0.0068


# The default service-message fee: a large market's rate (Brazil, in US dollars), not read from
# Meta's own rate card, which no page readable here prints; the operator's market sets theirs.
CHANNEL_FEE_MARKET = "Brazil"
CHANNEL_FEE_EFFECTIVE = "1 October 2026"
CHANNEL_FEE_SOURCE = (
    "Meta charges service messages per delivered message from 1 October 2026 (free since "
    "November 2024; per-message pricing itself since 1 July 2025), by the recipient's country "
    "code. Brazil's service rate is listed equal to its utility rate (AED 0.025 in the "
    "tobachat/whatsapp-api-rates table of Meta's 1 October 2026 rate card, about $0.0068), and a "
    "Meta partner lists Brazil's utility rate at $0.0068 (talkall.com.br, January 2026). Check "
    "Meta's rate card (developers.facebook.com, WhatsApp pricing) for your recipients' market."
)


@dataclass
class Line:
    name: str
    per_message: float  # dollars per inbound message
    formula: str  # how it is computed, with the measured counts
    source: str  # which benchmark measured the counts
    fixed_per_month: float = 0.0
    group: str = "AWS"
    # dollars per message with no prompt cache, where a cache changes the line (the model input)
    uncached_per_message: float | None = None

    @property
    def without_cache(self) -> float:
        return self.per_message if self.uncached_per_message is None else self.uncached_per_message

    def monthly(self, messages: int) -> float:
        return self.per_message * messages + self.fixed_per_month


def function_memory(template: dict[str, Any]) -> dict[str, int]:
    default = int(template.get("Globals", {}).get("Function", {}).get("MemorySize", 128))
    memory = {}
    for name in ("WebhookFunction", "ConsumerFunction", "CompactorFunction"):
        props = template["Resources"][name]["Properties"]
        memory[name] = int(props.get("MemorySize", default))
    return memory


def duration(
    own_ms: float, waits_ms: list[float], memory_mb: int, assumptions: Assumptions
) -> tuple[float, float, float]:
    """One invocation's (CPU share factor, billed ms, GB-seconds): our own code runs slower on a
    fraction of a vCPU, the time spent waiting on services does not."""
    factor = max(1.0, assumptions.full_vcpu_mb / memory_mb)
    ms = math.ceil(sum(waits_ms, own_ms * factor))  # Lambda bills per 1 ms
    return factor, ms, ms / 1000 * memory_mb / 1024


def lines(
    measured: dict[str, Any], template: dict[str, Any], assumptions: Assumptions
) -> list[Line]:
    a = assumptions
    p = PRICES
    memory = function_memory(template)
    webhook = measured["webhook"]["handler"]
    costing = measured["context"]["costing"]
    turn = measured["turn"]
    out: list[Line] = []

    # ---------------------------------------------------------------- Lambda
    w_own = webhook["ours"]["own"]["mean"]
    w_factor, w_ms, w_gbs = duration(w_own, [a.sqs_call_ms], memory["WebhookFunction"], a)
    c_factor, c_ms, c_gbs = duration(
        costing["consumer_own_ms"],
        [
            costing["consumer_dynamodb_calls"] * a.dynamodb_call_ms,
            costing["consumer_model_calls"] * a.model_reply_seconds * 1000,
            costing["consumer_whasp_calls"] * a.whasp_send_ms,
        ],
        memory["ConsumerFunction"],
        a,
    )
    k_factor, k_ms, k_gbs = duration(
        costing["compactor_own_ms"],
        [
            costing["compactor_dynamodb_calls"] * a.dynamodb_call_ms,
            costing["compactor_model_calls"] * a.model_fold_seconds * 1000,
        ],
        memory["CompactorFunction"],
        a,
    )
    k_per_turn = costing["compactor_invocations_per_turn"]
    out.append(
        Line(
            "Lambda: webhook duration",
            w_gbs * p["lambda_gb_second_arm64"],
            f"({w_own:.2f} ms own code x {w_factor:.1f} CPU share at "
            f"{memory['WebhookFunction']} MB + {a.sqs_call_ms:g} ms SQS) = {w_ms:.0f} ms x "
            f"{memory['WebhookFunction'] / 1024:g} GB = {w_gbs:.4f} GB-s x "
            f"${p['lambda_gb_second_arm64']:.10f}",
            "figure 1 (webhook own-code time, 1 SQS call per request)",
        )
    )
    out.append(
        Line(
            "Lambda: consumer duration",
            c_gbs * p["lambda_gb_second_arm64"],
            f"({costing['consumer_own_ms']:.1f} ms own code x {c_factor:.1f} + "
            f"{costing['consumer_dynamodb_calls']:.2f} DynamoDB calls x {a.dynamodb_call_ms:g} ms"
            f" + {costing['consumer_model_calls']:.2f} model calls x {a.model_reply_seconds:g} s"
            f" + {costing['consumer_whasp_calls']:.2f} sends x {a.whasp_send_ms:g} ms) = "
            f"{c_ms:.0f} ms x {memory['ConsumerFunction'] / 1024:g} GB = {c_gbs:.4f} GB-s",
            "figure 3 run (consumer own-code time and calls per turn)",
        )
    )
    out.append(
        Line(
            "Lambda: compactor duration",
            k_per_turn * k_gbs * p["lambda_gb_second_arm64"],
            f"{k_per_turn:.3f} invocations per message x ({costing['compactor_own_ms']:.1f} ms"
            f" own code x {k_factor:.1f} + {costing['compactor_dynamodb_calls']:.2f} DynamoDB "
            f"calls x {a.dynamodb_call_ms:g} ms + {costing['compactor_model_calls']:.2f} model "
            f"calls x {a.model_fold_seconds:g} s) = {k_ms:.0f} ms x "
            f"{memory['CompactorFunction'] / 1024:g} GB",
            "figure 3 run (compactor invocations, time and calls)",
        )
    )
    invocations = 2 + k_per_turn  # webhook, consumer (batches of one at low traffic), compactor
    out.append(
        Line(
            "Lambda: requests",
            invocations * p["lambda_request"],
            f"(1 webhook + 1 consumer + {k_per_turn:.3f} compactor) invocations x "
            f"${p['lambda_request'] * 1e6:.2f}/M",
            "figure 3 run (compactor invocations per message)",
        )
    )

    # ---------------------------------------------------------------- edge and queue
    out.append(
        Line(
            "API Gateway HTTP API",
            p["apigw_http_request"],
            f"1 request (< 512 KB) x ${p['apigw_http_request'] * 1e6:.2f}/M",
            "one webhook delivery per message",
        )
    )
    out.append(
        Line(
            "SQS FIFO",
            a.sqs_requests_per_message * p["sqs_fifo_request"],
            f"{a.sqs_requests_per_message:g} requests (1 SendMessage measured in figure 1; "
            f"receive and delete, batches of one) x ${p['sqs_fifo_request'] * 1e6:.2f}/M, plus "
            f"Lambda's idle polling ~{a.sqs_idle_requests_per_month / 1e6:.2f} M requests/month",
            "figure 1 (1 SendMessage per request); polling assumed",
            fixed_per_month=a.sqs_idle_requests_per_month * p["sqs_fifo_request"],
        )
    )

    # ---------------------------------------------------------------- DynamoDB
    amortised = turn["ours_with_compaction"]
    out.append(
        Line(
            "DynamoDB writes (on-demand)",
            amortised["wru"] * p["dynamodb_wru"],
            f"{amortised['wru']:.2f} WRU per message (turn {turn['ours']['wru']:.2f} + "
            f"compaction spread over the turns) x ${p['dynamodb_wru'] * 1e6:.3f}/M",
            "figure 2 (item sizes, transactions count double)",
        )
    )
    out.append(
        Line(
            "DynamoDB reads (on-demand)",
            amortised["rru"] * p["dynamodb_rru"],
            f"{amortised['rru']:.2f} RRU per message (turn {turn['ours']['rru']:.2f}, strongly "
            f"consistent, + compaction) x ${p['dynamodb_rru'] * 1e6:.3f}/M",
            "figure 2",
        )
    )

    # ---------------------------------------------------------------- the model
    reply_in, reply_out = costing["reply_input_tokens"], costing["reply_output_tokens"]
    compaction = measured["context"]["compaction"]
    folds = costing["folds_per_turn"]
    fold_in = compaction.get("input_tokens_per_fold", 0)  # none when nothing was folded
    fold_out = compaction.get("output_tokens_per_fold", 0)
    tokens_in, cached = model_input_tokens(measured)
    tokens_out = reply_out + folds * fold_out
    share = cache_share(measured)
    out.append(
        Line(
            "Model: input tokens",
            (
                (tokens_in - cached) * a.model_input_per_million
                + cached * a.model_cached_input_per_million
            )
            / 1e6,
            f"({reply_in:.0f} per reply + {folds:.3f} folds x {fold_in:.0f}) = {tokens_in:.0f} "
            f"o200k_base tokens, of which {cached:.0f} ({share:.0%} of a reply's) served by a "
            f"prompt cache x ${a.model_cached_input_per_million:g}/M and {tokens_in - cached:.0f}"
            f" x ${a.model_input_per_million:g}/M (no cache: "
            f"${tokens_in * a.model_input_per_million / 1e6 * 1000:.4f} per 1,000)",
            "figure 3 (mean model input per turn over 1,000 messages), figure 4, and figure 12 "
            "(the share of reply input a prompt cache can serve)",
            group="Model",
            uncached_per_message=tokens_in * a.model_input_per_million / 1e6,
        )
    )
    out.append(
        Line(
            "Model: output tokens",
            tokens_out * a.model_output_per_million / 1e6,
            f"({reply_out:.0f} per reply + {folds:.3f} folds x {fold_out:.0f}) = {tokens_out:.0f}"
            f" x ${a.model_output_per_million:g}/M (replies of 200-400 characters)",
            "figure 3 and figure 4",
            group="Model",
        )
    )

    out.append(channel_line(measured, a))

    # ---------------------------------------------------------------- observability
    log_bytes = (
        webhook["log_bytes_per_request"]
        + costing["consumer_log_bytes_per_turn"]
        + costing["compactor_log_bytes_per_turn"]
        + invocations * a.platform_log_bytes_per_invocation
    )
    out.append(
        Line(
            "CloudWatch Logs ingestion",
            log_bytes / 1e9 * p["cloudwatch_logs_ingest_gb"],
            f"({webhook['log_bytes_per_request']:.0f} webhook + "
            f"{costing['consumer_log_bytes_per_turn']:.0f} consumer + "
            f"{costing['compactor_log_bytes_per_turn']:.0f} compactor bytes measured + "
            f"{invocations:.2f} x {a.platform_log_bytes_per_invocation} platform) = "
            f"{log_bytes:.0f} bytes x ${p['cloudwatch_logs_ingest_gb']:.2f}/GB",
            "figures 1 and 3 (Powertools JSON logs and EMF metrics, at INFO)",
            group="Observability",
        )
    )
    tracing = template.get("Globals", {}).get("Function", {}).get("Tracing") == "Active"
    if tracing:
        out.append(
            Line(
                "X-Ray traces (Tracing: Active)",
                a.traces_per_message * p["xray_trace_recorded"],
                f"{a.traces_per_message:g} traces x ${p['xray_trace_recorded'] * 1e6:.2f}/M "
                "(upper bound: the default sampling rule records 1/s + 5%)",
                "template.yaml (Tracing: Active)",
                group="Observability",
            )
        )
    metric_names = sorted(
        set(measured["webhook"]["handler"]["metric_names"]) | set(costing["metric_names"])
    )
    out.append(
        Line(
            "CloudWatch custom metrics",
            0.0,
            f"{len(metric_names)} metrics seen in the EMF output x "
            f"${p['cloudwatch_metric_month']:.2f}/month (an upper bound: prorated by the hours in "
            "which each is published; error-path metrics add more when they occur)",
            "figures 1 and 3 (" + ", ".join(n.split("[")[0] for n in metric_names) + ")",
            fixed_per_month=len(metric_names) * p["cloudwatch_metric_month"],
            group="Observability",
        )
    )
    return out


def channel_line(measured: dict[str, Any], assumptions: Assumptions) -> Line:
    """Meta's service-message fee: every reply part is a delivered message, so a reply split into
    N parts costs N fees; the parts sent per message are the consumer's sends, measured."""
    sends = measured["context"]["costing"]["consumer_whasp_calls"]
    fee = assumptions.whatsapp_service_fee
    return Line(
        "WhatsApp: service messages (Meta)",
        sends * fee,
        f"{sends:.2f} reply parts sent per message x ${fee:g} per delivered service message "
        f"({CHANNEL_FEE_MARKET}, from {CHANNEL_FEE_EFFECTIVE})",
        "figure 3 run (sends per turn: one per reply part)",
        group="Channel",
    )


def reply_parts_cap(template: dict[str, Any], assumptions: Assumptions) -> dict[str, Any]:
    """What MaxReplyParts' default costs at most: a reply cut into that many parts pays that many
    service-message fees, against one part's fee."""
    parameters = template["Parameters"]
    parts = int(parameters["MaxReplyParts"]["Default"])
    fee = assumptions.whatsapp_service_fee
    return {
        "parts": parts,
        "fee": fee,
        "dollars": parts * fee,
        "extra": (parts - 1) * fee,
        "reply_tokens": int(parameters["MaxReplyTokens"]["Default"]),
    }


def model_input_tokens(measured: dict[str, Any]) -> tuple[float, float]:
    """Model input tokens per message (a reply's, and the folds' spread over the turns), and how
    many of them a prompt cache serves: figure 12's share of the reply's. A fold's input is
    mostly turns no earlier request sent, so none of it is counted as cached."""
    costing = measured["context"]["costing"]
    fold_in = measured["context"]["compaction"].get("input_tokens_per_fold", 0)
    reply_in = costing["reply_input_tokens"]
    tokens_in = reply_in + costing["folds_per_turn"] * fold_in
    return tokens_in, reply_in * cache_share(measured)


def cache_share(measured: dict[str, Any]) -> float:
    """The share of reply input tokens a provider's prompt cache can serve (figure 12, our
    order), assumed served at the cached-input price. OpenAI caches a repeated prefix of 1,024
    tokens or more automatically, in 128-token increments, with no extra fee (OpenAI cookbook,
    "Prompt Caching 201"); a hit is likely, never promised, so cost.md shows the uncached price
    beside it."""
    return measured["context"]["cache"]["ours"]["share"]


def total(lines: list[Line], *, cache: bool = True) -> float:
    """Dollars per message over the lines, with the prompt cache's share priced as cached, or
    every input token at the full price."""
    return sum(line.per_message if cache else line.without_cache for line in lines)


def full_history_model_input(measured: dict[str, Any], assumptions: Assumptions) -> float:
    """Dollars per message for the input tokens if the full history were sent instead."""
    context = measured["context"]["context"]
    turns = measured["context"]["turns"]
    return context["full_total_tokens"] / turns * assumptions.model_input_per_million / 1e6


def worst_day(template: dict[str, Any], assumptions: Assumptions) -> dict[str, Any]:
    """One person's worst day of model tokens at the template's default limits, in dollars.

    Every call made for a person counts on their day (memagent.memory.budget): replies, photo
    descriptions, voice note transcriptions and memory folds; past the limit no reply,
    description or transcription is made. So the counted tokens are at most PersonDailyTokens
    (and the one call that crosses it), priced here at the input rate, plus PersonDailyTurns
    full replies at the output rate (an upper bound: those output tokens are among the counted
    ones already). What the limit does not stop: the folds of what the person writes past it
    (still remembered, and folded like the rest), at most one folded turn's input per message
    plus its share of the fold's own prompt, summary and notes."""
    from memagent.compaction import fold as compaction
    from memagent.memory import MemorySettings

    defaults = {
        name: int(value.get("Default", 0)) for name, value in template["Parameters"].items()
        if name in ("PersonDailyTokens", "PersonDailyTurns", "MaxReplyTokens")
    }  # fmt: skip
    tokens, turns = defaults["PersonDailyTokens"], defaults["PersonDailyTurns"]
    reply = defaults["MaxReplyTokens"]
    a = assumptions
    counted = tokens * a.model_input_per_million / 1e6
    counted += turns * reply * a.model_output_per_million / 1e6
    # a fold's own input, once per run: its prompt (~2 KB), the summary (200 words of about 6
    # characters) and every note it may retire, dated; each folded turn is FOLD_TURN_CHARS at most
    settings = MemorySettings(agent_id="-", table_name="-")
    per_fold_chars = (
        2_000
        + compaction.SUMMARY_MAX_WORDS * 6
        + compaction.FOLD_MAX_FACTS * (settings.max_fact_chars + 30)
    )
    folded_per_run = settings.compact_threshold - settings.compact_keep
    per_message_tokens = (compaction.FOLD_TURN_CHARS + per_fold_chars / folded_per_run) / 4
    per_message = per_message_tokens * a.model_input_per_million / 1e6
    return {
        "tokens": tokens,
        "turns": turns,
        "reply": reply,
        "dollars": counted,
        "fold_tokens_per_message": per_message_tokens,
        "fold_dollars_per_1000": per_message * 1000,
    }
