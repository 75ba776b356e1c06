"""The documentation tables written from their one source, so they cannot drift from it.

docs/deploy.md's parameters table is template.yaml's Parameters: each one's name, Default and
Description, in the template's order (the order `sam deploy --guided` asks them in). A parameter
is documented where it is declared, in its Description (which CloudFormation's console shows
too); this rewrites the table between the page's markers.

    python scripts/docs.py           # rewrite the tables (make docs)
    python scripts/docs.py --check   # exit 1 naming the stale pages (tests/infra run it)
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEPLOY_PAGE = ROOT / "docs" / "deploy.md"
START = "<!-- parameters: written by `make docs` from template.yaml's Parameters; edit those -->"
END = "<!-- end of parameters -->"


def described(text: str) -> str:
    """A Description as a table cell: one line, its docs/ pages as links, no stray pipes."""
    text = " ".join(text.split())
    text = re.sub(r"\bdocs/([\w-]+\.md)(#[\w-]+)?", r"[\1\2](\1\2)", text)
    return text.replace("|", "\\|")


def default_of(spec: dict[str, Any]) -> str:
    value = spec.get("Default", "")
    if value == "" or value is None:
        return "empty"
    if spec.get("Type") == "Number":
        return str(value)
    return f"`{value}`"


def parameters_table(parameters: dict[str, dict[str, Any]]) -> str:
    lines = ["| parameter | default | what it does |", "|---|---|---|"]
    for name, spec in parameters.items():
        lines.append(f"| `{name}` | {default_of(spec)} | {described(spec['Description'])} |")
    return "\n".join(lines)


def with_table(page: str, table: str) -> str:
    """The page with the text between its markers replaced by the table."""
    start, end = page.find(START), page.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"{DEPLOY_PAGE.name} lost its markers: {START!r} ... {END!r}")
    return page[: start + len(START)] + "\n" + table + "\n" + page[end:]


def pages() -> dict[Path, str]:
    """Each generated page as it should read."""
    from devstack.resources import load_template

    table = parameters_table(load_template()["Parameters"])
    return {DEPLOY_PAGE: with_table(DEPLOY_PAGE.read_text(encoding="utf-8"), table)}


def stale() -> list[Path]:
    return [path for path, text in pages().items() if path.read_text(encoding="utf-8") != text]


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        behind = stale()
        for path in behind:
            print(f"{path.relative_to(ROOT)} is stale: run `make docs`", file=sys.stderr)
        return 1 if behind else 0
    for path, text in pages().items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main(sys.argv[1:]))
