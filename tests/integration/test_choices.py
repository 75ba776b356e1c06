"""Choices to tap (issue 42, item 3), through the webhook and consumer handlers on Meta (the
Graph API stand-in, which refuses what Meta refuses) and whasp: the model's built-in
offer_choices tool, the options as reply buttons or a list, the person's tap back as their
message; numbered lines where interactive messages cannot go."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devstack.events import meta_contact, meta_message, meta_notification, meta_tap
from devstack.fake_openai import OFFLINE, turns_of
from memagent.errors import SendRejected
from memagent.memory import Choices
from memagent.providers.meta.graph import GraphClient, interactive
from tests.integration import test_meta
from tests.integration.test_meta import (
    ACCESS_TOKEN,
    MAYA_BSUID,
    MAYA_PHONE,
    META_NUMBER_ID,
    NOW,
    memory_rows,
    post,
)

webhook, consumer, queue = test_meta.webhook, test_meta.consumer, test_meta.queue
meta_consumer_env = test_meta.meta_consumer_env  # a fixture (the consumer's)
graph, graph_server = test_meta.graph, test_meta.graph_server

SLOTS = ["09:00", "10:00", "11:00", "14:00"]


def offer(choices: list[str], text: str = "Which time suits you?") -> Any:
    """A model that offers `choices` to the person's first message, then says what they chose."""

    def respond(request: dict[str, Any]) -> Any:
        said = [t for r, t in turns_of(request) if r == "user"]
        if len(said) == 1:
            arguments = {"text": text, "choices": choices, "button": "Pick a time"}
            item = {"type": "function_call", "id": "fc_1", "call_id": "call_1"}
            item |= {"name": "offer_choices", "arguments": json.dumps(arguments)}
            return {"output": [{**item, "status": "completed"}]}
        return f"{OFFLINE} You chose: {said[-1]}"

    return respond


def notify(message: dict[str, Any]) -> dict[str, Any]:
    contacts = [meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)]
    return meta_notification(contacts=contacts, messages=[message])


