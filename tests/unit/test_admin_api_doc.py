"""docs/admin-api.yaml, the admin API's OpenAPI document, against the handler: a valid OpenAPI 3
document; exactly the routes functions/admin/app.py serves (and template.yaml routes, which
tests/infra/test_template.py holds to the same list); only statuses the handler (its ERRORS
table) or API Gateway (403) answers; an Idempotency-Key wherever a retry must not act twice."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from openapi_spec_validator import validate

from tests.infra.test_template import ADMIN_APP, CONSOLE_ONLY, served_routes

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "admin-api.yaml"
METHODS = ("get", "put", "post", "delete", "patch")


def document() -> dict:
    return yaml.safe_load(DOC.read_text())


def operations(doc: dict) -> dict[tuple[str, str], dict]:
    return {
        (method.upper(), path): operation
        for path, item in doc["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def test_it_is_a_valid_openapi_document() -> None:
    validate(document())


def test_it_has_exactly_the_routes_the_handler_serves() -> None:
    documented = set(operations(document()))
    # every API route, the console's recent conversations too; the page is no API route
    served = served_routes() | (CONSOLE_ONLY - {("GET", "/")})
    assert documented == served, {
        "documented, not served": documented - served,
        "served, not documented": served - documented,
    }


def test_it_names_only_statuses_the_handler_or_api_gateway_answers() -> None:
    answered = {int(s) for s in re.findall(r"\(\w+, (\d{3}), \"", ADMIN_APP.read_text())}
    # done; API Gateway's answers to no or a bad token (401) and to an unsigned caller (403)
    answered |= {200, 401, 403}
    documented = {
        int(status) for op in operations(document()).values() for status in op["responses"]
    }
    assert documented <= answered, documented - answered
    assert answered <= documented, answered - documented  # every status is on some route


def test_a_request_a_retry_must_not_repeat_takes_an_idempotency_key() -> None:
    doc = document()
    for key in (("POST", "/people/{id}/messages"), ("POST", "/people/{id}/follow-ups")):
        names = [p.get("$ref", "") for p in operations(doc)[key].get("parameters", [])]
        assert "#/components/parameters/IdempotencyKey" in names, key
    header = doc["components"]["parameters"]["IdempotencyKey"]
    assert (header["in"], header["required"]) == ("header", True)
    assert "idempotency-key" in ADMIN_APP.read_text()
