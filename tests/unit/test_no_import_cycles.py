"""layers/memagent imports in one direction: no module reaches itself through its imports.

Every import counts (module level, inside a function, under TYPE_CHECKING): a circle any of them
closes means two modules that cannot be read, or changed, apart. A name taken from a wing's face
(`from memagent.store import MemoryStore`) is an import of the module the face takes it from
(what the wing's __init__.py imports under TYPE_CHECKING, which memagent.face hands out)."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "memagent"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def face_of(package: str) -> dict[str, str]:
    """A wing's face: each name -> the module it is taken from (its TYPE_CHECKING imports)."""
    path = MODULES.get(package)
    if path is None or path.name != "__init__.py":
        return {}
    return {
        alias.asname or alias.name: node.module
        for block in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            face = face_of(node.module)
            for alias in node.names:
                whole = f"{node.module}.{alias.name}"
                names.add(whole if whole in MODULES else face.get(alias.name, node.module))
    return {name for name in names if name in MODULES and name != "memagent"}


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


def test_a_name_from_a_face_is_an_import_of_its_module():
    reply = imports_of(MODULES["memagent.turn.reply"])
    assert "memagent.memory.context" in reply  # build_context, through memagent.memory's face
    assert "memagent.store.ledger" in reply  # the module itself, imported whole
    assert "memagent.memory" not in reply


def test_no_module_of_memagent_imports_itself_round_a_circle():
    graph = {name: imports_of(path) - {name} for name, path in MODULES.items()}
    read = {"memagent.turn.agent", "memagent.store.memory_store", "memagent.environment"}
    assert read | {"memagent.providers.whasp"} < set(graph)  # it read the package
    assert cycle(graph) is None
