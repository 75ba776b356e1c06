"""An operator reopens a chat outside Meta's 24-hour window with an approved template: the list
(GET /templates, Meta's `GET /{WABA_ID}/message_templates`, cached), the send
(POST /people/{id}/templates), what the memory keeps, and what Meta refuses. Through the admin
handler, with the Graph API stand-in (devstack/fake_meta.py) and the real Graph client."""

from __future__ import annotations

from typing import Any

import pytest

from devstack.events import META_NUMBER_ID, META_WABA_ID
from memagent.errors import TemplateRefused
from memagent.providers import TemplateMessage
from tests.conftest import AGENT, MAYA, load_function
from tests.integration.test_operator import (  # noqa: F401 (admin, admin_env: fixtures)
    admin,
    admin_env,
    call,
    person,
    taken_over_on_meta,
)

REMINDER = {
    "languages": {"en_US", "es_ES"},
    "parameters": 2,
    "body": "Hi {{1}}, your session is on {{2}}. Reply to confirm.",
}


@pytest.fixture
def meta_admin(consumer, resources, bus, monkeypatch) -> Any:
    """The seat API on a Meta stack whose WABA has templates (a stand-in Graph API)."""
    from devstack.fake_meta import FakeGraph

    with FakeGraph(
        access_token="meta-test-token", numbers={META_NUMBER_ID}, wabas={META_WABA_ID}
    ) as graph:
        graph.templates.update(
            session_reminder=dict(REMINDER),
            spring_offer={"languages": {"en_US"}, "parameters": 0, "status": "PENDING"},
        )
        seat = load_function(
            "admin",
            {
                "TABLE_NAME": resources.table_name,
                "AGENT_ID": AGENT,
                "PROVIDER": "meta",
                "META_GRAPH_URL": graph.url,
                "META_ACCESS_TOKEN": "meta-test-token",
                "META_WABA_ID": META_WABA_ID,
                "OPERATOR_EVENT_BUS": bus["name"],
            },
            monkeypatch,
        )
        yield seat, graph


def send(seat, lambda_context, body: dict[str, Any], key: str) -> tuple[int, Any]:
    return call(
        seat, lambda_context, "POST", f"{person()}/templates", body, **{"idempotency-key": key}
    )


REOPEN = {"name": "session_reminder", "language": "en_US", "parameters": ["Maya", "Thursday 6pm"]}


def test_the_approved_templates_are_listed_with_their_parameters_and_cached(
    meta_admin, lambda_context
):
    seat, graph = meta_admin
    # when an operator lists the templates twice
    status, listed = call(seat, lambda_context, "GET", "/templates")
    again = call(seat, lambda_context, "GET", "/templates")[1]
    # then the approved ones are there, one per language, with their placeholders
    assert status == 200
    assert [(t["name"], t["language"], t["parameters"]) for t in listed["templates"]] == [
        ("session_reminder", "en_US", ["1", "2"]),
        ("session_reminder", "es_ES", ["1", "2"]),
    ]
    assert listed["templates"][0]["body"] == REMINDER["body"]
    # and Meta was asked once (the list is cached), never for the pending one's sake
    listings = [r for r in graph.requests if r["path"].endswith("/message_templates")]
    assert len(listings) == 1 and again == listed


def test_a_template_reopens_a_closed_window_and_is_remembered_as_the_person_reads_it(
    meta_admin, consumer, lambda_context
):
    seat, graph = meta_admin
    # given Maya last wrote 30 hours ago, and an operator took her chat over
    taken_over_on_meta(seat, consumer, lambda_context, minutes_ago=30 * 60)
    assert call(
        seat, lambda_context, "POST", f"{person()}/messages", {"text": "Hi!"},
        **{"idempotency-key": "free-text"},
    )[0] == 422  # fmt: skip
    # when the operator sends the approved reminder with its two parameters
    status, answer = send(seat, lambda_context, REOPEN, "reopen-1")
    # then Meta sends it, and her memory keeps it as she reads it, written by a human
    assert status == 200, answer
    rendered = "Hi Maya, your session is on Thursday 6pm. Reply to confirm."
    assert graph.texts_to(MAYA) == [rendered]
    _, conversation = call(seat, lambda_context, "GET", f"{person()}/conversation")
    assert conversation["messages"][-1]["text"] == rendered
    assert conversation["messages"][-1]["by"] == "human"
    # and a retry with the same key sends nothing more
    assert send(seat, lambda_context, REOPEN, "reopen-1") == (200, {**answer, "repeat": True})
    assert len(graph.sent) == 1


