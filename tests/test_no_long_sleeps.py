"""No real sleep longer than 50 ms in the code the tests run.

tests/conftest.py guards every time.sleep in the test process at run time. The local stack's
functions, the demo and the benchmarks also run in child processes, out of that guard's sight,
so this reads the code instead: a `time.sleep(<number>)` over the limit anywhere in the code the
tests reach fails here, naming the file and line. A sleep whose length is computed (a backoff,
a scaled wait) is checked at run time by the guard where it runs in the test process.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import MAX_SLEEP_SECONDS

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("layers", "functions", "devstack", "tests", "bench", "scripts")
# Sleeps that never hold up a test, each with the reason.
ALLOWED = {
    # a child environment's watch on its parent: a daemon thread that only ends an orphan
    ("devstack/runtime.py", "_exit_with_parent"),
}


def long_literal_sleeps(path: Path) -> list[tuple[int, str, float]]:
    """(line, enclosing function, seconds) of each sleep(<literal>) over the limit in `path`."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        if isinstance(node, ast.Call) and node.args:
            callee, argument = node.func, node.args[0]
            called = callee.attr if isinstance(callee, ast.Attribute) else getattr(callee, "id", "")
            if (
                called == "sleep"
                and isinstance(argument, ast.Constant)
                and isinstance(argument.value, int | float)
                and argument.value > MAX_SLEEP_SECONDS
            ):
                found.append((node.lineno, function, float(argument.value)))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    source = path.read_text(encoding="utf-8")
    if "sleep" not in source:
        return found  # no call named sleep: nothing to parse (most files; parsing all takes ~1 s)
    visit(ast.parse(source, filename=str(path)), "<module>")
    return found


def test_no_literal_sleep_over_50_ms_in_code_the_tests_run():
    offenders = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            for line, function, seconds in long_literal_sleeps(path):
                if (relative, function) not in ALLOWED:
                    offenders.append(f"{relative}:{line} sleeps {seconds} s in {function}()")
    assert offenders == [], "\n".join(offenders)


def test_the_check_finds_a_long_sleep(tmp_path):
    # given code with a literal sleep over the limit, one at the limit, and a computed one
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import time\n"
        "def poll():\n"
        "    time.sleep(0.2)\n"
        "    time.sleep(0.05)\n"
        "    time.sleep(delay * 2)\n"
    )
    # then only the one over the limit is reported
    assert long_literal_sleeps(sample) == [(3, "poll", 0.2)]
