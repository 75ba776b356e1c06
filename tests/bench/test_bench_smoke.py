"""`make bench` still runs: bench/run.py with tiny sizes, as a subprocess, as a person runs it.

It asserts that every figure is reported and that the must-be counts hold; never a time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _as_a_person_has_it() -> dict[str, str]:
    """The environment without what the tests' conftest sets for the handlers (Powertools'
    namespace and service, the person key): a shell has none of it."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("POWERTOOLS_") and name != "PERSON_KEY"
    }


def test_quick_bench_writes_every_figure(tmp_path):
    # given the benchmarks with tiny sizes, writing into a scratch folder
    out, plot, cost, data = (tmp_path / name for name in ("r.md", "c.png", "cost.md", "m.json"))
    # when they run as `make bench` runs them
    command = [sys.executable, "bench/run.py", "--quick", "--out", str(out), "--plot", str(plot)]
    command += ["--cost-doc", str(cost), "--json", str(data)]
    completed = subprocess.run(  # noqa: S603 (our own script, fixed arguments)
        command,
        cwd=ROOT,
        env=_as_a_person_has_it(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    # then every figure is in the report, the plot is a PNG and the cost doc has its table
    report = out.read_text()
    for heading in (
        "## 1. Webhook",
        "## 2. A turn",
        "## 3. Context size",
        "## 4. Compaction",
        "## 5. The local stack end to end",
        "## 6. Cost",
        "## 7. Hardening",
        "## 8. Failure timing",
        "## 9. Bursts",
        "## 10. Tools",
        "## 11. Memory over a month",
        "## 12. The prompt cache",
        "## 13. Follow-ups",
    ):
        assert heading in report
    assert plot.read_bytes().startswith(b"\x89PNG")
    assert "| **total** |" in cost.read_text()
    assert "## SnapStart" in cost.read_text()
    # the total prices the prompt cache's share as cached, the uncached total beside it, no less
    per_1000 = {
        row.split("|")[1].strip(" *"): float(row.split("|")[2].strip(" *$").split()[0])
        for row in cost.read_text().splitlines()
        if row.startswith(("| **total** |", "| total without a prompt cache |"))
    }
    assert per_1000["total"] <= per_1000["total without a prompt cache"]
    assert "Prompt cache: the provider serves the" in cost.read_text()
    # every function's cold start against its baselines
    for function in ("webhook", "consumer", "compactor"):
        assert f"functions/{function}/app.py" in report
    assert "consumer cold import + init" in report and "(`import openai`)" in report
    # and the counts that must be zero are zero, even at this size
    measured = json.loads(data.read_text())
    assert measured["tools"]["cells_not_exactly_one"] == 0
    assert measured["follow_ups"]["cells_not_exactly_one"] == 0
    assert measured["follow_ups"]["reminders_per_follow_up"] == 1.0
    hardening = measured["hardening"]
    assert hardening["crash"]["cells_not_exactly_one"] == 0
    bursts = measured["bursts"]
    if set(bursts["burst_sizes"]) != {"1"}:  # some burst has several lines: fewer calls
        assert bursts["coalesced"]["model_calls"] < bursts["one_by_one"]["model_calls"]
    for run in ("coalesced", "one_by_one"):
        assert bursts[run]["not_covered_by_one_sent_reply"] == 0
    e2e = measured["e2e"]
    if "pending" not in e2e:
        for run in ("parallel", "baseline"):
            assert e2e[run]["ordering_violations"] == 0
            assert e2e[run]["duplicates_sent"] == 0
            assert e2e[run]["missing"] == 0
    # the memory figure's probes, ours against today's fold, and the cache figure's two orders
    memory = measured["memory"]
    assert set(memory) >= {"ours", "today", "full"}
    assert memory["ours"]["Where do I live now?"]["no_stale"]
    assert not memory["today"]["Where do I live now?"]["no_stale"]
    cache = measured["context"]["cache"]
    assert cache["ours"]["input_tokens"] > 0 and cache["today"]["input_tokens"] > 0
