"""bench/longmemeval.py plays a LongMemEval-format file through the handlers: here a
three-question sample written for this test, with the offline model as agent and judge."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_sample_is_played_answered_and_judged(tmp_path):
    # given three questions (a knowledge update, a temporal one, a single-session one)
    sample = ROOT / "tests" / "bench" / "longmemeval-sample.json"
    out = tmp_path / "results.jsonl"
    # when the runner plays them against the offline model
    command = [sys.executable, "bench/longmemeval.py", str(sample), "--out", str(out)]
    done = subprocess.run(  # noqa: S603 (our own script, fixed arguments)
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # then each question has the agent's reply (the offline label, answering the question)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["question_id"] for r in rows] == ["sample_ku_1", "sample_tr_1", "sample_ssu_1"]
    assert all(r["hypothesis"].startswith("[offline model]") for r in rows)
    assert "Where do I live now?" in rows[0]["hypothesis"]
    # and a verdict, with accuracy per question type, said to be no score
    assert all(isinstance(r["label"], bool) for r in rows)
    for kind in ("knowledge-update", "temporal-reasoning", "single-session-user"):
        assert f"{kind}: " in done.stdout
    assert "offline" in done.stdout and "stand-in judge prompt" in done.stdout
