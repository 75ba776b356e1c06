"""layers/memagent imports in one direction: no module reaches itself through its imports.

Every import counts (module level, inside a function, under TYPE_CHECKING): a circle any of them
closes means two modules that cannot be read, or changed, apart."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "memagent"


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {n.split(".")[1] for n in names if n.startswith("memagent.")}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle, as the modules along it, or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for imported in sorted(graph.get(module, ())):
            if found := visit(imported, [*path, module]):
                return found
        done.add(module)
        return None

    return next((c for m in sorted(graph) if (c := visit(m, []))), None)


def test_the_cycle_finder_finds_a_circle():
    assert cycle({"settings": {"whasp"}, "whasp": {"errors", "settings"}}) == [
        "settings",
        "whasp",
        "settings",
    ]
    assert cycle({"turn": {"bursts"}, "bursts": {"reply"}, "reply": set()}) is None


def test_no_module_of_memagent_imports_itself_round_a_circle():
    graph = {path.stem: imports_of(path) - {path.stem} for path in PACKAGE.glob("*.py")}
    assert set(graph) > {"turn", "store", "settings", "whasp"}  # it read the package
    assert cycle(graph) is None
