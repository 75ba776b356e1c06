"""OpenAI's published request schema, read as OpenAI's API reads it: the one check both the
fake Responses API (devstack.fake_openai, on every request) and the tests
(tests/integration/test_openai_schema.py) apply.

The schema is an extract of github.com/openai/openai-openapi (tests/schemas/openai-responses.json;
source, commit and how it was cut in its "$comment"). The OpenAPI description leaves objects
open (no additionalProperties: false), but the API answers 400 "Unknown parameter: 'x'." to a
field it does not declare, at the top level or inside an item. So every object schema is closed
here with `unevaluatedProperties: false` (JSON Schema 2020-12: it sees the properties its allOf
parts declared), except the parts an allOf combines (closing a part would refuse its siblings'
fields) and the schemas that say themselves what else they take (additionalProperties: a JSON
schema's body, a tool's parameters, metadata).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_FILE = Path(__file__).parents[1] / "tests" / "schemas" / "openai-responses.json"
REF = "#/components/schemas/"


def _closed(schema: Any, *, part: bool = False) -> Any:
    """`schema` with every object that declares its properties closed (see the module)."""
    if isinstance(schema, list):
        return [_closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {
        key: (
            [_closed(p, part=True) for p in value]
            if key == "allOf"
            else {k: _closed(v) for k, v in value.items()}
            if key == "properties"
            else _closed(value)
        )
        for key, value in schema.items()
    }
    declares = "properties" in schema or "allOf" in schema
    if declares and not part and "additionalProperties" not in schema:
        closed["unevaluatedProperties"] = False
    return closed


@cache
def _schema() -> dict[str, Any]:
    document = json.loads(SCHEMA_FILE.read_text())
    schemas = document["components"]["schemas"]
    parts = {
        p["$ref"].removeprefix(REF)
        for s in schemas.values()
        for p in s.get("allOf", [])
        if "$ref" in p
    }
    document["components"]["schemas"] = {
        name: _closed(schema, part=name in parts) for name, schema in schemas.items()
    }
    return document


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator({"$ref": f"{REF}{name}", **_schema()})


def _param(path: Any) -> str:
    """A JSON path as OpenAI names a parameter: input[2].content."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _cause(error: Any) -> Any:
    """The error an anyOf/oneOf stands for, as a person would read it: within the branches
    whose kind fits the value (no "type" field naming another kind of item, no JSON type
    mismatch), the branch that objected least, followed down to its deepest error."""
    if not error.context:
        return error
    branches: dict[Any, list[Any]] = {}
    for e in error.context:
        branches.setdefault(e.relative_schema_path[0], []).append(e)
    fitting = [
        errors
        for errors in branches.values()
        if not any(
            (
                e.absolute_path
                and e.absolute_path[-1] == "type"
                and len(e.absolute_path) == len(error.absolute_path) + 1
            )
            or (e.validator == "type" and len(e.absolute_path) == len(error.absolute_path))
            for e in errors
        )
    ] or list(branches.values())
    branch = min(fitting, key=len)
    return max((_cause(e) for e in branch), key=lambda e: len(e.absolute_path))


UNKNOWN = ("unevaluatedProperties", "additionalProperties")  # a field the schema does not name


def problems(name: str, body: Any) -> list[tuple[str, str]]:
    """(parameter, message) for each way `body` breaks the schema `name` (CreateResponse,
    CreateTranscriptionRequest), worded as OpenAI words them; [] when OpenAI's API would take
    it."""
    errors = list(_validator(name).iter_errors(body))
    found = []
    for error in errors:
        if error.validator in UNKNOWN:
            continue
        cause = _cause(error)
        if cause.validator in UNKNOWN:
            found.extend(_unknown(cause))
        else:
            where = _param(cause.absolute_path)
            found.append((where, f"Invalid value for '{where}': {cause.message[:300]}"))
    wrong = {where for where, _ in found}
    for error in errors:
        if error.validator in UNKNOWN:
            # a field whose value failed is not "evaluated" either: report it once, as invalid
            found.extend(u for u in _unknown(error) if not _within(u[0], wrong))
    return found


def _unknown(error: Any) -> list[tuple[str, str]]:
    """Each field an unevaluated/additionalProperties error names, as OpenAI's "Unknown
    parameter"."""
    named = [key for key in error.instance if f"'{key}'" in error.message]
    params = [_param([*error.absolute_path, key]) for key in sorted(named)]
    return [(param, f"Unknown parameter: '{param}'.") for param in params]


def _within(param: str, wrong: set[str]) -> bool:
    return any(w == param or w.startswith((f"{param}.", f"{param}[")) for w in wrong)
