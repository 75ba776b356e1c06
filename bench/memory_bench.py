"""Figures 11 and 12: what the memory still holds true after four weeks, and how much of each
reply request a prompt cache could serve.

Figure 11 measures the pipeline given a model that does its part, not a model: a scripted month
(facts stated, then changed, corrected and contradicted; plans said as "tomorrow"; lines in
English, French, Portuguese and Spanish) goes through the real consumer and compactor, folded by
the offline model, which names outdated facts and dates plans as a good model would. Probes
then ask for each changed fact and each dated plan; the check is judge-free: do the facts the
context gives hold the current value and no stale one, and the plan's absolute date?
Beside it: today's behaviour (the same run with a fold that names no outdated fact and keeps
"tomorrow" as said), and the full history (every message, as sent without times).

Figure 12 replays figure 3's reply requests: a request's cacheable share is its longest common
prefix with the same person's previous requests within the cache's retention, rounded down to
OpenAI's documented blocks (nothing under 1,024 tokens, then 128-token steps); ours against the
same requests in today's order (the days line right after the system prompt, the facts picked
for the message among the others, before the turns).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import harness
from conversation import iso
from pipeline import Pipeline

from devstack.fake_openai import offline_model

PHONE = "+447700900888"
START = datetime.now(UTC).replace(hour=9, minute=0, second=0, microsecond=0) - timedelta(days=27)
# (day, what the person says); the plans' dates are START + day + 1
SCRIPT = [
    (0, "Hi! My name is Maya"),
    (0, "I live in Leeds"),
    (1, "I work as a nurse"),
    (2, "I have a dog called Biscuit"),
    (9, "We moved to London last month"),
    (12, "my interview is tomorrow"),
    (15, "I don't have a dog, that was my sister's"),
    (18, "I work as a teacher now"),
    (22, "J'habite à Paris maintenant"),
    (25, "my dentist is tomorrow"),
]
FILLER = [
    "ok, busy day today",
    "Bonjour ! Je suis un peu fatiguée aujourd'hui",
    "Hoje fui correr no parque com a minha irmã",
    "¿Qué tal? Hoy hace mucho calor",
    "haha yes, thanks!",
]
# (question, current value, stale values)
CHANGED = [
    ("Where do I live now?", "Paris", ["Leeds", "London"]),
    ("What is my job?", "teacher", ["nurse"]),
    ("Do I have a dog?", None, ["Biscuit"]),
    ("What is my name?", "Maya", []),
]
PLANS = [("When was my interview?", 12), ("When is my dentist?", 25)]
# A fold every few turns, so a month of a few lines a day folds as a busier month would.
FOLD_OFTEN = {"COMPACT_THRESHOLD": "8", "COMPACT_KEEP": "4"}


def _day(at: datetime) -> str:
    return f"{at:%a} {at.day} {at:%b %Y}"


def _today_fold(request: dict[str, Any]) -> str:
    """Today's fold: the same model, but it names nothing outdated and keeps words as said."""
    if not (request.get("text") or {}).get("format"):
        return offline_model(request)
    undated = re.sub(r" \(\w{3} \d+ \w{3} \d{4} \d\d:\d\d\)", "", str(request.get("input")))
    answer = json.loads(offline_model({**request, "input": undated}))
    return json.dumps({**answer, "outdated": [], "confirmed": []})


def _month(pipeline: Pipeline, fillers: int) -> list[str]:
    """The scripted month through the pipeline, then enough small talk that all of it is
    folded; returns everything the person said."""
    said = []
    for number, (day, text) in enumerate([*SCRIPT, (26, FILLER[0]), (26, FILLER[1])]):
        lines = [text, *(FILLER[(number + i) % len(FILLER)] for i in range(fillers))]
        for minute, line in enumerate(lines):
            at = START + timedelta(days=day, minutes=10 * minute)
            pipeline.turn(harness.whasp_message(line, chat=PHONE, created_at=iso(at)))
            said.append(line)
    return said


