"""Staff answering from the phone on the local stack (provider meta): the webhook, the queue and
the consumer in their own processes, every AWS call checked against the function's role
(devstack.iam): an echo silences the agent and reaches nobody else."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest

from devstack.events import meta_contact, meta_message, meta_notification
from devstack.stack import DevStack

MAYA = "+447700900123"

pytestmark = [pytest.mark.slow]


@pytest.fixture
def meta_stack() -> Iterator[DevStack]:
    with DevStack(level="quiet", log_path=tempfile.mkdtemp() + "/stack.log", provider="meta") as s:
        yield s


def test_a_staff_echo_on_the_local_stack_silences_the_agent_within_its_grants(meta_stack):
    stack = meta_stack

    def writes(text: str) -> None:
        at = int(stack.now().timestamp())
        notification = meta_notification(
            contacts=[meta_contact(phone=MAYA)],
            messages=[meta_message(text, phone=MAYA, timestamp=at)],
            number_id=stack.business_number,
        )
        stack._expect_accepted(stack.post_meta(notification))
        assert stack.wait_idle()

    # given Maya wrote and the agent answered
    writes("Can I book a session?")
    assert len(stack.replies_to(MAYA)) == 1
    # when staff answer her from the WhatsApp Business app on the same number
    echo = {
        "from": "14155550100",
        "to": MAYA.removeprefix("+"),
        "id": "wamid.STAFF0001",
        "timestamp": str(int(stack.now().timestamp())),
        "type": "text",
        "text": {"body": "Sam here: Thursday at 6 works!"},
    }
    notification = meta_notification(
        field="smb_message_echoes", message_echoes=[echo], number_id=stack.business_number
    )
    stack._expect_accepted(stack.post_meta(notification))
    assert stack.wait_idle()
    # then what she writes next is kept for the human: the agent says nothing
    writes("Perfect, thanks!")
    assert len(stack.replies_to(MAYA)) == 1
    # and every AWS call on the way was one its function's role grants
    assert stack.iam_refusals() == []
