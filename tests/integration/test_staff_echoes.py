"""Staff answering from the phone (Meta's Coexistence): what staff type in the WhatsApp Business
app on the stack's number reaches the webhook as `smb_message_echoes`. Through the webhook and
consumer handlers (moto's SQS and DynamoDB, the Graph API and OpenAI stand-ins): the echo is
remembered as the business's words and silences the agent for the handoff timeout; the agent's
own sends are never taken for staff's.

The payloads are the committed samples (events/meta-webhook-smb-message-echoes.json: the `pywa`
library's outgoing-message fixtures, its placeholders filled in; events/meta-webhook-history.json:
Chatwoot's Coexistence history spec)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from devstack.events import META_NUMBER_ID
from tests.integration import test_meta
from tests.integration.test_meta import MAYA_BSUID, MAYA_PHONE, NOW, memory_rows, post, text_from

# test_meta's fixtures: its webhook and consumer on provider meta, the Graph stand-in, the queue
webhook, consumer, queue = test_meta.webhook, test_meta.consumer, test_meta.queue
meta_consumer_env = test_meta.meta_consumer_env  # a fixture (the consumer's)
graph, graph_server = test_meta.graph, test_meta.graph_server

EVENTS = Path(__file__).resolve().parents[2] / "events"
DAY = 24 * 3600


def sample(name: str) -> dict[str, Any]:
    """A committed sample's notification (the POST body Meta sends)."""
    return json.loads(json.loads((EVENTS / f"meta-webhook-{name}.json").read_text())["body"])


def staff_echo(*, at: int, wamid: str | None = None, to: str = MAYA_PHONE) -> dict[str, Any]:
    """The sample's echo (and its edit), as staff sent it at `at`; `wamid`: another id."""
    notification = copy.deepcopy(sample("smb-message-echoes"))
    value = notification["entry"][0]["changes"][0]["value"]
    for echo in value["message_echoes"]:
        echo["timestamp"] = str(at)
        echo["to"] = to.removeprefix("+")
        if to != MAYA_PHONE:
            echo.pop("to_user_id", None)
    if wamid:
        value["message_echoes"][0]["id"] = wamid
    return notification


STAFF_WORDS = sample("smb-message-echoes")["entry"][0]["changes"][0]["value"]["message_echoes"][0][
    "text"
]["body"]


def turns(resources) -> list[tuple[str, str, str | None]]:
    rows = sorted(
        (r for r in memory_rows(resources, MAYA_BSUID) if r["sk"].startswith("MSG#")),
        key=lambda r: int(r["seq"]),
    )
    return [(r["role"], r["text"], r.get("author")) for r in rows]


def maya_writes(webhook, queue, consumer, text: str, at: int, lambda_context) -> None:
    notification = text_from(text, phone=MAYA_PHONE, bsuid=MAYA_BSUID, at=at)
    assert post(webhook, notification, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0


def test_a_staff_echo_is_remembered_as_the_business_and_silences_the_agent(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given Maya wrote and the agent answered her
    maya_writes(webhook, queue, consumer, "Can I book a session?", NOW - 60, lambda_context)
    assert len(graph.texts_to(MAYA_PHONE)) == 1
    calls = len(openai.calls())
    # when staff answer her from the WhatsApp Business app (an echo, and an edit of it)
    assert post(webhook, staff_echo(at=NOW), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then staff's words are in her memory as the business's, written by a human
    assert turns(resources)[-1] == ("assistant", STAFF_WORDS, "human")
    # and what she writes next is kept for the human: no model call, nothing sent
    maya_writes(webhook, queue, consumer, "Great, thanks Sam!", NOW + 60, lambda_context)
    assert turns(resources)[-1] == ("user", "Great, thanks Sam!", None)
    assert len(graph.texts_to(MAYA_PHONE)) == 1
    assert len(openai.calls()) == calls
    # and the echo redelivered by Meta is stored once
    assert post(webhook, staff_echo(at=NOW), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert [t for t in turns(resources) if t[1] == STAFF_WORDS] == [
        ("assistant", STAFF_WORDS, "human")
    ]


def test_the_agent_answers_again_once_the_handoff_timeout_has_passed_since_staffs_words(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given staff answered Maya from the phone 24 hours and a minute ago (the timeout is 24 h)
    maya_writes(webhook, queue, consumer, "Can I book a session?", NOW - DAY, lambda_context)
    assert post(webhook, staff_echo(at=NOW - DAY + 3600 - 60), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    assert len(graph.texts_to(MAYA_PHONE)) == 1
    # when she writes now, then the agent answers her again
    maya_writes(webhook, queue, consumer, "Are you there?", NOW, lambda_context)
    assert len(graph.texts_to(MAYA_PHONE)) == 2
    # and the model saw staff's words as the business's side of the conversation
    request = openai.calls()[-1]
    assert STAFF_WORDS in json.dumps(request)


def test_an_echo_of_the_agents_own_reply_is_not_taken_for_staff(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given the agent answered Maya (the Graph API gave its reply a message id)
    maya_writes(webhook, queue, consumer, "Can I book a session?", NOW - 60, lambda_context)
    own = graph.sent[-1]["id"]
    before = turns(resources)
    # when an echo carries that very message id
    assert post(webhook, staff_echo(at=NOW, wamid=own), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then nothing is stored, and the agent keeps the chat: her next message is answered
    assert turns(resources) == before
    maya_writes(webhook, queue, consumer, "Thursday?", NOW + 60, lambda_context)
    assert len(graph.texts_to(MAYA_PHONE)) == 2


def test_an_echo_to_someone_we_do_not_remember_starts_no_memory(
    webhook, queue, consumer, graph, resources, lambda_context
):
    # given Maya never wrote; when staff write to her from the phone
    assert post(webhook, staff_echo(at=NOW), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then nothing of hers is kept, and nothing is sent
    assert memory_rows(resources, MAYA_BSUID) == []
    assert memory_rows(resources, MAYA_PHONE) == []
    assert graph.sent == []


def test_the_apps_history_and_contact_syncs_are_acknowledged_and_queue_nothing(
    webhook, queue, lambda_context
):
    # when Coexistence sends the app's past chats and its contacts
    for name in ("history", "smb-app-state-sync"):
        assert post(webhook, sample(name), lambda_context) == 200
    # then nothing is queued: no past message is answered or remembered as new
    assert queue.peek() == []


def test_the_echo_sample_is_for_the_stacks_own_number():
    value = sample("smb-message-echoes")["entry"][0]["changes"][0]["value"]
    assert value["metadata"]["phone_number_id"] == META_NUMBER_ID