def _probe(pipeline: Pipeline, question: str) -> str:
    """The facts the context built for `question` gives (the summary is left out: a good one
    may well tell the history, "moved from Leeds to London")."""
    seen = len(pipeline.stack.openai.requests)
    pipeline.turn(harness.whasp_message(question, chat=PHONE, created_at=harness.iso_now()))
    [reply] = [r["json"] for r in pipeline.stack.openai.requests[seen:] if "text" not in r["json"]]
    picked = reply["input"][-1]["content"].partition("\n\n")[2]  # the tail, after "## Now"
    stable = reply["instructions"].partition("## Notes about this person")[2]
    return stable + picked


def _score(text: str, current: str | None, stale: list[str], date: str | None = None) -> dict:
    return {
        "current": current is None or current in text,
        "no_stale": not any(old in text for old in stale),
        "date": date is not None and date in text,
    }


def run(stack: harness.Stack, *, fillers: int) -> dict[str, Any]:
    result: dict[str, Any] = {"fillers": fillers}
    for name, model in (("ours", offline_model), ("today", _today_fold)):
        stack.openai.responder = model
        pipeline = Pipeline(stack, f"mem{name}", env=FOLD_OFTEN)
        history = " ".join(_month(pipeline, fillers))
        probes = [(q, _score(_probe(pipeline, q), now, old)) for q, now, old in CHANGED]
        for question, day in PLANS:
            date = _day(START + timedelta(days=day + 1))
            probes.append((question, _score(_probe(pipeline, question), None, [], date)))
        result[name] = dict(probes)
        result["folds"] = len(pipeline.folds)
    full = [(q, _score(history, now, old)) for q, now, old in CHANGED]
    full += [(q, _score(history, None, [], "tomorrow and no date")) for q, _ in PLANS]
    result["full"] = dict(full)
    return result


def tally(probes: dict[str, dict[str, bool]]) -> tuple[int, int]:
    """(changed facts right: current and no stale, dated plans with their date)."""
    return (
        sum(s["current"] and s["no_stale"] for q, s in probes.items() if q not in dict(PLANS)),
        sum(s["date"] for q, s in probes.items() if q in dict(PLANS)),
    )


# ---------------------------------------------------------------------- figure 12


def _render(request: dict[str, Any]) -> str:
    items = request.get("input") or []
    return "\n".join(
        [request.get("instructions") or "", *(f"{m['role']}: {m['content']}" for m in items)]
    )


def _today_order(request: dict[str, Any]) -> dict[str, Any]:
    """The same request as today's builder ordered it: the days line (and a new number) right
    after the system prompt, the summary, then the facts with those picked for this message
    among them, then the turns; no date line, no dated turns."""
    items = request["input"]
    tail = items[-1]["content"] if items and items[-1]["role"] == "developer" else ""
    head, _, picked = tail.partition("\n\n")
    first = "".join(f"\n\n{line}" for line in head.splitlines()[2:])  # after "## Now", "It is"
    facts = "".join(f"\n{line}" for line in picked.splitlines() if line.startswith("- "))
    notes = request["instructions"].removeprefix(harness.SYSTEM_PROMPT)
    turns = [m for m in items if m["role"] in ("user", "assistant")]
    return {"instructions": f"{harness.SYSTEM_PROMPT}{first}{notes}{facts}", "input": turns}


def _lcp(a: str, b: str) -> int:
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if a[:mid] == b[:mid] else (low, mid - 1)
    return low


def cache(
    requests: list[tuple[datetime, dict[str, Any]]],
    tokenizer: harness.Tokenizer,
    *,
    retention: timedelta = timedelta(hours=24),
    look_back: int = 8,
) -> dict[str, Any]:
    """Input tokens and the cacheable ones, ours and in today's order (figure 12)."""
    out: dict[str, Any] = {
        "requests": len(requests),
        "retention_hours": retention / timedelta(hours=1),
    }
    for name, shape in (("ours", lambda r: r), ("today", _today_order)):
        texts = [(at, _render(shape(request))) for at, request in requests]
        total = cached = 0
        for index, (at, text) in enumerate(texts):
            earlier = [
                t for when, t in texts[max(0, index - look_back) : index] if at - when <= retention
            ]
            common = max((_lcp(text, t) for t in earlier), default=0)
            total += tokenizer.count(text)
            shared = tokenizer.count(text[:common]) if common else 0
            cached += shared // 128 * 128 if shared >= 1024 else 0
        out[name] = {
            "input_tokens": total,
            "cached_tokens": cached,
            "share": cached / total if total else 0.0,
        }
    return out
