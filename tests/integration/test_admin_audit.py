"""Every admin export and erasure leaves one audit line: the caller's IAM ARN, the action, the
person's hashed key, the time and the outcome; never the phone number, never content. Through the
admin handler with HTTP API (AWS_IAM) events, moto's DynamoDB over HTTP."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function
from tests.integration.test_lifecycle import admin_event, fill

OPERATOR = "arn:aws:iam::123456789012:user/operator"


@pytest.fixture
def admin(resources, monkeypatch) -> Any:
    return load_function(
        "admin", {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT}, monkeypatch
    )


def request(admin, method: str, phone: str, lambda_context, caplog) -> tuple[int, list, str]:
    """Call the admin API; return the status, the audit lines and everything logged."""
    caplog.clear()
    with caplog.at_level(logging.INFO):
        response = admin.handler(admin_event(method, phone), lambda_context)
    records = [vars(r) for r in caplog.records]
    lines = [r for r in records if "audit" in r]
    logged = " ".join(json.dumps(r, default=str) for r in records)
    return response["statusCode"], lines, logged


@pytest.mark.parametrize(("method", "action"), [("GET", "export"), ("DELETE", "erase")])
def test_an_export_and_an_erase_each_write_one_audit_line(
    admin, resources, lambda_context, caplog, method, action
):
    # given Maya's memory
    fill(resources.table_name, MAYA, messages=4, facts=1, ledger=1)
    # when an operator exports or erases her
    status, lines, logged = request(admin, method, MAYA, lambda_context, caplog)
    assert status == 200
    # then one audit line says who, what, whom (hashed), when and how it ended
    [line] = lines
    assert line["audit"] == action
    assert line["caller"] == OPERATOR
    assert line["person"] == person_key(AGENT, MAYA)
    assert line["outcome"] == "done"
    assert line["at"].startswith("20")
    # and nothing logged during the request holds her number or what she said
    for private in (MAYA, MAYA.lstrip("+"), "private text", "Fact 0"):
        assert private not in logged


def test_a_refused_request_is_audited_too(admin, lambda_context, caplog):
    status, [line], logged = request(admin, "DELETE", "447700900123\n", lambda_context, caplog)
    assert status == 400
    assert (line["audit"], line["caller"], line["person"], line["outcome"]) == (
        "erase",
        OPERATOR,
        None,
        "refused",
    )
    assert "447700900123" not in logged


def test_a_failed_erasure_is_audited_and_still_fails(admin, lambda_context, caplog, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("DynamoDB is down")

    monkeypatch.setattr(admin, "forget", broken)
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.raises(RuntimeError):
        admin.handler(admin_event("DELETE", MAYA), lambda_context)
    [line] = [vars(r) for r in caplog.records if "audit" in vars(r)]
    assert (line["audit"], line["outcome"]) == ("erase", "failed")
    assert line["person"] == person_key(AGENT, MAYA)


@pytest.mark.parametrize(("method", "action"), [("GET", "export"), ("DELETE", "erase")])
def test_an_aws_error_is_a_503_with_an_audit_line_saying_the_action_failed(
    admin, resources, lambda_context, caplog, monkeypatch, method, action
):
    from moto.core.exceptions import JsonRESTError
    from moto.dynamodb.responses import DynamoHandler

    # given Maya's memory, and DynamoDB refusing the admin's BatchGetItem (a missing grant:
    # export and erasure read the old key's state in one, with LegacyPersonKeys)
    fill(resources.table_name, MAYA, messages=4, facts=1, ledger=1)
    denied = (
        "User: arn:aws:sts::123456789012:assumed-role/AdminRole/admin is not authorized to "
        f"perform: dynamodb:BatchGetItem on resource: {resources.table_name}"
    )

    def refuse(self, *args, **kwargs):
        raise JsonRESTError("AccessDeniedException", denied)

    monkeypatch.setattr(DynamoHandler, "batch_get_item", refuse)
    # when an operator exports or erases her
    status, [line], logged = request(admin, method, MAYA, lambda_context, caplog)
    # then it is a 503 naming the error's code, not a bare 500, and not AWS's message
    assert status == 503
    # and one audit line says the action failed, and why, in a code
    assert (line["audit"], line["outcome"], line["reason"]) == (
        action,
        "failed",
        "AccessDeniedException",
    )
    assert line["person"] == person_key(AGENT, MAYA) and line["caller"] == OPERATOR
    for private in (MAYA, MAYA.lstrip("+"), "private text", "Fact 0"):
        assert private not in logged
