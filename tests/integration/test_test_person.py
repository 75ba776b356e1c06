"""The reserved test person (memagent.providers.void), through the consumer's handler: their
message is remembered and answered by the model as anyone's, and the reply goes nowhere; the
person writing beside them is answered as always. whasp's and Meta's stand-ins record every send,
read receipt and typing indicator they are asked for, so "nowhere" is what they saw."""

from __future__ import annotations

import io
import logging
from contextlib import redirect_stdout

from devstack.lambda_harness import reported_failures as failures
from memagent.providers import TEST_PERSON
from tests.conftest import BUSINESS, MAYA, sqs_batch
from tests.integration.test_consumer import message, rows, turns


def test_the_test_persons_reply_is_remembered_and_sent_to_nobody(
    consumer, resources, openai, whasp, lambda_context, caplog
):
    # given the reserved test person and Maya write at the same time
    checking = message("Automated check of the deployment: please answer", chat=TEST_PERSON)
    maya = message("Hi, I'm Maya", chat=MAYA)
    # when the consumer handles both, in one batch
    out = io.StringIO()
    with redirect_stdout(out), caplog.at_level(logging.INFO):
        response = consumer.handler(sqs_batch(checking, maya), lambda_context)
    assert failures(response) == []
    # then the model answered both, both replies are in memory and the ledger says sent
    assert len(openai.calls()) == 2
    for person in (TEST_PERSON, MAYA):
        assert [role for role, _ in turns(resources.table_name, person)] == ["user", "assistant"]
        [entry] = rows(resources.table_name, person, "EVT#")
        assert entry["status"] == "sent"
    # and whasp was asked to send Maya's reply, and nothing else
    assert [(s["from"], s["to"]) for s in whasp.sent] == [(BUSINESS, MAYA)]
    # and no log line names the test person
    logs = out.getvalue() + caplog.text
    assert "sent into the void" in logs  # we did capture the decision
    assert TEST_PERSON not in logs and TEST_PERSON.lstrip("+") not in logs
