"""The admin API fuzzed against its OpenAPI document (docs/admin-api.yaml) on the local stack:
Schemathesis sends what the document allows, and what it refuses, to DevStack's AdminApi.
There the routes are template.yaml's own (each event's method and path, as API Gateway routes
them: a request no route matches is the gateway's 404, never the handler's), the admin function
runs in its own environments with the template's settings, and the person the document's
example names came in through the webhook, the queue and the consumer.

The same checks as tests/integration/test_admin_api_fuzz.py (which fuzzes the handler behind
one catch-all route, and the console's door): no 5xx, and every answer's status, content type
and body are the document's. A fixed seed (derandomize) and a few examples per operation keep
it the same on every run, and within about half a minute."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest

from devstack.clock import SQS_CLOCK
from devstack.stack import DevStack
from tests.integration.test_admin_api_fuzz import OPERATIONS, fuzz_operation

MAYA = "+447700900123"  # docs/admin-api.yaml's example id
EXAMPLES = 5  # requests per operation and kind: the person, anything allowed, anything refused

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("admin-api-fuzz-stack")]


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[DevStack]:
    with (
        SQS_CLOCK.kept(),
        DevStack(
            env={},  # the offline model, whatever this shell's OPENAI_* say
            parameters={"FollowUps": "true"},  # the follow-up routes' 200s, not only 503s
            level="quiet",
            log_path=tmp_path_factory.mktemp("admin-api-fuzz") / "stack.log",
        ) as stack,
    ):
        yield stack


@pytest.fixture
def known(stack: DevStack) -> dict[str, str]:
    """Path parameters that name something: Maya (again, if an erasure fuzzed before forgot
    her), her one fact and a pending follow-up of hers (again, if one was deleted). One fact:
    the facts an operation before added (with the same seed, the same texts a correction tries)
    would make every correction a 409, "held already"."""
    if stack.admin("GET", f"/people/{MAYA}/conversation")[0] == 404:
        stack.send_message(MAYA, "Hi, I'm Maya. I have a dog called Biscuit")
        assert stack.wait_idle()
    status, facts = stack.admin("GET", f"/people/{MAYA}/facts")
    assert status == 200, facts
    if not facts["facts"]:
        status, added = stack.admin("POST", f"/people/{MAYA}/facts", {"text": "Has a dog"})
        assert status == 200, added
        facts["facts"] = [added["fact"]]
    for extra in facts["facts"][1:]:
        assert stack.admin("DELETE", f"/people/{MAYA}/facts/{extra['id']}")[0] == 200
    status, pending = stack.admin("GET", f"/people/{MAYA}/follow-ups")
    assert status == 200, pending
    if not pending["follow_ups"]:
        when = (stack.now() + timedelta(days=2)).strftime("%Y-%m-%dT10:00")  # her clock: London
        body = {"when": when, "about": "ask how Biscuit is"}
        status, said = stack.admin(
            "POST", f"/people/{MAYA}/follow-ups", body, **{"Idempotency-Key": uuid.uuid4().hex}
        )
        assert status == 200, said
        pending["follow_ups"] = [said]
    return {
        "id": MAYA,
        "fact": facts["facts"][0]["id"],
        "follow_up": pending["follow_ups"][0]["id"],
    }


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_every_answer_on_the_stack_is_the_documents_and_none_is_a_server_error(
    label, stack, known
) -> None:
    fuzz_operation(OPERATIONS[label], stack.apis["AdminApi"].url, known, EXAMPLES)
