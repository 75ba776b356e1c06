"""memagent: the domain code of a WhatsApp AI agent with long-term memory.

The package is shared by the Lambda functions (as a layer) and the tests. It is a few wings,
each a package with a docstring and a face (the names the other wings and the functions use),
in layers: a wing imports only the wings below it (pyproject.toml's import-linter contracts,
checked by `make lint`).

    webhook | turn | operator | compaction   one wing per function's work
    lifecycle | model                        erasure, export, expiry; the model, Bedrock, tools
    aws                                      SQS, streams, EventBridge, S3, backoff, SnapStart
    providers | store                        the provider seam, whasp, Meta; DynamoDB
    memory                                   what we keep, as plain data, and its pure rules
    settings, errors, observability          the shared basics: modules beside the wings, under all

One wing per outside system where there is one: `store` (DynamoDB), `aws` (SQS and the rest),
`providers` (whasp, Meta), `model` (OpenAI or Bedrock). `memory` is pure code.
"""

import ast
import sys
from importlib import import_module
from typing import Any


def face(wing: str) -> None:
    """A wing's face (PEP 562): the names its __init__.py imports under TYPE_CHECKING, which
    mypy and editors read for their types, handed out at run time each from its module on first
    use, so importing one module of a wing never loads the others (a whasp stack never loads
    Meta's adapter, the webhook never the model client). The list is written once, as those
    imports; with no __getattr__ in the face's text, a name it does not import is a mypy error,
    not Any."""
    where = _typed_names(wing)

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {wing!r} has no attribute {name!r}")
        value = getattr(import_module(where[name]), name)
        setattr(sys.modules[wing], name, value)  # the next use is a plain attribute
        return value

    vars(sys.modules[wing]).update(__getattr__=__getattr__, __all__=sorted(where))


def _typed_names(wing: str) -> dict[str, str]:
    """name -> module, from the face's `if TYPE_CHECKING:` imports (ast is loaded already:
    dataclasses imports it, through inspect). A face names only its own wing's modules."""
    path = sys.modules[wing].__file__
    assert path is not None  # a wing is a package of files (the layer's folder)
    where: dict[str, str] = {}
    with open(path, encoding="utf-8") as source:
        text = source.read()
    for block in ast.parse(text).body:
        if not (isinstance(block, ast.If) and getattr(block.test, "id", None) == "TYPE_CHECKING"):
            continue
        for node in block.body:
            if not (isinstance(node, ast.ImportFrom) and f"{node.module}".startswith(f"{wing}.")):
                raise ImportError(f"{wing}'s face imports {ast.unparse(node)}: not its own")
            where.update({alias.asname or alias.name: f"{node.module}" for alias in node.names})
    return where
