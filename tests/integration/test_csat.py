"""The one-tap CSAT question after a hand-back (issue 42, item 4), through the handlers: Meta's
webhook -> the event queue (moto over HTTP) -> the consumer, the admin API's hand-back putting
the question into the person's group, the Graph and whasp stand-ins receiving what is sent.
One question per hand-back, whatever is redelivered or crashes; the person's tap, number or
word is the answer, recorded with the conversation (GET /outcomes) and never the model's; none
is sent to who opted out."""

from __future__ import annotations

import json
from datetime import date, timedelta
from typing import Any

import boto3
import pytest

from devstack.apigw import http_api_event
from devstack.events import meta_tap
from devstack.fake_openai import turns_of
from devstack.lambda_harness import reported_failures as failures
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch
from tests.integration import test_meta
from tests.integration.test_choices import notify, text
from tests.integration.test_consumer import message
from tests.integration.test_meta import ACCESS_TOKEN, MAYA_BSUID, MAYA_PHONE, NOW, post
from tests.integration.test_operator import OPERATOR_ARN, person

webhook, consumer, queue = test_meta.webhook, test_meta.consumer, test_meta.queue
meta_consumer_env = test_meta.meta_consumer_env  # a fixture (the consumer's)
graph, graph_server = test_meta.graph, test_meta.graph_server

WEEK = "from=2026-11-29&to=2026-12-05"  # the whasp tests' messages' week
TODAY = f"from={(date.today() - timedelta(days=1)).isoformat()}&to={date.today().isoformat()}"


def admin_env(resources, **more: str) -> dict[str, str]:
    return {
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "LEDGER_TTL_DAYS": "3650",
        "CSAT_QUEUE_URL": resources.queue_urls["EventQueue"],
        **more,
    }


@pytest.fixture
def admin(resources, graph, monkeypatch) -> Any:
    """The admin API of a Meta stack that asks for a rating after every hand-back."""
    env = admin_env(
        resources,
        PROVIDER="meta",
        META_GRAPH_URL=graph.url,
        META_ACCESS_TOKEN=ACCESS_TOKEN,
        CSAT_AFTER_HANDBACK="true",
    )
    return load_function("admin", env, monkeypatch)


def call(admin, lambda_context, method: str, path: str, query: str = "") -> tuple[int, Any]:
    event = http_api_event(
        method=method, path=path, headers={}, body=b"", query=query, caller=OPERATOR_ARN
    )
    response = admin.handler(event, lambda_context)
    return response["statusCode"], json.loads(response["body"] or "null")


