"""A property-based run of the admin API against its OpenAPI document (docs/admin-api.yaml),
with Schemathesis: every operation, with requests generated from the document (its examples
first: a person who exists), through devstack's HTTP API (payload 2.0) into the real admin
handler over moto. No answer is a 5xx, and every answer's status, content type and body are
the document's. A fixed seed (derandomize) and a bounded number of examples per operation keep
the run the same on every machine and inside the suite's time: about 220 requests, 200s for the
document's example person, 400s for what the document refuses, 404s and 409s.

Both doors: AdminApi's (locally the caller is devstack's LOCAL_IAM_CALLER: signatures are AWS's
to check) and the console's, with an admin's token from the local user pool and without one
(what else that door refuses: tests/integration/test_console_door.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devstack.apigw import LocalHttpApi, Route
from devstack.lambda_harness import LambdaContext, invoke
from tests.conftest import MAYA
from tests.integration import test_console_door, test_operator
from tests.integration.test_console_door import ADMIN
from tests.integration.test_operator import say

DOC = Path(__file__).resolve().parents[2] / "docs" / "admin-api.yaml"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

admin, admin_env = test_operator.admin, test_operator.admin_env  # the operator tests' fixtures
door = test_console_door.door  # the console's door, as its tests build it (a fixture)


@pytest.fixture
def admin_api(admin, consumer, lambda_context) -> Iterator[str]:
    say(consumer, lambda_context, "Hi, I'm Maya. I have a dog called Biscuit")  # the example id
    invoked = lambda event: invoke(admin.handler, event, LambdaContext())  # noqa: E731
    route = Route("ANY", "/{proxy+}", invoked, auth="AWS_IAM")  # the IAM door, as deployed
    with LocalHttpApi("AdminApi", [route]) as api:
        yield api.url


schema = schemathesis.openapi.from_path(DOC)
# one pytest item per operation, each run with hypothesis here: Schemathesis' own pytest items
# run only one operation under pytest-xdist (make test's -n auto), saying "1 passed"
OPERATIONS = {op.ok().label: op.ok() for op in schema.get_all_operations()}
pytestmark = [pytest.mark.slow]  # ~25 s on two cores: the slow tier keeps make test's time


def fuzz(strategy: Any, base_url: str, examples: int) -> None:
    @given(case=strategy)
    @settings(
        max_examples=examples,
        derandomize=True,  # the same requests on every run and machine
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(base_url=base_url, checks=CHECKS)

    run()


def fuzz_operation(operation: Any, base_url: str, known: dict[str, str], examples: int) -> None:
    """The `known` path parameters (a person who exists, one of their facts ...) in the path,
    anything the document allows, then requests it does not allow (each must be a 4xx the
    document names, never a 5xx): `examples` requests each."""
    ours = {name: value for name, value in known.items() if f"{{{name}}}" in operation.path}
    if ours:
        fuzz(operation.as_strategy(path_parameters=ours), base_url, examples)
    fuzz(operation.as_strategy(), base_url, examples)
    try:
        fuzz(operation.as_strategy(GenerationMode.NEGATIVE), base_url, examples)
    except Unsatisfiable:  # every input the operation takes is valid: there is no wrong one
        headers = {p.name for p in operation.headers.items} - {"Authorization"}  # the security's
        assert not (operation.body or operation.query or headers), operation.label


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_answer_is_the_documents_and_none_is_a_server_error(label, admin_api) -> None:
    fuzz_operation(OPERATIONS[label], admin_api, {"id": MAYA}, 6)


# ------------------------------------------------------------------ the console's door


@pytest.fixture
def console_api(door, resources) -> Iterator[tuple[str, str]]:
    """The console's API (devstack's JWT authorizer over moto's user pool) and an admin's
    access token, with the example person there."""
    from tests.integration.test_lifecycle import fill

    fill(resources.table_name, MAYA, messages=2, facts=1, ledger=1)
    yield door.api.url, door.sign_in(ADMIN)["access_token"]


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_through_the_console_door_too_signed_in_or_not(label, console_api) -> None:
    operation = OPERATIONS[label]
    url, token = console_api
    signed = {"Authorization": f"Bearer {token}"}
    strategy = operation.as_strategy(
        path_parameters={"id": MAYA} if "{id}" in operation.path else None, headers=signed
    )
    fuzz(strategy, url, 4)
    # without a token, API Gateway's 401 (the document's), whatever the request
    fuzz(operation.as_strategy(headers={"Authorization": "Bearer not-a-token"}), url, 2)
