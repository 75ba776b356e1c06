"""The size guide of layers/memagent (issue 18): no class over ~250 lines, no function over ~60.

A guide, not a gate: this prints what is over (or near, with --near) so a reader can see it,
and always exits 0. CONTRIBUTING.md ("Sizes") says where the code goes over and why.

    .venv/bin/python scripts/sizes.py            # what is over the guide
    .venv/bin/python scripts/sizes.py --near 0.8 # and what is within 80% of it
"""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = {"class": 250, "def": 60}


def sizes(path: Path) -> list[tuple[int, str, str]]:
    """(lines, kind, dotted name) of every class and function in the file, nested ones too."""
    found: list[tuple[int, str, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                kind = "class" if isinstance(child, ast.ClassDef) else "def"
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                found.append((lines, kind, prefix + child.name))
                walk(child, f"{prefix}{child.name}.")

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--near", type=float, default=1.0, help="share of the guide to list from")
    args = parser.parse_args()
    files = sorted((ROOT / "layers" / "memagent").rglob("*.py"))
    files += sorted((ROOT / "functions").glob("*/app.py"))
    rows = [
        (lines, kind, f"{path.relative_to(ROOT)}:{name}")
        for path in files
        for lines, kind, name in sizes(path)
        if lines > GUIDE[kind] * args.near
    ]
    for lines, kind, where in sorted(rows, key=lambda row: (row[1] != "class", -row[0])):
        mark = "over" if lines > GUIDE[kind] else "near"
        print(f"{lines:5d}  {kind:5s}  {mark}  {where}")
    if not rows:
        print("nothing over the guide")


if __name__ == "__main__":
    main()
