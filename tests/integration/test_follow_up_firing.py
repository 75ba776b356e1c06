"""A follow-up's firing, through the consumer's handler (memagent.turn.follow_ups): what each
delivery decided (the consumer logs it, "event handled"), what operators are told, what the
model sees at the time, and two deliveries of one firing racing each other."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devstack.clock import SQS_CLOCK
from devstack.events import BUSINESS
from devstack.fake_openai import notes_of
from devstack.lambda_harness import sqs_message_record
from memagent.memory.budget import day_of
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, seed_turns
from tests.integration.test_follow_up_guards import parked
from tests.integration.test_follow_ups import (  # noqa: F401 (fixtures)
    ASK,
    REMINDER,
    Model,
    admin,
    asked,
    due_items,
    due_record,
    emitted,
    follow_up_stack,
    human_has_the_chat,
    logged,
    run_due,
    say,
    stack,
    tomorrow_at_nine,
)
from tests.integration.test_tools import call


def decisions(caplog) -> list[str]:
    return [line["decision"] for line in logged(caplog, "event handled")]


def test_a_reminder_is_sent_once_and_its_redelivery_is_a_repeat(
    stack, admin, openai, whasp, lambda_context, caplog, capsys
):
    from tests.integration.test_operator import call as admin_call
    from tests.integration.test_operator import person

    with caplog.at_level("INFO"):
        agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    # given the model was told, as JSON, what it scheduled, and the call was not a failure
    [told] = [
        json.loads(i["output"])
        for i in openai.calls()[-1]["input"]
        if i.get("type") == "function_call_output"
    ]
    assert told == {"output": f"follow-up scheduled for {at:%Y-%m-%dT%H:%M} (Europe/London)"}
    assert [line["failed"] for line in logged(caplog, "tool called")] == [False]
    caplog.clear()
    capsys.readouterr()
    # when its time comes and the firing is delivered twice
    before = datetime.now(UTC)
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at, times=2)
    # then the first sent the reminder (counted as sent), the second found it sent: a repeat
    assert whasp.texts_to(MAYA).count(REMINDER) == 1
    assert decisions(caplog) == ["follow_up_sent", "follow_up_repeat"]
    assert emitted(capsys.readouterr().out, "FollowUpsSent")
    # and her memory holds the reminder with when it was sent (kept, not filled in when read),
    # as an operator reads her conversation
    from tests.integration.test_consumer import rows

    [kept] = [i for i in rows(env["TABLE_NAME"], MAYA, "MSG#") if i["text"] == REMINDER]
    _, conversation = admin_call(admin, lambda_context, "GET", f"{person()}/conversation")
    [reminder] = [m for m in conversation["messages"] if m["text"] == REMINDER]
    assert reminder["at"] == kept["at"]
    assert before <= datetime.fromisoformat(reminder["at"]) <= datetime.now(UTC)


def test_a_reminders_tokens_count_on_the_stacks_day_and_on_hers(
    resources, consumer_env, openai, whasp, monkeypatch, lambda_context
):
    from tests.integration.test_budgets import reply_tokens, stack_tokens
    from tests.integration.test_consumer import state

    # given a stack that counts its day (a hard limit far off), and Maya's reminder
    agent, firing, env = follow_up_stack(
        resources, consumer_env, monkeypatch, STACK_DAILY_TOKENS_HARD_LIMIT="100000000"
    )
    at = tomorrow_at_nine()
    openai.responder = Model(at)
    say(agent, lambda_context, ASK)
    table = env["TABLE_NAME"]
    asking, answered = stack_tokens(table, day_of(datetime.now(UTC))), reply_tokens(table)
    # when its time comes
    run_due(agent, firing, lambda_context, env, at)
    assert whasp.texts_to(MAYA)[-1] == REMINDER
    # then the model's tokens for it are on the reminder, and on the stack's day at once
    written = reply_tokens(table)
    assert written > 0
    assert stack_tokens(table, day_of(datetime.now(UTC))) == asking + written
    # and on hers with her next message, beside the answer to her asking
    day = int(state(table)["day_tokens"])
    say(agent, lambda_context, "Thanks, called them!")
    assert int(state(table)["day_tokens"]) == day + answered + written


def test_with_nothing_pending_her_notes_end_with_the_time(stack, openai, lambda_context):
    agent, _firing, _env = stack
    openai.responder = Model(tomorrow_at_nine())
    # when Maya writes, with nothing of hers pending
    say(agent, lambda_context, "Hi! How far should I run today?")
    # then the model's notes name no follow-ups: the last line is the time for her
    [request] = openai.calls()
    assert notes_of(request).splitlines()[-1].startswith("It is ")


def test_a_delivery_that_finds_the_words_another_stored_sends_them(
    stack, openai, whasp, lambda_context, monkeypatch, caplog
):
    agent, firing, env, at, model = asked(stack, openai, lambda_context)
    store = agent.consumer.agent.store
    real = store.remember_follow_up

    def raced(pk: str, **kwargs: Any) -> bool:
        # between this delivery's read and its write, another delivery of the same firing
        # stored its words, then died before sending them
        monkeypatch.setattr(store, "remember_follow_up", real)
        assert real(pk, **kwargs)
        return real(pk, **kwargs)

    monkeypatch.setattr(store, "remember_follow_up", raced)
    caplog.clear()
    # when its time comes (and the dead delivery's record comes back after)
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at, times=2)
    # then this delivery sent the stored words, once; the one that came back, nothing more
    assert whasp.texts_to(MAYA).count(REMINDER) == 1
    assert decisions(caplog) == ["follow_up_sent", "follow_up_repeat"]
    assert due_items(env["TABLE_NAME"]) == [] and len(model.due_requests) == 1


def test_a_delivery_that_another_finished_meanwhile_sends_nothing_more(
    stack, openai, whasp, lambda_context, monkeypatch, caplog
):
    from memagent.turn.follow_ups import FollowUpDue

    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    [pending] = due_items(env["TABLE_NAME"])
    turn = agent.consumer.agent
    real = turn.store.remember_follow_up

    def raced(pk: str, **kwargs: Any) -> bool:
        # between this delivery's read and its write, another delivery of the same firing
        # ran through: stored, sent, done
        monkeypatch.setattr(turn.store, "remember_follow_up", real)
        turn.handle(FollowUpDue(name=str(pending["name"]), person=pk))
        return real(pk, **kwargs)

    monkeypatch.setattr(turn.store, "remember_follow_up", raced)
    caplog.clear()
    # when its time comes
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at)
    # then Maya has the reminder once: this delivery found it sent, a repeat
    assert whasp.texts_to(MAYA).count(REMINDER) == 1
    assert decisions(caplog) == ["follow_up_repeat"]
    assert due_items(env["TABLE_NAME"]) == []


def test_operators_hear_of_a_follow_up_due_while_they_have_the_chat_and_it_never_fires_later(
    resources, consumer_env, bus, openai, whasp, monkeypatch, lambda_context, caplog
):
    from tests.integration.test_operator import notifications

    agent, firing, env = follow_up_stack(
        resources, consumer_env, monkeypatch, OPERATOR_EVENT_BUS=bus["name"]
    )
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    [pending] = due_items(env["TABLE_NAME"])
    pk = str(pending["pk"])
    # given a human has had the chat since, with two of her messages waiting for them
    human_has_the_chat(env, pk, waiting=2)
    notifications(bus)
    caplog.clear()
    # when its time comes
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at)
    # then it is the operator's, and they are told a message waits, with the count, no text
    [told] = notifications(bus)
    assert told["detail-type"] == "Handoff message waiting"
    assert told["detail"] == {"agent": env["AGENT_ID"], "person": pk, "waiting": 2}
    assert decisions(caplog) == ["follow_up_for_human"] and model.due_requests == []
    # when the chat is handed back, and the firing is delivered once more (at least once)
    dynamodb_table(env["TABLE_NAME"]).update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="REMOVE handoff_since, handoff_agent, handoff_waiting",
    )
    caplog.clear()
    sent = list(whasp.sent)
    with caplog.at_level("INFO"):
        response = agent.handler(
            {"Records": [due_record(str(pending["name"]), pk)]}, lambda_context
        )
    # then it is not fired late: nothing written, nothing sent
    assert response["batchItemFailures"] == []
    assert decisions(caplog) == ["follow_up_gone"]
    assert model.due_requests == [] and whasp.sent == sent


@pytest.mark.parametrize(
    "limit",
    [{"CONTEXT_MAX_MESSAGES": "2"}, {"CONTEXT_MAX_CHARS": "100"}],
    ids=["messages", "chars"],
)
def test_at_its_time_the_model_sees_her_newest_turns_within_the_limits_and_todays_date(
    resources, consumer_env, openai, whasp, store, monkeypatch, lambda_context, limit
):
    from memagent.memory.clock import day

    agent, _firing, _env = follow_up_stack(resources, consumer_env, monkeypatch, **limit)
    model = Model(tomorrow_at_nine())
    openai.responder = model
    # given Maya's conversation two days ago, and a follow-up of hers due now
    said = [
        "I adopted a cat called Miso",
        "Lovely! What a name.",
        "My interview is on Friday at 10 and honestly I am rather nervous about it",
        "Good luck, you'll be great!",
    ]
    seed_turns(store, MAYA, said, start=datetime.now(UTC) - timedelta(days=2))
    pk = person_key(AGENT, MAYA)
    values = {"at": "x", "local": "2026-12-04T09:00", "zone": "Europe/London"}
    values.update(about="ask how the interview went", address=MAYA, number=BUSINESS)
    store.add_follow_up(pk, "fu-1", values)
    # when its time comes
    days = {day(datetime.now(UTC), "Europe/London")}
    response = agent.handler({"Records": [due_record("fu-1", pk)]}, lambda_context)
    days.add(day(datetime.now(UTC), "Europe/London"))
    assert response["batchItemFailures"] == []
    # then the model saw her newest turns, the older ones past the limit not, and was told
    # today's date (not the day she last wrote)
    [due] = model.due_requests
    seen = json.dumps(due["input"])
    assert "Good luck" in seen and "interview is on Friday" in seen and "Miso" not in seen
    [now] = [
        line
        for i in due["input"]
        if i.get("role") == "developer"
        for line in str(i["content"]).splitlines()
        if line.startswith("It is ")
    ]
    assert any(now.startswith(f"It is {today},") for today in days), now
    assert whasp.texts_to(MAYA) == [REMINDER]


class MalformedModel(Model):
    """Asked for a reminder, calls schedule_follow_up without saying what about."""

    def __call__(self, request: dict[str, Any]) -> Any:
        tail = json.dumps(request.get("input"))
        answered = any(i.get("type") == "function_call_output" for i in request["input"])
        if not answered and "Remind me" in tail:
            asked = {"when": self.at.strftime("%Y-%m-%dT%H:%M")}
            return {"output": [call("schedule_follow_up", asked, "c-bare")]}
        return "Sorry, I could not schedule that."


def test_a_follow_up_call_without_its_subject_is_refused_saying_what_to_give(
    stack, openai, lambda_context, caplog
):
    agent, firing, env = stack
    openai.responder = MalformedModel(tomorrow_at_nine())
    with caplog.at_level("INFO"):
        say(agent, lambda_context, ASK)
    told = [
        json.loads(i["output"])
        for i in openai.calls()[-1]["input"]
        if i.get("type") == "function_call_output"
    ]
    assert told == [{"error": "give 'when' and 'about'"}]
    assert [line["failed"] for line in logged(caplog, "tool called")] == [True]
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []


def test_stop_drops_each_of_her_follow_ups_and_counts_them_all(
    stack, openai, lambda_context, caplog
):
    agent, firing, env, _at, _model = asked(stack, openai, lambda_context)
    say(agent, lambda_context, ASK)
    assert len(due_items(env["TABLE_NAME"])) == 2
    # when Maya writes STOP: both go, and the log counts both
    with caplog.at_level("INFO"):
        say(agent, lambda_context, "STOP")
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []
    assert [line["count"] for line in logged(caplog, "follow-ups dropped")] == [2]


def test_each_pending_follow_up_is_one_line_of_the_models_notes(stack, openai, lambda_context):
    agent, _firing, _env, _at, _model = asked(stack, openai, lambda_context)
    say(agent, lambda_context, ASK)
    say(agent, lambda_context, "How far should I run today?")
    notes = "\n".join(
        str(i["content"]) for i in openai.calls()[-1]["input"] if i.get("role") == "developer"
    )
    line = r'^- id fu-[0-9a-f]+: \d{4}-\d\d-\d\dT09:00 \(Europe/London\), about "call the dentist"$'
    assert len(re.findall(line, notes, re.MULTILINE)) == 2
    heading = "## Follow-ups pending"
    assert re.search(f"^{heading}$", notes, re.MULTILINE)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"person": "P#x"}, "a follow-up without its name or person"),
        ({"name": 7, "person": "P#x"}, "a follow-up without its name or person"),
        ({"name": "fu-1"}, "a follow-up without its name or person"),
        ({"name": "fu-1", "person": MAYA}, "a follow-up without its name or person"),
        ({"name": "fu-1", "person": "P#x"}, "an internal event without the stack's signature"),
    ],
    ids=["no-name", "name-not-text", "no-person", "a-phone-not-a-key", "unsigned"],
)
def test_a_follow_up_event_the_stack_did_not_make_is_parked_saying_why(
    stack, resources, openai, whasp, lambda_context, body, reason
):
    from memagent.lifecycle.follow_ups import body as signed

    agent, _firing, _env = stack
    # given a firing the stack never makes: one field missing or not what it must be (signed
    # with the stack's own key all the same, but for the unsigned one)
    raw = {"memagent": "follow_up", **body}
    if reason != "an internal event without the stack's signature":
        raw["sig"] = signed(str(body.get("name")), str(body.get("person")))["sig"]
    record = sqs_message_record(
        {
            "MessageId": str(uuid.uuid4()),
            "ReceiptHandle": uuid.uuid4().hex,
            "Body": json.dumps(raw),
            "Attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": "g"},
        },
        "arn:aws:sqs:us-east-1:123456789012:EventQueue.fifo",
    )
    # when it comes: it is parked at once, with what was wrong, and nothing is sent
    assert agent.handler({"Records": [record]}, lambda_context) == {"batchItemFailures": []}
    assert [kept["reason"] for kept in parked(resources)] == [reason]
    assert whasp.sent == []


def test_a_stored_reminder_is_not_sent_after_an_erasure_that_stopped_half_way(
    stack, admin, openai, whasp, lambda_context, monkeypatch, caplog
):
    from memagent.aws import FollowUpSchedules
    from tests.integration.faults import Died, crash_after, crash_before
    from tests.integration.test_follow_ups import fired_records
    from tests.integration.test_operator import call as admin_call
    from tests.integration.test_operator import person

    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    # given the reminder's firing stored its words, then died before sending them
    crash_after(agent.consumer.agent.store, "remember_follow_up", monkeypatch)
    SQS_CLOCK.advance(at.timestamp() - SQS_CLOCK.now())
    firing.fire_due()
    records = fired_records(env["QUEUE_URL"])
    assert agent.handler({"Records": records}, lambda_context)["batchItemFailures"] != []
    # and an admin's erasure of Maya wrote its mark, then timed out before deleting anything
    crash_before(FollowUpSchedules, "cancel", monkeypatch, Died("timeout"))
    with pytest.raises(Died):
        admin_call(admin, lambda_context, "DELETE", person())
    sent = list(whasp.sent)
    caplog.clear()
    # when the firing comes back
    with caplog.at_level("INFO"):
        assert agent.handler({"Records": records}, lambda_context)["batchItemFailures"] == []
    # then nothing is sent from that memory (as the first delivery would not have written
    # from it): the follow-up is dropped, saying why
    assert whasp.sent == sent and due_items(env["TABLE_NAME"]) == []
    assert [line["reason"] for line in logged(caplog, "follow-up dropped")] == ["expired"]
    assert decisions(caplog) == ["follow_up_dropped_expired"]
