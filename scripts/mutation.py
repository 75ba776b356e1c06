"""make mutation: mutmut on the domain modules, one module at a time, with the tests that
exercise it; for facts, also the instruction screen with each pattern and alternative removed.

    scripts/mutation.py [--max-children N] [MODULE ...]    (default: every module configured)
    scripts/mutation.py mutmut ARGS ...     (mutmut itself, in .mutation/<module>/: show, run NAME)

mutmut imports the code it mutates from ./ or src/ (it names each mutant after its file's path),
and our package is layers/memagent. So each module runs in .mutation/<module>/, where
src/memagent and tests link to ours and pyproject.toml is ours with that module's only_mutate
and test selection ([tool.memagent.mutation] in pyproject.toml) added to [tool.mutmut]. Every
run starts afresh: the numbers printed are this code's against these tests.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KILLED = {"killed", "timeout", "caught by type check"}
SHARED = ("examples", "docs", "scripts", "functions", "events", "template.yaml")


def prepare(module: str, tests: list[str]) -> Path:
    work = ROOT / ".mutation" / module
    path = module.replace(".", "/")  # a module in a wing: memory.facts
    shutil.rmtree(work, ignore_errors=True)
    (work / "src").mkdir(parents=True)
    (work / "src" / "memagent").symlink_to(ROOT / "layers" / "memagent")
    (work / "tests").symlink_to(ROOT / "tests")
    # what tests import or read by their path from the working folder: the booking example,
    # the admin API document, the CLI, the functions' code, the events
    for shared in SHARED:
        (work / shared).symlink_to(ROOT / shared)
    selection = (
        f"only_mutate = {json.dumps([f'src/memagent/{path}.py'])}\n"
        f"also_copy = {json.dumps(list(SHARED))}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
    )
    config = (ROOT / "pyproject.toml").read_text()
    (work / "pyproject.toml").write_text(
        config.replace("[tool.mutmut]\n", f"[tool.mutmut]\n{selection}", 1)
    )
    return work


def mutmut(args: list[str]) -> None:
    """mutmut 3.7's command line with the two fixes of 3.8 we need (3.8 itself needs a click
    newer than aws-sam-cli's pin): pytest 9.2's test ids where 3.7 reads them (`item._nodeid`),
    and the methods of a decorated class (a dataclass's) mutated, its decorators not."""
    import libcst
    from _pytest.nodes import Node
    from mutmut.__main__ import cli
    from mutmut.mutation.file_mutation import MutationVisitor

    if not hasattr(Node, "_nodeid"):
        Node._nodeid = property(lambda node: node.nodeid)  # type: ignore[attr-defined]
    skip = MutationVisitor._skip_node_and_children

    def skip_decorators(visitor: MutationVisitor, node: libcst.CSTNode) -> bool:
        if isinstance(node, libcst.Decorator):
            return True
        if isinstance(node, libcst.ClassDef) and node.decorators:
            return False
        return skip(visitor, node)

    MutationVisitor._skip_node_and_children = skip_decorators  # type: ignore[method-assign,assignment]
    _signal_own_children_only()
    cli(args)


def _started(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot: /proc/<pid>/stat's 22nd field), or
    None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]  # the fields after the name start at the 3rd


def _signal_own_children_only() -> None:
    """mutmut's timeout thread sends SIGXCPU to each mutant's pid when its time is up, even
    when that mutant ended long before (mutmut keeps no record of which ended): by then the
    pid may be another process's, and SIGXCPU ends it. On a machine where other work runs
    (pid_max is often 32,768) that killed an unrelated pytest worker mid-test, and it could
    also end a later mutant early and count it killed. A pid is signalled only while it is
    still the process registered under it (same start time). Without /proc, as mutmut does."""
    import os

    import mutmut.__main__ as main
    from mutmut.threading import timeout

    if _started(os.getpid()) is None:
        return
    registered: dict[int, tuple[str | None, float]] = {}  # pid -> its start, its deadline
    register = timeout.register_timeout

    def register_timeout(pid: int, timeout_s: float) -> None:
        registered[pid] = (_started(pid), time.time() + timeout_s)
        register(pid, timeout_s)

    class OwnChildren:
        """The os module to mutmut's timeout thread, whose kill spares reused pids."""

        def __getattr__(self, name: str) -> object:
            return getattr(os, name)

        @staticmethod
        def kill(pid: int, signal: int) -> None:
            # the pid's process now is the mutant last registered under it, whose own time is
            # up (an earlier mutant's entry, firing after its pid was reused, spares it)
            started, deadline = registered.get(pid, (None, 0.0))
            if started is None or _started(pid) != started or time.time() < deadline:
                raise ProcessLookupError(pid)
            os.kill(pid, signal)

    timeout.os = OwnChildren()  # type: ignore[assignment]
    main.register_timeout = register_timeout


def mutate(module: str, tests: list[str], max_children: int) -> Counter[str]:
    work = prepare(module, tests)
    mutmut = [sys.executable, str(Path(__file__).resolve()), "mutmut"]
    run = [*mutmut, "run", "--max-children", str(max_children)]
    done = subprocess.run(run, cwd=work, capture_output=True, text=True)
    if done.returncode:
        print("\n".join((done.stdout + done.stderr).splitlines()[-40:]))
        sys.exit(f"mutmut failed in {work}")
    results = subprocess.run(
        [*mutmut, "results", "--all", "true"], cwd=work, check=True, capture_output=True, text=True
    ).stdout
    statuses: Counter[str] = Counter()
    for line in results.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            statuses[status] += 1
            if status not in KILLED:
                print(f"  {status}: {name}")
    return statuses


SCREENING = ("_INSTRUCTION_PATTERNS", "_FILLER", "_SENTENCE_BREAK")  # in memagent.memory.facts


def screening_variants() -> list[tuple[str, str, int, str]]:
    """(regex name, what was removed, pattern index, the pattern without it) for every pattern
    of the instruction screen and every alternative of every group in them."""
    from memagent.memory import facts

    variants = []
    for name in SCREENING:
        patterns = getattr(facts, name)
        patterns = patterns if isinstance(patterns, list) else [patterns]
        for index, pattern in enumerate(patterns):
            if len(patterns) > 1:
                variants.append((name, f"pattern {index}", index, ""))
            for removed, without in alternatives_removed(pattern.pattern):
                variants.append((name, f"pattern {index}: {removed!r}", index, without))
    return variants


def alternatives_removed(pattern: str) -> list[tuple[str, str]]:
    """(the alternative, the pattern without it) for each `|` alternative in `pattern`."""
    out = []
    groups: list[tuple[int, list[int]]] = [(0, [])]  # each open group's start, and its bars
    i, in_class = 0, False
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            i += 2 if pattern[i + 1 : i + 2] == "]" else 1  # "[]...]": a literal "]" first
            continue
        elif char == "(":
            start = i + 1
            if pattern.startswith("?", start):  # (?:  (?P<name>  (?=  (?!  (?<=  (?<!
                found = re.match(r"\?(?:P<\w+>|<[=!]|[:=!])", pattern[start:])
                assert found  # a compiled pattern's group syntax
                start = found.end() + start
            groups.append((start, []))
        elif char == ")":
            out += _without_each(pattern, *groups.pop(), i)
        elif char == "|":
            groups[-1][1].append(i)
        i += 1
    return out + _without_each(pattern, *groups.pop(), len(pattern))


def _without_each(pattern: str, start: int, bars: list[int], end: int) -> list[tuple[str, str]]:
    edges = [start - 1, *bars, end]  # the character before each alternative, and the end
    out = []
    for k in range(len(bars) + 1 if bars else 0):
        left, right = edges[k], edges[k + 1]
        cut = (left + 1, right + 1) if k == 0 else (left, right)  # drop one "|" with it
        out.append((pattern[left + 1 : right], pattern[: cut[0]] + pattern[cut[1] :]))
    return out


def screening() -> tuple[int, int]:
    """Remove each screening pattern and alternative in turn: a screening test must fail.
    Returns (variants, variants a test failed on)."""
    from memagent.memory import facts

    tests = screening_tests()
    original = {name: getattr(facts, name) for name in SCREENING}
    patterns = list(facts._INSTRUCTION_PATTERNS)
    total = killed = 0
    for name, removed, index, without in screening_variants():
        if name != "_INSTRUCTION_PATTERNS":
            setattr(facts, name, re.compile(without))
        elif without:
            facts._INSTRUCTION_PATTERNS[index] = re.compile(without)
        else:
            del facts._INSTRUCTION_PATTERNS[index]
        try:
            failed = any(not passes(test) for test in tests)
        finally:
            for restored, value in original.items():
                setattr(facts, restored, value)
            facts._INSTRUCTION_PATTERNS[:] = patterns  # the same list: imported by name
        total += 1
        killed += failed
        if not failed:
            print(f"  survived: {name} without {removed}")
    return total, killed


def screening_tests() -> list[Callable[[], None]]:
    """Every case of tests/unit/test_screening.py as a call (its tests take one parameter
    each): pytest run once per variant would take minutes, these take a second."""
    path = ROOT / "tests" / "unit" / "test_screening.py"
    spec = importlib.util.spec_from_file_location("test_screening", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests: list[Callable[[], None]] = []
    for name, test in vars(module).items():
        if name.startswith("test_"):
            (mark,) = test.pytestmark  # @pytest.mark.parametrize("text", CASES)
            tests += [functools.partial(test, case) for case in mark.args[1]]
    return tests


def passes(test: Callable[[], None]) -> bool:
    try:
        test()
    except AssertionError:
        return False
    return True


def main() -> int:
    if sys.argv[1:2] == ["mutmut"]:
        mutmut(sys.argv[2:])  # click's command: it exits itself
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-children", type=int, default=1)
    parser.add_argument("modules", nargs="*")
    args = parser.parse_args()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["memagent"]["mutation"]
    modules = args.modules or list(config["tests"])
    rows = []
    for module in modules:
        if module not in config["tests"]:
            sys.exit(f"no tests configured for {module!r}: [tool.memagent.mutation.tests]")
        print(f"{module}: mutmut on {' '.join(config['tests'][module])}", flush=True)
        statuses = mutate(module, config["tests"][module], args.max_children)
        killed = sum(statuses[s] for s in KILLED)
        rows.append((module, sum(statuses.values()), killed))
        if module.rsplit(".", 1)[-1] == "facts":  # memory.facts, in its wing
            print("facts: the instruction screen, one pattern or alternative removed at a time")
            rows.append(("facts (screen)", *screening()))
    print("\n| module | mutants | killed | score |\n|---|---|---|---|")
    for module, total, killed in rows:
        print(f"| {module} | {total} | {killed} | {killed / max(total, 1):.0%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
