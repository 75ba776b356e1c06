"""The CSAT question on the local stack (whasp): the admin API, the event queue and the consumer
in their own processes, every AWS call checked against the function's role and the queue's
policy (devstack.iam): a hand-back asks once, the person's answer is counted."""

from __future__ import annotations

import pytest

from devstack.stack import DevStack

MAYA = "+447700900123"

pytestmark = [pytest.mark.slow]


def test_a_hand_back_asks_for_a_rating_within_the_admin_and_consumer_grants(tmp_path):
    with DevStack(
        env={},  # the offline model, whatever this shell's OPENAI_* say
        parameters={"CsatAfterHandback": "true"},
        level="quiet",
        log_path=tmp_path / "stack.log",
    ) as stack:
        # given Maya asked for a human, and the agent handed her chat over
        stack.send_message(MAYA, "talk to a human")
        assert stack.wait_for_replies(MAYA, 1, timeout=60)
        # when an operator hands it back (the admin role puts the question on the queue)
        status, body = stack.admin("DELETE", f"/people/{MAYA}/handoff")
        assert status == 200 and body["csat"] is True
        # then she gets the question once, its options numbered
        assert stack.wait_for_replies(MAYA, 2, timeout=60)
        assert stack.wait_idle(timeout=60)
        question = stack.replies_to(MAYA)[1]["text"]
        assert question.startswith("How did we do") and question.endswith("3. Bad")
        # when she answers "1", she is thanked, and the figures hold her rating
        stack.send_message(MAYA, "1")
        assert stack.wait_for_replies(MAYA, 3, timeout=60)
        assert stack.replies_to(MAYA)[2]["text"] == "Thank you for your feedback!"
        status, week = stack.admin("GET", "/outcomes")
        assert status == 200 and week["csat"] == {"answers": 1, "average": 3.0}
        # and every AWS call on the way was one its function's role (and the queue) grants
        assert stack.iam_refusals() == []