def write(webhook, queue, consumer, message: dict[str, Any], lambda_context) -> None:
    assert post(webhook, notify(message), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0


def text(words: str, timestamp: int = NOW) -> dict[str, Any]:
    return meta_message(words, phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=timestamp)


def test_offered_slots_go_out_as_a_list_and_the_tap_comes_back_as_her_message(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given a model that offers four slots to tap
    openai.responder = offer(SLOTS)
    # when Maya asks for a session
    write(webhook, queue, consumer, text("Can I book a session?"), lambda_context)
    # then the Graph API got one interactive list: her four slots as rows, the model's text as
    # its body and its label on the button
    [sent] = graph.sent
    shown = sent["interactive"]
    assert shown["type"] == "list" and shown["body"]["text"] == "Which time suits you?"
    assert shown["action"]["button"] == "Pick a time"
    assert [r["title"] for r in shown["action"]["sections"][0]["rows"]] == SLOTS
    # and memory keeps the reply as a text model sees it: the options as numbered lines
    rows = memory_rows(resources, MAYA_BSUID)
    [reply] = [r for r in rows if r["sk"].startswith("MSG#") and r["role"] == "assistant"]
    assert reply["text"] == "Which time suits you?\n\n1. 09:00\n2. 10:00\n3. 11:00\n4. 14:00"
    # when she taps 10:00 (Meta's list_reply, quoting the list)
    write(
        webhook,
        queue,
        consumer,
        meta_tap(sent, "10:00", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 60),
        lambda_context,
    )
    # then her choice is her message: stored, and what the model answers
    said = [t for r, t in turns_of(openai.calls()[-1]) if r == "user"]
    assert said[-1] == "10:00"
    assert graph.sent[-1]["text"].endswith("You chose: 10:00")


def test_up_to_three_short_options_are_reply_buttons_and_a_button_tap_is_her_message(
    webhook, queue, consumer, graph, openai, lambda_context
):
    # given a model that offers a yes or no
    openai.responder = offer(["Yes", "No"], text="Shall I keep Saturday for you?")
    write(webhook, queue, consumer, text("Saturday works"), lambda_context)
    # then they are reply buttons
    [sent] = graph.sent
    buttons = sent["interactive"]["action"]["buttons"]
    assert sent["interactive"]["type"] == "button"
    assert [b["reply"]["title"] for b in buttons] == ["Yes", "No"]
    # when she taps Yes
    write(
        webhook,
        queue,
        consumer,
        meta_tap(sent, "Yes", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 60),
        lambda_context,
    )
    # then the model reads her "Yes"
    assert graph.sent[-1]["text"].endswith("You chose: Yes")


def test_a_long_option_is_cut_on_its_row_and_the_tap_brings_back_the_whole_option(
    webhook, queue, consumer, graph, openai, lambda_context
):
    # given options longer than a row title's 24 characters (at most 72: a description's)
    long = "Tuesday 10:00 with Dr Okafor, room 2"
    openai.responder = offer([long, "Wednesday 9:00"])
    write(webhook, queue, consumer, text("When can I come?"), lambda_context)
    # then the stand-in accepted a list (not buttons: a button title holds 20), the long one's
    # title cut with an ellipsis and whole in its description
    [sent] = graph.sent
    [row, short] = sent["interactive"]["action"]["sections"][0]["rows"]
    assert len(row["title"]) == 24 and row["title"].endswith("\u2026")
    assert row["description"] == long and "description" not in short
    # when she taps it
    write(
        webhook,
        queue,
        consumer,
        meta_tap(sent, long, phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 60),
        lambda_context,
    )
    # then the model reads the whole option she chose
    assert graph.sent[-1]["text"].endswith(f"You chose: {long}")


def test_a_template_quick_reply_button_is_her_message(
    webhook, queue, consumer, graph, openai, lambda_context
):
    # given the old-style `button` message a template's quick-reply button sends
    tap = meta_message(
        phone=MAYA_PHONE,
        bsuid=MAYA_BSUID,
        kind="button",
        timestamp=NOW,
        body={"payload": "resume-coaching", "text": "Count me in"},
    )
    write(webhook, queue, consumer, tap, lambda_context)
    # then the model reads its words
    said = [t for r, t in turns_of(openai.calls()[-1]) if r == "user"]
    assert said == ["Count me in"]


def test_options_the_tool_cannot_take_go_back_to_the_model_which_tries_again(
    webhook, queue, consumer, graph, openai, lambda_context
):
    # given a model that first offers eleven options (a list holds ten), then ten
    rounds: list[int] = []

    def respond(request: dict[str, Any]) -> Any:
        outputs = [i for i in request["input"] if i.get("type") == "function_call_output"]
        rounds.append(len(outputs))
        if len(outputs) == 2:
            return f"{OFFLINE} unreachable"
        n = 11 if not outputs else 10
        arguments = {"text": "Pick one", "choices": [f"Slot {i}" for i in range(n)]}
        call_id = f"call_{len(outputs)}"
        item = {"type": "function_call", "id": f"fc_{len(outputs)}", "call_id": call_id}
        return {"output": [{**item, "name": "offer_choices", "arguments": json.dumps(arguments)}]}

    openai.responder = respond
    write(webhook, queue, consumer, text("What's free?"), lambda_context)
    # then the first call's error went back to the model, and the second's ten rows went out
    refused = json.loads(openai.calls()[1]["input"][-1]["output"])
    assert "1 to 10 different options" in refused["error"]
    [sent] = graph.sent
    assert len(sent["interactive"]["action"]["sections"][0]["rows"]) == 10


def test_whasp_sends_the_options_as_numbered_lines(
    consumer_env, whasp, openai, monkeypatch, lambda_context
):
    from tests.conftest import load_function, sqs_batch
    from tests.integration.test_consumer import message

    # given a whasp stack, whose messages are text only, and a model offering two slots
    openai.responder = offer(["09:00", "10:00"])
    handler = load_function("consumer", consumer_env, monkeypatch)
    # when the person asks
    handler.handler(sqs_batch(message("Can I book?")), lambda_context)
    # then one text went out, the options numbered under the model's words
    [sent] = whasp.sent
    assert sent["text"] == "Which time suits you?\n\n1. 09:00\n2. 10:00"


# ------------------------------------------------------------------ Meta's limits


@pytest.mark.parametrize(
    ("shown", "problem"),
    [
        (
            {
                "type": "button",
                "action": {
                    "buttons": [
                        {"type": "reply", "reply": {"id": f"b{i}", "title": f"Option {i}"}}
                        for i in range(4)
                    ]
                },
            },
            "1 to 3 buttons",
        ),
        (
            {
                "type": "button",
                "action": {
                    "buttons": [{"type": "reply", "reply": {"id": "b1", "title": "x" * 21}}]
                },
            },
            "button title",
        ),
        (
            {
                "type": "list",
                "action": {
                    "button": "Pick",
                    "sections": [
                        {"rows": [{"id": f"r{i}", "title": f"Row {i}"} for i in range(11)]}
                    ],
                },
            },
            "rows: 1 to 10",
        ),
        (
            {
                "type": "list",
                "action": {
                    "button": "Pick",
                    "sections": [{"rows": [{"id": "r1", "title": "y" * 25}]}],
                },
            },
            "row title",
        ),
        (
            {
                "type": "list",
                "action": {
                    "button": "z" * 21,
                    "sections": [{"rows": [{"id": "r1", "title": "ok"}]}],
                },
            },
            "action.button",
        ),
    ],
    ids=["4-buttons", "button-title-21", "11-rows", "row-title-25", "list-button-21"],
)
def test_the_graph_stand_in_refuses_interactive_messages_past_metas_limits(graph, shown, problem):
    import urllib3

    # given an interactive message past one of Meta's limits
    body = {
        "messaging_product": "whatsapp",
        "to": MAYA_PHONE.lstrip("+"),
        "type": "interactive",
        "interactive": {**shown, "body": {"text": "Choose"}},
    }
    # when it is posted
    response = urllib3.request(
        "POST",
        f"{graph.url}/{META_NUMBER_ID}/messages",
        body=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {ACCESS_TOKEN}", "Content-Type": "application/json"},
    )
    # then Meta's 131009 refuses it whole, and nothing is sent
    error = json.loads(response.data)["error"]
    assert response.status == 400 and error["code"] == 131009 and problem in error["message"]
    assert graph.sent == []
    # and our client takes such an answer as a refusal for good (the reply is parked, not
    # retried): shown here with a payload forced past the limits
    client = GraphClient(graph.url, ACCESS_TOKEN)
    with pytest.raises(SendRejected) as refused:
        client._send_message(
            META_NUMBER_ID,
            MAYA_PHONE,
            "k",
            type="interactive",
            interactive={**shown, "body": {"text": "Choose"}},
        )
    assert refused.value.code == 131009


def test_what_we_render_always_fits_metas_limits(graph):
    # given options at every edge of Meta's limits
    cases = [
        Choices(("a" * 20, "b" * 20, "c" * 20)),  # three buttons, titles of 20
        Choices(("a" * 21,)),  # a title past 20: a list
        Choices(tuple(f"{i} " + "x" * 70 for i in range(10)), button="w" * 30),  # 10 long rows
    ]
    client = GraphClient(graph.url, ACCESS_TOKEN)
    for choices in cases:
        # when each is sent
        client.send_choices(
            sender=META_NUMBER_ID,
            to=MAYA_PHONE,
            text=choices.numbered("Pick"),
            choices=choices,
            key="k",
        )
    # then the stand-in (Meta's limits) accepted all three as interactive messages
    assert [s["interactive"]["type"] for s in graph.sent] == ["button", "list", "list"]
    # and what no interactive message holds (an option past 72 characters) is numbered text
    too_long = Choices(("q" * 73, "short"))
    assert interactive(too_long.numbered("Pick"), too_long) is None
