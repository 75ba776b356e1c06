"""docs/admin-api.yaml, the admin API's OpenAPI document, against the routes' table
(memagent/operator/routes.py) and the handler: a valid OpenAPI 3 document; exactly the table's
routes (which functions/admin/app.py serves, and template.yaml routes: tests/infra/test_template.py
holds it to the same table); each with the shared responses every route can answer; only statuses
the handler (its ERRORS table) or API Gateway (403) answers; an Idempotency-Key wherever a retry
must not act twice."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from openapi_spec_validator import validate

from memagent.operator.routes import ROUTES
from tests.infra.test_template import ADMIN_APP

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
    # every row of the table, the console's recent conversations too (the page is no API route)
    served = {(route.method, route.path) for route in ROUTES}
    assert documented == served, {
        "documented, not served": documented - served,
        "served, not documented": served - documented,
    }


def shared(operation: dict) -> set[str]:
    """The shared responses (components/responses) an operation names."""
    refs = (answer.get("$ref", "") for answer in operation["responses"].values())
    return {ref.rsplit("/", 1)[-1] for ref in refs if ref.startswith("#/components/responses/")}


def test_every_route_names_the_shared_responses_it_can_answer() -> None:
    ops = operations(document())
    missing = {}
    for route in ROUTES:
        # no or a bad token (401), a caller or group refused (403), AWS unavailable (503);
        # a person's route: a bad identifier (400), nobody by it (404)
        needed = {"E401", "E403", "E503"} | ({"E400", "E404"} if "{id}" in route.path else set())
        if lacking := needed - shared(ops[route.method, route.path]):
            missing[f"{route.method} {route.path}"] = sorted(lacking)
    assert missing == {}


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
