"""The package's layout as a rule: wings in layers (import-linter's contracts in pyproject.toml,
run by `make lint`), each wing used by the others and by the functions through its face only."""

from __future__ import annotations

import ast
import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "layers" / "memagent"
WINGS = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
BASICS = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
# an adapter is a face of its own (the providers wing's docstring)
OWN_FACES = {"memagent.providers.whasp", "memagent.providers.meta"}
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def memagent_imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "memagent"]


def test_the_package_is_its_wings_and_a_few_shared_basics():
    assert set(BASICS) == {"environment", "errors", "observability"}
    assert not [
        p.name
        for p in PACKAGE.iterdir()
        if p.is_dir() and p.name not in WINGS and p.name != "__pycache__"
    ]


def test_the_functions_import_only_the_wings_faces():
    # given every handler; then each memagent import names a wing (its face) or a basic,
    # never a module inside a wing
    inside = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / "functions").glob("*/app.py"))
        for line, module in memagent_imports(path)
        if len(module.split(".")) > 2
    ]
    assert not inside, "a handler imports inside a wing (use its face):\n" + "\n".join(inside)


def test_a_wing_imports_another_only_through_its_face():
    crossing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).parts
        own = relative[0] if len(relative) > 1 else None
        for line, module in memagent_imports(path):
            parts = module.split(".")
            if len(parts) > 2 and parts[1] != own and ".".join(parts[:3]) not in OWN_FACES:
                crossing.append(f"{path.relative_to(ROOT)}:{line}: {module}")
    assert not crossing, "imports inside another wing (use its face):\n" + "\n".join(crossing)


@pytest.mark.parametrize("wing", WINGS)
def test_every_name_of_a_wings_face_resolves(wing):
    face = importlib.import_module(f"memagent.{wing}")
    for name in face.__all__:
        assert getattr(face, name) is not None, f"memagent.{wing}.{name}"


def _wing(root: Path, name: str, typed: str) -> None:
    """A wing `name` under `root`: a module `part` and a face importing `typed` for mypy."""
    (root / name).mkdir()
    (root / name / "part.py").write_text("VALUE = 1\nOTHER = 2\n")
    (root / name / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n\nfrom memagent import face\n\n"
        f"if TYPE_CHECKING:\n    {typed}\n\nface(__name__)\n"
    )


def test_a_face_hands_out_what_it_imports_for_mypy_each_on_first_use(tmp_path, monkeypatch):
    # given a wing whose face imports one name of its module under TYPE_CHECKING
    _wing(tmp_path, "wing_a", "from wing_a.part import VALUE")
    _wing(tmp_path, "wing_b", "from memagent.memory.types import Turn  # another wing's")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        wing = importlib.import_module("wing_a")
        # then the face hands out that name, and loads its module only when it is used
        assert wing.__all__ == ["VALUE"] and "wing_a.part" not in sys.modules
        assert wing.VALUE == 1 and "wing_a.part" in sys.modules
        # and nothing it does not import for mypy, though its module has it
        with pytest.raises(AttributeError, match="OTHER"):
            _ = wing.OTHER
        # and a face that imports another wing's name is refused when it loads, naming it
        with pytest.raises(ImportError, match=r"memagent\.memory\.types"):
            importlib.import_module("wing_b")
    finally:
        for name in ("wing_a", "wing_a.part", "wing_b"):
            sys.modules.pop(name, None)


def test_a_face_may_import_one_modules_names_over_several_lines(tmp_path, monkeypatch):
    # given a wing whose face imports its module's names in two statements, as a long list is
    _wing(tmp_path, "wing_c", "from wing_c.part import VALUE\n    from wing_c.part import OTHER")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        wing = importlib.import_module("wing_c")
        # then the face hands out the names of both
        assert wing.__all__ == ["OTHER", "VALUE"] and (wing.VALUE, wing.OTHER) == (1, 2)
    finally:
        for name in ("wing_c", "wing_c.part"):
            sys.modules.pop(name, None)


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    # the copy's package first on the path: grimp finds memagent there, not the installed one
    return subprocess.run(  # noqa: S603 (our own virtualenv's tool)
        [str(LINT_IMPORTS), "--no-cache"],  # the copy's pyproject.toml, in cwd
        cwd=tree,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tree / "layers")},
        capture_output=True,
        text=True,
    )


def test_make_lint_fails_when_a_module_imports_a_wing_above_it(tmp_path):
    # given a copy of the package and the contracts
    shutil.copytree(
        PACKAGE, tmp_path / "layers" / "memagent", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    kept = lint_imports(tmp_path)
    assert kept.returncode == 0, kept.stdout + kept.stderr
    # when the memory's pure rules import the turn (a wing above them), and whasp Meta's adapter
    facts = tmp_path / "layers" / "memagent" / "memory" / "facts.py"
    facts.write_text(facts.read_text() + "\nfrom memagent.turn import Agent  # noqa\n")
    whasp = tmp_path / "layers" / "memagent" / "providers" / "whasp.py"
    whasp.write_text(whasp.read_text() + "\nfrom memagent.providers import meta  # noqa\n")
    broken = lint_imports(tmp_path)
    # then lint-imports (a step of make lint) fails, naming both
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "memagent.memory.facts -> memagent.turn" in broken.stdout
    assert "memagent.providers.whasp -> memagent.providers.meta" in broken.stdout
