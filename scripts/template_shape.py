"""template.yaml with some parameters' defaults changed, for a scanner that reads a template's
defaults to decide its conditions (checkov does): `make scan` scans the stack as deployed by
default and with its optional parts on.

    python scripts/template_shape.py FollowUps=true ExampleBookingTool=true > shape.yaml
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent.parent / "template.yaml"


def shaped(text: str, defaults: dict[str, str]) -> str:
    for name, value in defaults.items():
        pattern = re.compile(rf"(\n  {re.escape(name)}:\n    Type: \w+\n    Default: )[^\n]*")
        text, found = pattern.subn(rf'\g<1>"{value}"', text)
        if found != 1:
            raise SystemExit(f"template.yaml has no parameter {name} with a Default to change")
    return text


def main(argv: list[str]) -> int:
    defaults = dict(arg.split("=", 1) for arg in argv)
    sys.stdout.write(shaped(TEMPLATE.read_text(), defaults))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
