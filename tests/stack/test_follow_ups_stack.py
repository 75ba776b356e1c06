"""Follow-ups on the local stack (FollowUps=true): the template's schedule group, moto's
Scheduler fired on AWS's clock here (devstack.scheduler), the offline model asking for and then
writing the reminder; the clock moves to 9:00 on Maya's clock and the reminder arrives once."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from devstack.clock import SQS_CLOCK
from devstack.stack import DevStack

MAYA = "+447700900123"


@pytest.mark.slow  # a whole stack (about 20 s): make test-slow
@pytest.mark.xdist_group("follow-ups-stack")
def test_a_reminder_arrives_once_at_nine_on_the_local_stack(tmp_path):
    with (
        SQS_CLOCK.kept(),
        DevStack(
            env={},  # the offline model, whatever this shell's OPENAI_* say
            parameters={"FollowUps": "true"},
            level="quiet",
            log_path=tmp_path / "stack.log",
        ) as stack,
    ):
        # given Maya asks for a reminder, on her clock (London)
        stack.send_message(MAYA, "Remind me tomorrow at 9 to call the dentist")
        assert stack.wait_for_replies(MAYA, 1, timeout=60)
        assert "follow-up scheduled for" in stack.replies_to(MAYA)[0]["text"]
        [pending] = stack.scheduler.pending()
        at = datetime.fromisoformat(pending["ScheduleExpression"][3:-1])
        nine = at.replace(tzinfo=ZoneInfo(pending["ScheduleExpressionTimezone"]))
        assert (at.hour, at.minute) == (9, 0)
        # when AWS's clock here passes 9:00 in London (the scheduler looks twice a second)
        SQS_CLOCK.advance(nine.astimezone(UTC).timestamp() - SQS_CLOCK.now() + 1)
        assert stack.wait_for_replies(MAYA, 2, timeout=60)
        assert stack.wait_idle(timeout=60)
        # then the reminder arrived, once, and nothing is pending
        texts = [r["text"] for r in stack.replies_to(MAYA)]
        assert texts[1].endswith("Reminder, as you asked: call the dentist.")
        assert len(texts) == 2 and stack.scheduler.pending() == []
        firing = stack.scheduler
        assert firing.fired and not (firing.failed or firing.dead_lettered or firing.gone)
        # and her next message's model call sees the reminder in the conversation
        stack.send_message(MAYA, "Thanks, I called them")
        assert stack.wait_for_replies(MAYA, 3, timeout=60)
        assert "Reminder, as you asked" in json.dumps(stack.openai.calls()[-1]["input"])
