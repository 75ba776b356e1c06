"""A property-based run of the admin API against its OpenAPI document (docs/admin-api.yaml),
with Schemathesis: every operation, with requests generated from the document (its examples
first: a person who exists), through devstack's HTTP API (payload 2.0) into the real admin
handler over moto. No answer is a 5xx, and every answer's status, content type and body are
the document's. A fixed seed (derandomize) and a bounded number of examples per operation keep
the run the same on every machine and inside the suite's time (about 190 requests: the doc's
example person's 200s, 400s for malformed ids, 404s for methods no route has).

The IAM door: locally the caller is devstack's LOCAL_IAM_CALLER (signatures are AWS's to check);
the console's door is tests/integration/test_console_door.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from devstack.apigw import LocalHttpApi, Route
from devstack.lambda_harness import LambdaContext, invoke
from tests.integration import test_operator
from tests.integration.test_operator import say

DOC = Path(__file__).resolve().parents[2] / "docs" / "admin-api.yaml"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]

admin = test_operator.admin  # the admin handler, as the operator tests load it (a fixture)


@pytest.fixture
def admin_api(admin, consumer, lambda_context) -> Iterator[str]:
    say(consumer, lambda_context, "Hi, I'm Maya. I have a dog called Biscuit")  # the example id
    invoked = lambda event: invoke(admin.handler, event, LambdaContext())  # noqa: E731
    route = Route("ANY", "/{proxy+}", invoked, auth="AWS_IAM")  # the IAM door, as deployed
    with LocalHttpApi("AdminApi", [route]) as api:
        yield api.url


schema = schemathesis.openapi.from_path(DOC)
pytestmark = [pytest.mark.slow]  # ~15 s on one core: the slow tier keeps make test's time


@schema.parametrize()
@settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_every_answer_is_the_documents_and_none_is_a_server_error(case, admin_api) -> None:
    case.call_and_validate(base_url=admin_api, checks=CHECKS)
