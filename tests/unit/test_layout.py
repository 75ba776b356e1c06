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


FACES = sorted(
    path
    for path in PACKAGE.rglob("__init__.py")
    if "face(" in path.read_text() and path.parent != PACKAGE
)


def face_table(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """A face's two lists: what face() hands out (name -> module) and what it imports under
    TYPE_CHECKING for mypy and editors (name -> module)."""
    tree = ast.parse(path.read_text())
    call = next(
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "face"
    )
    handed = {
        name: module for module, names in ast.literal_eval(call.args[1]).items() for name in names
    }
    package = ".".join(path.parent.relative_to(PACKAGE.parent).parts)
    typed = {
        alias.asname or alias.name: node.module.removeprefix(package + ".")
        for block in tree.body
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    return handed, typed


@pytest.mark.parametrize("path", FACES, ids=lambda path: str(path.parent.relative_to(PACKAGE)))
def test_a_face_types_every_name_it_hands_out(path):
    # given a wing's face: the names face() loads on first use, and its TYPE_CHECKING imports
    handed, typed = face_table(path)
    # then the two are the same names from the same modules: mypy and an editor see the type of
    # every name the face hands out, and nothing it does not
    untyped = {name: module for name, module in handed.items() if typed.get(name) != module}
    assert not untyped, f"{path}: import these under TYPE_CHECKING too: {untyped}"
    assert typed == handed, f"{path}: its TYPE_CHECKING imports name more than face() hands out"


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