def write(webhook, queue, consumer, message: dict[str, Any], lambda_context) -> None:
    assert post(webhook, notify(message), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0


def handed_over(webhook, queue, consumer, lambda_context) -> None:
    """Maya wrote, then asked for a human: the chat is a human's."""
    write(webhook, queue, consumer, text("My order never came"), lambda_context)
    write(webhook, queue, consumer, text("talk to a human", NOW + 30), lambda_context)


def questions(graph) -> list[dict[str, Any]]:
    return [s for s in graph.sent if s.get("interactive")]


def test_after_a_hand_back_she_gets_one_question_taps_good_and_the_outcomes_show_it(
    webhook, queue, consumer, admin, graph, openai, resources, lambda_context
):
    # given Maya's chat was handed to a human (on a stack with CsatAfterHandback=true)
    handed_over(webhook, queue, consumer, lambda_context)
    model_calls = len(openai.calls())
    # when the operator hands it back, and the consumer takes what the queue holds
    status, body = call(admin, lambda_context, "DELETE", f"{person(MAYA_PHONE)}/handoff")
    assert status == 200 and body["ended"] is True and body["csat"] is True
    assert queue.drain(consumer, lambda_context) == 0
    # then she got one question, with three reply buttons to tap
    [asked] = questions(graph)
    shown = asked["interactive"]
    assert shown["type"] == "button"
    assert shown["body"]["text"] == "How did we do with your request?"
    assert [b["reply"]["title"] for b in shown["action"]["buttons"]] == ["Good", "Okay", "Bad"]
    # when she taps Good (Meta's button_reply, quoting the question)
    tap = meta_tap(asked, "Good", phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=NOW + 90)
    write(webhook, queue, consumer, tap, lambda_context)
    # then she is thanked, briefly, and the model was never asked about her tap
    assert graph.sent[-1]["text"] == "Thank you for your feedback!"
    assert len(openai.calls()) == model_calls
    # and the week's figures hold her answer, with the conversation it rates
    status, week = call(admin, lambda_context, "GET", "/outcomes", TODAY)
    assert status == 200 and week["csat"] == {"answers": 1, "average": 3.0}
    # and her next message is an ordinary one again: the model answers it
    write(webhook, queue, consumer, text("Good", NOW + 120), lambda_context)
    assert len(openai.calls()) == model_calls + 1
    assert call(admin, lambda_context, "GET", "/outcomes", TODAY)[1]["csat"]["answers"] == 1


def test_a_redelivered_or_crashed_question_is_sent_once(
    webhook, queue, consumer, admin, graph, resources, lambda_context
):
    # given a hand-back queued the question
    handed_over(webhook, queue, consumer, lambda_context)
    assert call(admin, lambda_context, "DELETE", f"{person(MAYA_PHONE)}/handoff")[0] == 200
    # and the hand-back's request is retried (the operator's client timed out): queued again
    status, body = call(admin, lambda_context, "DELETE", f"{person(MAYA_PHONE)}/handoff")
    assert status == 200 and body["ended"] is False and body["csat"] is True
    # when the first send fails (Graph answers 500) and the record is retried
    graph.fail_next(1, status=500)
    queue.drain(consumer, lambda_context)
    # then she got the question once
    assert len(questions(graph)) == 1
    # when the same event is delivered again, however late (SQS's at-least-once)
    put(resources, _the_question_event(resources), "a-late-copy")
    assert queue.drain(consumer, lambda_context) == 0
    # then nothing more is sent
    assert len(questions(graph)) == 1


def put(resources, body: dict[str, Any], dedup: str) -> None:
    """`body` on the event queue, in its person's group, as another copy of it would come."""
    boto3.client("sqs").send_message(
        QueueUrl=resources.queue_urls["EventQueue"],
        MessageBody=json.dumps(body),
        MessageGroupId=str(body["person"]),
        MessageDeduplicationId=dedup,
    )


def _the_question_event(resources) -> dict[str, Any]:
    """The CSAT event the hand-back queued, rebuilt from its ledger entry's id (as signed)."""
    from memagent.lifecycle import csat_body

    table = dynamodb_table(resources.table_name)
    items = table.scan()["Items"]
    [entry] = [i for i in items if str(i.get("event_id", "")).startswith("csat:")]
    _csat, day, asked = str(entry["event_id"]).split(":", 2)
    return csat_body(str(entry["pk"]), day, asked)


def test_an_opted_out_person_gets_no_question(
    webhook, queue, consumer, admin, graph, lambda_context
):
    # given Maya's chat was handed to a human, and she wrote STOP meanwhile
    handed_over(webhook, queue, consumer, lambda_context)
    write(webhook, queue, consumer, text("STOP", NOW + 60), lambda_context)
    sent = len(graph.sent)
    # when the operator hands the chat back
    assert call(admin, lambda_context, "DELETE", f"{person(MAYA_PHONE)}/handoff")[0] == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then nothing was sent to her
    assert len(graph.sent) == sent and questions(graph) == []


def test_an_event_without_the_stacks_signature_is_parked_and_sends_nothing(
    webhook, queue, consumer, admin, graph, resources, lambda_context
):
    from memagent.memory import person_key

    handed_over(webhook, queue, consumer, lambda_context)
    call(admin, lambda_context, "DELETE", f"{person(MAYA_PHONE)}/handoff", "csat=false")
    forged = {
        "memagent": "csat",
        "person": person_key(AGENT, MAYA_BSUID),
        "day": "2026-12-04",
        "asked": "2026-12-04T10:00:00Z",
        "sig": "0" * 64,
    }
    put(resources, forged, "forged")
    queue.drain(consumer, lambda_context)
    assert questions(graph) == []
    assert queue.peek() == []  # parked (the dead-letter queue), never retried


@pytest.fixture
def whasp_admin(resources, whasp, monkeypatch) -> Any:
    """A whasp stack that asks for a rating only when the operator says so (the default)."""
    env = admin_env(
        resources, PROVIDER="whasp", WHASP_API_URL=whasp.url, WHASP_API_KEY="whasp-test-key"
    )
    return load_function("admin", env, monkeypatch)


@pytest.fixture
def whasp_consumer(consumer_env, monkeypatch) -> Any:
    return load_function("consumer", consumer_env, monkeypatch)


def _say(consumer, lambda_context, words: str, minute: float) -> None:
    assert failures(consumer.handler(sqs_batch(message(words, minute)), lambda_context)) == []


def test_on_whasp_the_question_is_numbered_lines_and_a_typed_number_is_the_answer(
    whasp_consumer, whasp_admin, whasp, openai, queue, lambda_context
):
    # given Maya asked for a human on a whasp stack with CsatAfterHandback off
    _say(whasp_consumer, lambda_context, "talk to a human", 0)
    # when the operator hands the chat back without asking: nothing is queued
    status, body = call(whasp_admin, lambda_context, "DELETE", f"{person()}/handoff")
    assert status == 200 and body["csat"] is False
    assert queue.peek() == []
    # when another hand-back asks for it (?csat=true), after a new take-over
    assert call(whasp_admin, lambda_context, "POST", f"{person()}/handoff")[0] == 200
    status, body = call(whasp_admin, lambda_context, "DELETE", f"{person()}/handoff", "csat=true")
    assert status == 200 and body["csat"] is True
    assert queue.drain(whasp_consumer, lambda_context) == 0
    # then she reads the question with its options as numbered lines
    question = whasp.sent[-1]["text"]
    assert question == "How did we do with your request?\n\n1. Good\n2. Okay\n3. Bad"
    # when she types "2"
    calls = len(openai.calls())
    _say(whasp_consumer, lambda_context, "2", 5)
    # then it is her rating (Okay), thanked without the model
    assert whasp.sent[-1]["text"] == "Thank you for your feedback!"
    assert len(openai.calls()) == calls
    week = call(whasp_admin, lambda_context, "GET", "/outcomes", WEEK)[1]
    assert week["csat"] == {"answers": 1, "average": 2.0}
    # and a hand-back's bad ?csat= is refused
    status, _ = call(whasp_admin, lambda_context, "DELETE", f"{person()}/handoff", "csat=maybe")
    assert status == 400


def test_anything_else_is_an_ordinary_message_and_the_question_lapses(
    whasp_consumer, whasp_admin, whasp, openai, queue, lambda_context
):
    # given Maya was asked for her rating
    _say(whasp_consumer, lambda_context, "talk to a human", 0)
    call(whasp_admin, lambda_context, "DELETE", f"{person()}/handoff", "csat=true")
    assert queue.drain(whasp_consumer, lambda_context) == 0
    # when she writes something else, then "1"
    calls = len(openai.calls())
    _say(whasp_consumer, lambda_context, "Actually, where is my parcel?", 5)
    _say(whasp_consumer, lambda_context, "1", 6)
    # then both went to the model, and no rating was recorded
    assert len(openai.calls()) == calls + 2
    said = [t for r, t in turns_of(openai.calls()[-1]) if r == "user"]
    assert said[-1] == "1"
    week = call(whasp_admin, lambda_context, "GET", "/outcomes", WEEK)[1]
    assert week["csat"]["answers"] == 0
    assert MAYA  # the whasp tests' person
