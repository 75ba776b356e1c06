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

import sys
from importlib import import_module
from typing import Any


def face(wing: str, parts: dict[str, list[str]]) -> None:
    """A wing's face (PEP 562): gives the wing its __getattr__ and __all__. Each name is imported
    from its module on first use, so importing one module of a wing never loads the others (a
    whasp stack never loads Meta's adapter, the webhook never the model client). The face also
    imports its names under TYPE_CHECKING (tests/unit/test_layout.py holds the two lists equal):
    mypy and editors see their types and, with no __getattr__ in the face's text, a name the face
    does not hand out is an error there, not Any."""
    where = {name: module for module, names in parts.items() for name in names}

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {wing!r} has no attribute {name!r}")
        value = getattr(import_module(f"{wing}.{where[name]}"), name)
        setattr(sys.modules[wing], name, value)  # the next use is a plain attribute
        return value

    vars(sys.modules[wing]).update(__getattr__=__getattr__, __all__=sorted(where))
