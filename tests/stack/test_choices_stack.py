"""The demo's booking scene on the local stack (issue 42): the free slots offered as Meta's
interactive list, the person's tap coming back as her message, the slot booked; on whasp, the
same offer as numbered lines."""

from __future__ import annotations

import pytest

from devstack.clock import SQS_CLOCK
from devstack.console import Console
from devstack.demo import MAYA, Demo
from devstack.stack import DevStack


@pytest.mark.slow  # a whole stack (about 20 s): make test-slow
@pytest.mark.xdist_group("choices-stack")
@pytest.mark.parametrize("provider", ["meta", "whasp"])
def test_the_demos_booking_scene_offers_the_slots_to_tap_and_books_the_choice(tmp_path, provider):
    console = Console(level="quiet")
    with (
        SQS_CLOCK.kept(),
        DevStack(
            env={},  # the offline model, whatever this shell's OPENAI_* say
            provider=provider,
            parameters={"ExampleBookingTool": "true"},
            console=console,
            level="quiet",
            log_path=tmp_path / "stack.log",
        ) as stack,
    ):
        # when the demo's booking scene runs: Maya asks for a session, picks 10:00
        Demo(stack, console).booking()
        sent = stack.replies_to(MAYA)
        # then every check of the scene passed
        assert console.failed == [], console.failed
        # and the offer went out as the provider shows choices: a list on Meta, numbered text
        # on whasp; her choice is her message, and the booking's reply follows it
        if provider == "meta":
            offer = sent[0]["interactive"]
            assert offer["type"] == "list"
            rows = [row["title"] for row in offer["action"]["sections"][0]["rows"]]
            assert "10:00" in rows and len(rows) <= 10
            assert sent[0]["text"] == "Free slots on 2026-12-03:"
        else:
            slots = ("09:00", "10:00", "11:00", "14:00", "15:00", "16:00")
            numbered = "\n".join(f"{n}. {slot}" for n, slot in enumerate(slots, 1))
            assert sent[0]["text"] == f"Free slots on 2026-12-03:\n\n{numbered}"
        user = [text for _, role, text in stack.view(MAYA).turns if role == "user"]
        assert user[-1] == "10:00"
        assert "Booked: 2026-12-03 10:00" in sent[-1]["text"] and len(sent) == 2