def test_a_template_request_that_died_before_sending_is_sent_as_the_template_by_its_retry(
    meta_admin, consumer, lambda_context, monkeypatch
):
    from tests.integration.faults import Died, crash_after

    seat, graph = meta_admin
    # given Maya last wrote 30 hours ago, and an operator took her chat over
    taken_over_on_meta(seat, consumer, lambda_context, minutes_ago=30 * 60)
    # when the request dies after storing the reminder, before sending it, and the operator's
    # client retries it with the same key
    crash_after(seat.store, "remember_operator_reply", monkeypatch, fault=Died)
    with pytest.raises(Died):
        send(seat, lambda_context, REOPEN, "reopen-died")
    status, answer = send(seat, lambda_context, REOPEN, "reopen-died")
    # then the retry sends it once, as the template it was (outside the window, free text
    # is refused), never as its rendered text
    assert (status, answer["repeat"]) == (200, True)
    sends = [r["json"] for r in graph.requests if r["path"].endswith("/messages")]
    assert [(s["type"], s["template"]["name"]) for s in sends] == [("template", "session_reminder")]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({**REOPEN, "parameters": ["Maya"]}, "takes 2 parameters, 1 given"),
        ({**REOPEN, "language": "fr_FR"}, "no approved template"),
        ({"name": "spring_offer", "language": "en_US", "parameters": []}, "no approved template"),
    ],
)
def test_what_the_template_does_not_take_is_a_400_and_nothing_is_sent(
    meta_admin, consumer, lambda_context, body, says
):
    seat, graph = meta_admin
    taken_over_on_meta(seat, consumer, lambda_context, minutes_ago=30 * 60)
    status, answer = send(seat, lambda_context, body, "bad-1")
    assert status == 400 and says in answer["error"]
    assert graph.sent == []


def test_a_template_meta_paused_since_the_list_was_read_is_refused_and_not_kept(
    meta_admin, consumer, lambda_context
):
    seat, graph = meta_admin
    taken_over_on_meta(seat, consumer, lambda_context, minutes_ago=30 * 60)
    assert call(seat, lambda_context, "GET", "/templates")[0] == 200  # cached as approved
    # given Meta paused the template for its quality meanwhile
    graph.templates["session_reminder"]["status"] = "PAUSED"
    # when the operator sends it
    status, answer = send(seat, lambda_context, REOPEN, "paused-1")
    # then Meta's refusal is said with its code, nothing went out and nothing is kept
    assert status == 409 and "132015" in answer["error"]
    assert graph.sent == []
    _, conversation = call(seat, lambda_context, "GET", f"{person()}/conversation")
    assert "Thursday 6pm" not in str(conversation["messages"])
    # and its retry says the same
    assert send(seat, lambda_context, REOPEN, "paused-1")[0] == 409


def test_a_template_needs_the_chat_taken_over_first(meta_admin, consumer, lambda_context):
    seat, graph = meta_admin
    from tests.integration.test_operator import say

    say(consumer, lambda_context, "Hello?", minutes_ago=30 * 60)
    status, answer = send(seat, lambda_context, REOPEN, "early-1")
    assert status == 409 and "take the chat over first" in answer["error"]
    assert graph.sent == []


def test_a_whasp_stack_lists_no_templates_and_sends_none(admin, consumer, lambda_context):  # noqa: F811 (the fixture)
    from tests.integration.test_operator import say

    say(consumer, lambda_context, "Hello?")
    assert call(admin, lambda_context, "GET", "/templates") == (200, {"templates": []})
    assert call(admin, lambda_context, "POST", f"{person()}/handoff")[0] == 200
    status, answer = send(admin, lambda_context, REOPEN, "whasp-1")
    assert status == 409 and "Meta's" in answer["error"]


# ------------------------------------------------------------------ the Graph stand-in, as Meta


@pytest.fixture
def graph_client() -> Any:
    from devstack.fake_meta import FakeGraph
    from memagent.providers.meta import GraphClient

    with FakeGraph(access_token="meta-test-token", numbers={META_NUMBER_ID}) as graph:
        graph.templates["session_reminder"] = dict(REMINDER)
        yield GraphClient(graph.url, "meta-test-token"), graph


@pytest.mark.parametrize(
    ("language", "parameters", "status", "code"),
    [
        ("en_US", ("Maya",), "APPROVED", 132000),  # a parameter short
        ("en_US", ("Maya", "Thursday", "6pm"), "APPROVED", 132000),  # one too many
        ("fr_FR", ("Maya", "Thursday"), "APPROVED", 132001),  # not in that language
        ("en_US", ("Maya", "Thursday"), "PENDING", 132001),  # not approved (yet)
        ("en_US", ("Maya", "Thursday"), "REJECTED", 132001),
        ("en_US", ("Maya", "Thursday"), "PAUSED", 132015),
        ("en_US", ("Maya", "Thursday"), "DISABLED", 132016),
    ],
)
def test_the_graph_stand_in_refuses_a_template_as_meta_does(
    graph_client, language, parameters, status, code
):
    client, graph = graph_client
    graph.templates["session_reminder"]["status"] = status
    # when the real client sends what Meta refuses, then it is refused for good, by its code
    with pytest.raises(TemplateRefused) as refused:
        client.send_template(
            sender=META_NUMBER_ID,
            to=MAYA,
            template=TemplateMessage("session_reminder", language, parameters),
            key="k",
        )
    assert refused.value.code == code
    assert graph.sent == []
    # and what it takes goes out as the person reads it
    graph.templates["session_reminder"]["status"] = "APPROVED"
    client.send_template(
        sender=META_NUMBER_ID,
        to=MAYA,
        template=TemplateMessage("session_reminder", "en_US", ("Maya", "Thursday")),
        key="k",
    )
    assert graph.texts_to(MAYA) == ["Hi Maya, your session is on Thursday. Reply to confirm."]
