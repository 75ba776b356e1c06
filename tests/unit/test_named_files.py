"""Every file a comment, a docstring or a document names exists: the README, CONTRIBUTING,
docs/*.md and the Python code's comments and docstrings are read for paths under the repository's
folders (layers/, memagent/, functions/, devstack/, docs/, tests/, scripts/, bench/, events/,
console/), paths that climb out with ../, and bare file names (facts.py, operate.md). A file moved
or removed (as when the flat package became wings) leaves no line pointing at nothing."""

from __future__ import annotations

import ast
import io
import os
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# what is not the project's own text: tools' and builds' folders (any folder starting with "."
# is left out too: .venv, .aws-sam, .mutation ...)
NOT_OURS = {"build", "__pycache__", "local", "memagent.egg-info", "node_modules"}
FOLDERS = ("layers", "memagent", "functions", "devstack", "docs", "tests", "scripts", "bench")
FOLDERS += ("events", "console")
# a path under one of our folders: "docs/operate.md", "memagent/turn/agent.py", "tests/unit/"
# (a placeholder, "functions/<name>/app.py", ends the path before it: never checked)
PATH = re.compile(rf"(?<![\w.$/-])((?:\.\./)*(?:{'|'.join(FOLDERS)})/[\w./*-]*\w/?)")
# a path that climbs out of its folder: "../CONTRIBUTING.md"
CLIMBING = re.compile(r"(?<![\w.$/-])((?:\.\./)+[\w./*-]*\w)")
# a file named alone: "facts.py", "operate.md"
BARE = re.compile(r"(?<![\w.$/*<>{}-])([A-Za-z_][\w-]*\.(?:py|md))\b(?![\w/(])")
# a module by its dotted name, "memagent.turn.keywords": its wing or basic module is checked (the
# flat package's modules are gone since the wings); what follows may be a name in it
DOTTED = re.compile(r"(?<![\w.])memagent\.(\w+)")
# files our text names that this repository does not hold, each with whose they are: another
# project's, or one the reader writes
ELSEWHERE = {
    "tests/data/updates": "the pywa library's fixtures (tests/unit/test_meta.py)",
    "evaluate_qa.py": "LongMemEval's judge (bench/longmemeval.py)",
    "standard.py": "botocore's retries (memagent/model/tools.py)",
    "functions/consumer/replies.toml": "an operator's own replies (docs/configuration.md)",
    "functions/consumer/clinic.md": "an operator's own persona (docs/local-stack.md)",
    "clinic.md": "the same persona, as PERSONA_FILE names it",
}


def _ours() -> Iterator[Path]:
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(f for f in subfolders if not f.startswith(".") and f not in NOT_OURS)
        yield from (Path(folder) / name for name in sorted(files))


FILES = list(_ours())
NAMES = {path.name for path in FILES}


def documents() -> Iterator[Path]:
    return (path for path in FILES if path.suffix in (".md", ".py"))


def lines(path: Path) -> Iterator[tuple[int, str]]:
    """A document's lines; a Python module's comments and docstrings (triple-quoted strings)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        yield from enumerate(text.splitlines(), 1)
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT or (
            token.type == tokenize.STRING and token.string.lstrip("rbfuRBFU")[:3] in ('"""', "'''")
        ):
            for offset, line in enumerate(token.string.splitlines()):
                yield token.start[0] + offset, line


def _found(written: str) -> bool:
    """Whether a path as written from the repository's root is there (a glob: anything)."""
    written = written.split("#")[0]
    if written.startswith("memagent/"):
        written = f"layers/{written}"
    if "*" in written:
        return any(ROOT.glob(written))
    return (ROOT / written).exists()


PACKAGE = ROOT / "layers" / "memagent"
# memagent's own names (memagent.face): not modules
TOP_NAMES = {
    node.name
    for node in ast.parse((PACKAGE / "__init__.py").read_text()).body
    if isinstance(node, ast.FunctionDef)
}


def _a_module(name: str) -> bool:
    """memagent.<name>: a wing, a basic module, or one of memagent's own names."""
    return (
        name in TOP_NAMES
        or (PACKAGE / f"{name}.py").is_file()
        or (PACKAGE / name / "__init__.py").is_file()
    )


def _elsewhere(written: str) -> bool:
    return any(written == name or written.startswith(f"{name}/") for name in ELSEWHERE)


def missing(path: Path, line: str) -> list[str]:
    """The files `line` of `path` names that are not there."""
    gone = []
    for match in PATH.finditer(line):
        written = match.group(1)
        if written.startswith("../"):
            continue  # CLIMBING's
        if not _found(written) and not _elsewhere(written):
            gone.append(written)
    for match in CLIMBING.finditer(line):
        written = match.group(1)
        target = (path.parent / written.split("#")[0]).resolve()
        if target.is_relative_to(ROOT) and target.exists():
            continue
        # a path from a folder inside the repository ("cd .mutation/facts" first): from its root
        if not _found(re.sub(r"^(\.\./)+", "", written)):
            gone.append(f"{written} (outside the repository)")
    for match in DOTTED.finditer(line):
        if not _a_module(match.group(1)):
            gone.append(match.group(0))
    for match in BARE.finditer(line):
        if match.group(1) not in NAMES and not _elsewhere(match.group(1)):
            gone.append(match.group(1))
    return gone


def test_every_file_named_in_a_comment_or_a_document_exists():
    # given every document, comment and docstring of the repository
    gone = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path in documents()
        for number, line in lines(path)
        for name in missing(path, line)
    ]
    # then each file they name is there (or is another project's, in ELSEWHERE)
    assert not gone, "these lines name files that are not there:\n" + "\n".join(gone)


def test_a_line_naming_a_file_that_is_gone_is_found():
    # given lines as a move would leave them: a wing's module by its old flat name, a document
    # that was never written, a path out of the repository, and ones that are right
    here = ROOT / "docs" / "operate.md"
    assert missing(here, "see memagent/store_turn.py and docs/nowhere.md") == [
        "memagent/store_turn.py",
        "docs/nowhere.md",
    ]
    assert missing(here, "written in operator_handoff.py") == ["operator_handoff.py"]
    assert missing(here, "memagent.store_table.ALIAS, memagent.face, memagent.turn.Consumer") == [
        "memagent.store_table"
    ]
    assert missing(here, "as [the brief](../../shared/BRIEF.md) says") == [
        "../../shared/BRIEF.md (outside the repository)"
    ]
    assert missing(here, "memagent/turn/agent.py, [costs](cost.md), ../CONTRIBUTING.md#tests") == []
    assert missing(here, "functions/*/app.py, functions/<name>/app.py, tests/unit/") == []
