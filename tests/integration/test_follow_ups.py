"""Follow-ups through the consumer's handler (memagent.turn.follow_ups): Maya asks to be reminded
tomorrow at 9; the model schedules it with the built-in tool; at 9:00 on her clock (London),
moto's Scheduler fires (devstack.scheduler, on AWS's clock here) into her FIFO group; the
consumer runs it as a turn and the reminder arrives once, whatever is delivered twice."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import boto3
import pytest

from devstack.clock import SQS_CLOCK
from devstack.events import EVENT_QUEUE_ARN
from devstack.fake_openai import notes_of
from devstack.lambda_harness import sqs_message_record
from devstack.scheduler import SchedulerFiring
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, whasp_message
from tests.integration.test_meta import graph, graph_server  # noqa: F401 (fixtures)
from tests.integration.test_tools import call, outputs

ROLE = "arn:aws:iam::123456789012:role/whasp-agent-FollowUpSchedulerRole"


LONDON = ZoneInfo("Europe/London")
ASK = "Remind me tomorrow at 9 to call the dentist"
REMINDER = "Good morning Maya! Time to call the dentist."
SORRY = "Sorry, I could not do that just now. Please ask me again a bit later."


def conforms(answer: Any, schema: str) -> None:
    """The answer matches its schema in the admin API's OpenAPI document."""
    from openapi_schema_validator import OAS30Validator

    from tests.unit.test_admin_api_doc import document

    OAS30Validator(document()["components"]["schemas"][schema]).validate(answer)


def tomorrow_at_nine() -> datetime:
    local = datetime.fromtimestamp(SQS_CLOCK.now(), tz=UTC).astimezone(LONDON)
    return (local + timedelta(days=1)).replace(hour=9, minute=0, second=0, microsecond=0)


def follow_up_env(resources, group: str) -> dict[str, str]:
    """What the template sets for follow-ups: the group, the role, the dead-letter queue."""
    return {
        "FOLLOW_UP_SCHEDULE_GROUP": group,
        "FOLLOW_UP_ROLE_ARN": ROLE,
        "FOLLOW_UP_DEAD_LETTER_ARN": resources.queue_arns["FollowUpDeadLetterQueue"],
    }


def follow_up_stack(resources, consumer_env: dict[str, str], monkeypatch, **extra: str):
    """The consumer with follow-ups on (a schedule group of its own), and Scheduler's firing."""
    scheduler = boto3.client("scheduler")
    group = f"g-{uuid.uuid4().hex[:10]}"
    scheduler.create_schedule_group(Name=group)
    env = {**consumer_env, **follow_up_env(resources, group), **extra}
    agent = load_function("consumer", env, monkeypatch)
    return agent, SchedulerFiring(scheduler, boto3.client("sqs"), group), env


@pytest.fixture
def stack(resources, consumer_env, monkeypatch):
    return follow_up_stack(resources, consumer_env, monkeypatch, FOLLOW_UP_MAX_PENDING="2")


class Model:
    """Schedules what it is asked to (the built-in tool), then answers; at a follow-up's time,
    writes the reminder, or NOTHING when told to."""

    def __init__(self, at: datetime, *, due_answer: str = REMINDER):
        self.at, self.due_answer = at, due_answer
        self.due_requests: list[dict[str, Any]] = []

    def __call__(self, request: dict[str, Any]) -> Any:
        tail = json.dumps(request.get("input"))
        if "A follow-up you scheduled is due now" in tail:
            self.due_requests.append(request)
            return self.due_answer
        names = [t["name"] for t in request.get("tools") or []]
        answered = any(i.get("type") == "function_call_output" for i in request["input"])
        if "cancel_follow_up" in names and not answered and "cancel the reminder" in tail:
            [pending] = re.findall(r"id (fu-[0-9a-f]+)", tail)
            return {"output": [call("cancel_follow_up", {"id": pending}, "x1")]}
        if "schedule_follow_up" in names and not answered and "Remind me" in tail:
            when = self.at.strftime("%Y-%m-%dT%H:%M")
            asked = {"when": when, "about": "call the dentist"}
            return {"output": [call("schedule_follow_up", asked, f"c{uuid.uuid4().hex[:6]}")]}
        outputs = [
            str(i.get("output"))
            for i in request["input"]
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        ]
        if outputs and "could not be" in outputs[-1]:  # the tool refused: say so
            return SORRY
        return "Done: I'll remind you tomorrow at 9."


def say(agent, lambda_context, text: str, event_id: str | None = None) -> str:
    event_id = event_id or f"evt_{uuid.uuid4().hex}"
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event = whasp_message(text, chat=MAYA, created_at=stamp, event_id=event_id)
    event["data"]["message"]["timestamp"] = stamp
    from devstack.events import sqs_batch

    response = agent.handler(sqs_batch(event), lambda_context)
    assert response["batchItemFailures"] == []
    return event_id


def fired_records(queue_url: str) -> list[dict[str, Any]]:
    """What Scheduler put into the event queue, as Lambda's mapping would hand it over."""
    found = boto3.client("sqs").receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["All"]
    )
    return [sqs_message_record(m, EVENT_QUEUE_ARN) for m in found.get("Messages", [])]


def run_due(agent, firing, lambda_context, env, at: datetime, *, times: int = 1) -> None:
    """The clock reaches `at`; Scheduler fires (twice: at least once); the consumer gets the
    record `times` times (a redelivery after a lost delete)."""
    SQS_CLOCK.advance(at.timestamp() - SQS_CLOCK.now())
    firing.fire_due(repeat=2)
    records = fired_records(env["QUEUE_URL"])
    for _ in range(times if records else 0):
        response = agent.handler({"Records": records}, lambda_context)
        assert response["batchItemFailures"] == []


def nothing_sent_at(agent, firing, lambda_context, env, at: datetime, whasp) -> None:
    """When the follow-up's time comes, no message reaches the person."""
    before = list(whasp.sent)
    run_due(agent, firing, lambda_context, env, at)
    assert whasp.sent == before


def asked(stack, openai, lambda_context, **model: Any):
    """Maya asked for a reminder tomorrow at 9: (consumer, firing, env, the time, the model)."""
    agent, firing, env = stack
    at = tomorrow_at_nine()
    openai.responder = Model(at, **model)
    say(agent, lambda_context, ASK)
    return agent, firing, env, at, openai.responder


def due_items(table: str) -> list[dict[str, Any]]:
    rows = dynamodb_table(table).scan()["Items"]
    return [r for r in rows if str(r["sk"]).startswith("DUE#")]


def test_a_reminder_arrives_once_at_nine_on_her_clock(stack, openai, whasp, lambda_context):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    # given Maya asks for a reminder, and her message is delivered twice (a redelivery)
    event_id = say(agent, lambda_context, ASK)
    say(agent, lambda_context, ASK, event_id=event_id)
    # then she got one answer, and one schedule exists, for 9:00 in London
    assert whasp.texts_to(MAYA) == ["Done: I'll remind you tomorrow at 9."]
    [schedule] = firing.pending()
    assert schedule["ScheduleExpression"] == f"at({at.strftime('%Y-%m-%dT%H:%M:%S')})"
    assert schedule["ScheduleExpressionTimezone"] == "Europe/London"
    assert len(due_items(env["TABLE_NAME"])) == 1
    # when 8:59 comes, nothing; when 9:00 comes, Scheduler fires twice, the consumer runs twice
    SQS_CLOCK.advance((at - timedelta(minutes=1)).timestamp() - SQS_CLOCK.now())
    assert firing.fire_due() == 0
    run_due(agent, firing, lambda_context, env, at, times=2)
    # then the reminder arrived once, written by the model that saw her request, in the
    # operator's persona (their system prompt first, as on every turn)
    assert whasp.texts_to(MAYA) == ["Done: I'll remind you tomorrow at 9.", REMINDER]
    assert len(model.due_requests) == 1
    assert "call the dentist" in json.dumps(model.due_requests[0]["input"])
    assert notes_of(model.due_requests[0]).startswith(env["SYSTEM_PROMPT"])
    # under her own prompt cache key, as her turns are
    assert model.due_requests[0]["prompt_cache_key"] == openai.calls()[0]["prompt_cache_key"]
    # and told the time on her clock, in the zone she asked in
    [now] = [line for line in notes_of(model.due_requests[0]).splitlines() if "It is" in line]
    assert now.endswith("(Europe/London) for the person.")
    # and nothing is left pending; the next turn's memory holds the reminder as the agent's
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []
    say(agent, lambda_context, "Thanks, called them!")
    last = openai.calls()[-1]
    assert REMINDER in json.dumps(last["input"])


def test_at_its_time_the_model_sees_the_facts_about_its_subject(
    resources, consumer_env, openai, whasp, monkeypatch, lambda_context
):
    from memagent.memory import fact_key
    from memagent.memory.person import person_key
    from memagent.store.operator import OperatorStore

    # given a stack that puts one fact in front of the model, and Maya's two facts: her dentist
    # (older) and her running (newer)
    agent, firing, env = follow_up_stack(
        resources, consumer_env, monkeypatch, CONTEXT_MAX_FACTS="1"
    )
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    store, pk = OperatorStore(env["TABLE_NAME"]), person_key(AGENT, MAYA)
    now = datetime.now(UTC)
    for seconds, fact in enumerate(["Her dentist is Dr Patel in Leeds", "She runs on Tuesdays"]):
        assert store.add_fact(pk, fact_key(fact), fact, now + timedelta(seconds=seconds))
    # when the follow-up's time comes: the fact picked is the one about what it is about
    run_due(agent, firing, lambda_context, env, at)
    [due] = model.due_requests
    assert "Dr Patel" in notes_of(due) and "Tuesdays" not in notes_of(due)


def test_stop_cancels_and_nothing_is_sent_at_the_time(stack, openai, whasp, lambda_context):
    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    assert len(firing.pending()) == 1
    # when Maya writes STOP
    say(agent, lambda_context, "STOP")
    # then her follow-up and its schedule are gone, and at 9:00 nothing is sent
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []
    nothing_sent_at(agent, firing, lambda_context, env, at, whasp)


def test_a_follow_up_whose_schedule_outlived_stop_still_sends_nothing(
    stack, openai, whasp, lambda_context, caplog
):
    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    [schedule] = firing.pending()
    # given the schedule's delete was lost (it fires anyway), after STOP with the follow-up gone
    dynamodb_table(env["TABLE_NAME"]).update_item(
        Key={"pk": due_items(env["TABLE_NAME"])[0]["pk"], "sk": "STATE"},
        UpdateExpression="SET opted_out = :t",
        ExpressionAttributeValues={":t": True},
    )
    before = list(whasp.sent)
    # when its time comes: then the fire-time check sends nothing, and drops it, saying why
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at)
    assert whasp.sent == before and due_items(env["TABLE_NAME"]) == []
    assert [line["reason"] for line in logged(caplog, "follow-up dropped")] == ["opted_out"]
    assert schedule["Name"] not in [s["Name"] for s in firing.pending()]


@pytest.mark.parametrize("nothing", ["NOTHING", "Nothing."])
def test_the_model_may_find_nothing_to_say(stack, openai, whasp, lambda_context, caplog, nothing):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    openai.responder = Model(at, due_answer=nothing)
    say(agent, lambda_context, ASK)
    before = list(whasp.sent)
    caplog.clear()
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at)
    assert whasp.sent == before and due_items(env["TABLE_NAME"]) == []
    handled = [line["decision"] for line in logged(caplog, "event handled")]
    assert handled == ["follow_up_skipped"]


def human_has_the_chat(env: dict[str, str], pk: str, *, waiting: int) -> None:
    """A human has taken the person's chat over, with `waiting` of her messages for them."""
    dynamodb_table(env["TABLE_NAME"]).update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET handoff_since = :now, handoff_agent = :a, handoff_waiting = :w",
        ExpressionAttributeValues={
            ":now": datetime.now(UTC).isoformat(),
            ":a": env["AGENT_ID"],
            ":w": waiting,
        },
    )


def test_a_chat_a_human_has_gets_no_model_message(stack, openai, whasp, lambda_context):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    # given a human took the chat over since
    human_has_the_chat(env, due_items(env["TABLE_NAME"])[0]["pk"], waiting=0)
    before = list(whasp.sent)
    run_due(agent, firing, lambda_context, env, at)
    # then no model call for it and nothing sent: it is the operator's, marked for them
    assert model.due_requests == [] and whasp.sent == before
    [held] = due_items(env["TABLE_NAME"])
    assert held["status"] == "for_human"


def test_the_limit_per_person_holds(stack, openai, whasp, lambda_context):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    openai.responder = Model(at)
    # when Maya asks three times (the limit is 2)
    for _ in range(3):
        say(agent, lambda_context, ASK)
    # then two are pending, and the third call was refused (the model was told why)
    assert len(due_items(env["TABLE_NAME"])) == 2 and len(firing.pending()) == 2
    refused = [
        o
        for r in openai.calls()
        for i in r.get("input") or []
        if isinstance(i, dict) and i.get("type") == "function_call_output"
        for o in [i["output"]]
        if "pending already" in o
    ]
    assert len(refused) == 1


# ------------------------------------------------------------------ seen and undone by operators


@pytest.fixture
def admin(stack, resources, whasp, monkeypatch):
    _agent, _firing, env = stack
    return load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": env["AGENT_ID"],
            "PROVIDER": "whasp",
            "WHASP_API_URL": whasp.url,
            "WHASP_API_KEY": "whasp-test-key",
            **follow_up_env(resources, env["FOLLOW_UP_SCHEDULE_GROUP"]),
            "FOLLOW_UP_QUEUE_URL": env["QUEUE_URL"],
            "LEDGER_TTL_DAYS": "3650",
        },
        monkeypatch,
    )


def test_an_operator_lists_and_cancels_a_follow_up(stack, admin, openai, whasp, lambda_context):
    from tests.integration.test_operator import call as admin_call
    from tests.integration.test_operator import person

    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    # when an operator lists Maya's follow-ups
    status, listed = admin_call(admin, lambda_context, "GET", f"{person()}/follow-ups")
    # then they see when and what, on her clock, and not where it goes (as docs/admin-api.yaml says)
    assert status == 200
    conforms(listed, "FollowUps")
    conforms(
        admin_call(admin, lambda_context, "GET", f"{person()}/conversation")[1], "Conversation"
    )
    [pending] = listed["follow_ups"]
    assert pending["about"] == "call the dentist" and pending["zone"] == "Europe/London"
    assert pending["local"] == at.strftime("%Y-%m-%dT%H:%M") and "address" not in pending
    # and the export lists it too
    status, exported = admin_call(admin, lambda_context, "GET", person())
    assert status == 200 and [f["id"] for f in exported["follow_ups"]] == [pending["id"]]
    # when they cancel it: its schedule is deleted, and at 9:00 nothing is sent
    path = f"{person()}/follow-ups/{pending['id']}"
    assert admin_call(admin, lambda_context, "DELETE", path)[0] == 200
    assert firing.pending() == [] and due_items(env["TABLE_NAME"]) == []
    assert admin_call(admin, lambda_context, "DELETE", path)[0] == 404  # gone already
    nothing_sent_at(agent, firing, lambda_context, env, at, whasp)


def test_the_model_sees_pending_follow_ups_and_cancels_one_when_asked(
    stack, openai, whasp, lambda_context
):
    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    # when Maya writes "cancel the reminder": the model's notes list it, with its id
    say(agent, lambda_context, "Oh, cancel the reminder please, I called already")
    notes = json.dumps(openai.calls()[-2]["input"])
    assert "Follow-ups pending" in notes and "call the dentist" in notes
    # then it is gone, schedule and all, and at 9:00 nothing is sent
    assert firing.pending() == [] and due_items(env["TABLE_NAME"]) == []
    nothing_sent_at(agent, firing, lambda_context, env, at, whasp)


class CancellingModel(Model):
    """Asked to cancel: calls cancel_follow_up without an id, then with one that is not
    pending, then with the pending one, then answers."""

    def __call__(self, request: dict[str, Any]) -> Any:
        tail = json.dumps(request.get("input"))
        if "cancel the reminder" not in tail or "A follow-up you scheduled" in tail:
            return super().__call__(request)
        made = [i for i in request["input"] if i.get("type") == "function_call_output"]
        pending = re.findall(r"id (fu-[0-9a-f]+)", tail)
        tries = [{}, {"id": "fu-0000"}, {"id": pending[0]}] if pending else []
        if len(made) < len(tries):
            return {"output": [call("cancel_follow_up", tries[len(made)], f"x{len(made)}")]}
        return "Cancelled."


def test_the_model_is_told_what_each_cancel_did_and_the_next_turn_remembers_it(
    stack, openai, whasp, lambda_context, caplog
):
    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    openai.responder = CancellingModel(at)
    caplog.clear()
    # when Maya asks to cancel, and the model's first two calls name no follow-up pending
    with caplog.at_level("INFO"):
        say(agent, lambda_context, "Oh, cancel the reminder please, I called already")
    # then it is told why each was refused, and that the third cancelled it
    told = [json.loads(o) for o in outputs(openai.calls()[-1])]
    assert told == [
        {"error": "give the follow-up's 'id'"},
        {"error": "no such follow-up pending"},
        {"output": "cancelled"},
    ]
    # and the two refused calls are counted and logged as failed, the cancel not
    assert [line["failed"] for line in logged(caplog, "tool called")] == [True, True, False]
    assert firing.pending() == [] and due_items(env["TABLE_NAME"]) == []
    # and her next turn's model sees, in the agent's words, that it was cancelled
    say(agent, lambda_context, "Thanks!")
    assert "cancel_follow_up: follow-up cancelled" in json.dumps(openai.calls()[-1]["input"])


# ------------------------------------------------------------------ Meta's 24-hour window


@pytest.fixture
def meta_consumer(meta_consumer_with):
    return meta_consumer_with()


@pytest.fixture
def meta_consumer_with(resources, openai, graph, monkeypatch):
    def make(**extra: str):
        return _meta_consumer(resources, openai, graph, monkeypatch, **extra)

    return make


def _meta_consumer(resources, openai, graph, monkeypatch, **extra: str):
    from tests.integration.test_meta import ACCESS_TOKEN

    scheduler = boto3.client("scheduler")
    group = f"g-{uuid.uuid4().hex[:10]}"
    scheduler.create_schedule_group(Name=group)
    env = {
        "PROVIDER": "meta",
        "TABLE_NAME": resources.table_name,
        "AGENT_ID": AGENT,
        "META_GRAPH_URL": graph.url,
        "META_ACCESS_TOKEN": ACCESS_TOKEN,
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_MODEL": "gpt-6-luna",
        "OPENAI_BASE_URL": f"{openai.url}/v1",
        "PARKING_QUEUE_URL": resources.queue_urls["EventDeadLetterQueue"],
        "QUEUE_URL": resources.queue_urls["EventQueue"],
        **follow_up_env(resources, group),
        "LEDGER_TTL_DAYS": "3650",
        **extra,
    }
    return load_function("consumer", env, monkeypatch), env


def due_record(name: str, person: str) -> dict[str, Any]:
    """A follow-up's firing, as the stack's schedule puts it on the queue (signed)."""
    from memagent.lifecycle.follow_ups import body as signed

    body = json.dumps(signed(name, person))
    received = {
        "MessageId": str(uuid.uuid4()),
        "ReceiptHandle": uuid.uuid4().hex,
        "Body": body,
        "Attributes": {"ApproximateReceiveCount": "1", "MessageGroupId": person},
    }
    return sqs_message_record(received, EVENT_QUEUE_ARN)


@pytest.mark.parametrize(("hours_since", "sent"), [(2, 1), (26, 0)])
def test_on_meta_a_follow_up_goes_only_inside_the_24_hour_window(
    meta_consumer, graph, openai, store, lambda_context, caplog, hours_since, sent
):
    from devstack.events import META_NUMBER_ID
    from memagent.memory.person import person_key
    from tests.conftest import seed_turns

    agent, _env = meta_consumer
    openai.responder = Model(tomorrow_at_nine())
    # given Maya last wrote `hours_since` hours ago, and a follow-up of hers is due
    start = datetime.now(UTC) - timedelta(hours=hours_since, minutes=5)
    seed_turns(store, MAYA, [ASK, "Done: I'll remind you."], start=start)
    pk = person_key(AGENT, MAYA)
    values = {"at": "x", "local": "2026-12-04T09:00", "zone": "Europe/London"}
    values.update(about="call the dentist", address=MAYA, number=META_NUMBER_ID, created_at="x")
    store.add_follow_up(pk, "fu-1", values)
    # when its time comes
    with caplog.at_level("INFO"):
        response = agent.handler({"Records": [due_record("fu-1", pk)]}, lambda_context)
    # then inside the window the reminder goes as text; outside, nothing (no 131047), dropped
    # saying why
    assert response["batchItemFailures"] == []
    assert len(graph.texts_to(MAYA)) == sent
    assert store.follow_up(pk, "fu-1") is None
    reasons = [line["reason"] for line in logged(caplog, "follow-up dropped")]
    assert reasons == ([] if sent else ["window_closed"])


# ------------------------------------------------------------------ a crash at each step


@pytest.mark.parametrize(
    "step",
    [
        "schedule created",  # the asking turn dies after Scheduler took the schedule
        "model answered",  # the firing turn dies after the model wrote the reminder
        "stored",  # ... after the reminder and its ledger entry were stored
        "sent",  # ... after whasp accepted it, before we recorded that
        "recorded",  # ... after the send was recorded, before the follow-up was dropped
        "done",  # ... after everything, before the record was deleted
    ],
)
def test_a_crash_at_each_step_still_ends_with_one_reminder(
    stack, openai, whasp, lambda_context, monkeypatch, step
):
    from devstack.events import sqs_batch
    from memagent.aws import FollowUpSchedules
    from tests.integration.faults import Crash, crash_after, crash_before

    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    turn = agent.consumer.agent
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    asking = whasp_message(ASK, chat=MAYA, created_at=stamp, event_id=f"evt_{uuid.uuid4().hex}")
    asking["data"]["message"]["timestamp"] = stamp
    if step == "schedule created":
        crash_after(FollowUpSchedules, "create", monkeypatch)
    # Maya asks; a failed record comes back (the queue redelivers it) until it is handled
    for _ in range(3):
        if not agent.handler(sqs_batch(asking), lambda_context)["batchItemFailures"]:
            break
    assert len(firing.pending()) == 1 and len(due_items(env["TABLE_NAME"])) == 1
    crashes = {
        "model answered": (turn.model, "reply"),
        "stored": (turn.store, "remember_follow_up"),
        "sent": (turn.provider, "send_text"),
        "done": (turn.store, "drop_follow_up"),
    }
    if step in crashes:
        crash_after(*crashes[step], monkeypatch)
    if step == "recorded":
        crash_before(turn.store, "drop_follow_up", monkeypatch, Crash("drop"))
    # when 9:00 comes and the firing record fails once, then is redelivered
    SQS_CLOCK.advance(at.timestamp() - SQS_CLOCK.now())
    firing.fire_due()
    records = fired_records(env["QUEUE_URL"])
    for _ in range(3):
        if not agent.handler({"Records": records}, lambda_context)["batchItemFailures"]:
            break
    # then she got the reminder exactly once, and nothing is left pending
    assert whasp.texts_to(MAYA).count(REMINDER) == 1
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []


def test_a_memory_whose_retention_ended_is_never_followed_up(
    stack, openai, whasp, lambda_context, caplog
):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    # given her retention ended before the follow-up's time, and DynamoDB's TTL has not run yet
    table = dynamodb_table(env["TABLE_NAME"])
    pk = due_items(env["TABLE_NAME"])[0]["pk"]
    expired = int((datetime.now(UTC) - timedelta(hours=1)).timestamp())
    table.update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET expires_at = :e",
        ExpressionAttributeValues={":e": expired},
    )
    before = list(whasp.sent)
    # when its time comes: nothing is said from that memory, and the follow-up is dropped,
    # with its reason recorded
    with caplog.at_level("INFO"):
        run_due(agent, firing, lambda_context, env, at)
    assert whasp.sent == before and model.due_requests == []
    assert due_items(env["TABLE_NAME"]) == []
    assert [line["reason"] for line in logged(caplog, "follow-up dropped")] == ["expired"]


def test_forget_me_takes_her_follow_ups_and_nothing_is_sent_after(
    stack, openai, whasp, lambda_context
):
    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    assert len(due_items(env["TABLE_NAME"])) == 1
    # when Maya writes "forget me", then "yes"
    say(agent, lambda_context, "forget me")
    say(agent, lambda_context, "yes")
    # then her follow-up went with her memory, its schedule with it, and at 9:00 nothing is sent
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []
    before = list(whasp.sent)
    run_due(agent, firing, lambda_context, env, at)
    assert whasp.sent == before and model.due_requests == []


def test_after_number_replaced_the_reminder_goes_from_the_new_number(
    stack, openai, whasp, lambda_context
):
    from devstack.events import BUSINESS, sqs_batch

    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    # given whasp replaces the business number she wrote to, before the follow-up's time
    new_number = "+14155550199"
    replaced = {
        "id": f"evt_{uuid.uuid4().hex}",
        "type": "number.replaced",
        "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "data": {"old_number": BUSINESS, "new_number": new_number, "label": "Coach"},
    }
    assert agent.handler(sqs_batch(replaced), lambda_context)["batchItemFailures"] == []
    # when its time comes: the reminder goes out once, from the number that replaced the old one
    run_due(agent, firing, lambda_context, env, at)
    [reminder] = [s for s in whasp.sent if s["text"] == REMINDER]
    assert reminder["from"] == new_number


def test_a_sent_reminder_counts_toward_her_days_budget(
    resources, consumer_env, openai, whasp, monkeypatch, lambda_context
):
    # given a stack that gives a person two model turns a day
    agent, firing, env = follow_up_stack(
        resources, consumer_env, monkeypatch, PERSON_DAILY_TURNS="2"
    )
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    # when Maya asks (one turn), the reminder comes (a second), and she writes again
    say(agent, lambda_context, ASK)
    run_due(agent, firing, lambda_context, env, at)
    assert whasp.texts_to(MAYA)[-1] == REMINDER
    calls = len(openai.calls())
    say(agent, lambda_context, "Thanks! And what else should I do today?")
    # then her day's two turns are spent: no model call, the budget's notice instead
    assert len(openai.calls()) == calls
    assert "taking a break until tomorrow" in whasp.texts_to(MAYA)[-1]


def test_a_follow_up_due_when_her_days_turns_are_spent_is_dropped_unsent(
    resources, consumer_env, openai, whasp, monkeypatch, lambda_context, caplog
):
    # given a stack that gives a person one model turn a day, and Maya spent it asking (her
    # next message gets the budget's notice)
    agent, firing, env = follow_up_stack(
        resources, consumer_env, monkeypatch, PERSON_DAILY_TURNS="1"
    )
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, ASK)
    say(agent, lambda_context, "Thanks!")
    assert "taking a break until tomorrow" in whasp.texts_to(MAYA)[-1]
    # when the follow-up's time comes within that day: no model call, nothing sent, dropped
    # with its reason
    with caplog.at_level("INFO"):
        nothing_sent_at(agent, firing, lambda_context, env, at, whasp)
    assert model.due_requests == [] and due_items(env["TABLE_NAME"]) == []
    assert [line["reason"] for line in logged(caplog, "follow-up dropped")] == ["over_budget"]


@pytest.mark.parametrize(("approved", "crash"), [(True, False), (False, False), (True, True)])
def test_on_meta_outside_the_window_a_follow_up_goes_as_the_approved_template(
    meta_consumer_with, graph, openai, store, lambda_context, monkeypatch, approved, crash
):
    from devstack.events import META_NUMBER_ID
    from memagent.memory.person import person_key
    from tests.conftest import seed_turns

    # given a template for follow-ups (approved at Meta, or not), and Maya silent for 26 hours
    agent, _env = meta_consumer_with(
        FOLLOW_UP_TEMPLATE="reminder", FOLLOW_UP_TEMPLATE_LANGUAGE="en_GB"
    )
    if approved:
        graph.templates["reminder"] = {"languages": {"en_GB"}, "parameters": 1}
    openai.responder = Model(tomorrow_at_nine())
    start = datetime.now(UTC) - timedelta(hours=26)
    seed_turns(store, MAYA, [ASK, "Done: I'll remind you."], start=start)
    pk = person_key(AGENT, MAYA)
    values = {"at": "x", "local": "2026-12-04T09:00", "zone": "Europe/London"}
    values.update(about="call the dentist", address=MAYA, number=META_NUMBER_ID, created_at="x")
    store.add_follow_up(pk, "fu-2", values)
    if crash:  # the first attempt dies once the message is stored, before it is sent
        from tests.integration.faults import crash_after

        crash_after(agent.consumer.agent.store, "remember_follow_up", monkeypatch)
    # when its time comes (and the record is delivered twice)
    for attempt in range(2):
        response = agent.handler({"Records": [due_record("fu-2", pk)]}, lambda_context)
        assert bool(response["batchItemFailures"]) == (crash and attempt == 0)
    # then it went once, as the template with the model's message (a repeat of a stored one
    # too); or, refused (132001), not at all: never as free text, and not in her memory as said
    sent = graph.texts_to(MAYA)
    if approved:
        assert sent == [f"[template reminder] {REMINDER}"]
    else:
        assert sent == []
        assert REMINDER not in json.dumps(store.load(pk).turns, default=str)
    assert store.follow_up(pk, "fu-2") is None


def test_an_operator_schedules_a_follow_up_the_agent_writes_at_its_time(
    stack, admin, openai, whasp, lambda_context
):
    from tests.integration.test_operator import call as admin_call
    from tests.integration.test_operator import person

    agent, firing, env = stack
    at = tomorrow_at_nine()
    model = Model(at)
    openai.responder = model
    say(agent, lambda_context, "Hi! I move house on Saturday")
    path, body = f"{person()}/follow-ups", {"when": at.strftime("%Y-%m-%dT%H:%M")}
    body["about"] = "ask how the move to Málaga went"
    # an operator's request needs an Idempotency-Key; with one, a retry schedules nothing new
    assert admin_call(admin, lambda_context, "POST", path, body)[0] == 400
    for _ in range(2):
        status, answer = admin_call(
            admin, lambda_context, "POST", path, body, **{"Idempotency-Key": "k1"}
        )
        assert status == 200, answer
    assert len(firing.pending()) == 1 and len(due_items(env["TABLE_NAME"])) == 1
    # when its time comes: the agent writes it, once, having seen what it is about
    run_due(agent, firing, lambda_context, env, at)
    assert whasp.texts_to(MAYA).count(REMINDER) == 1
    # (its words as written: the model reads "Málaga", not an escape)
    assert "ask how the move to Málaga went" in notes_of(model.due_requests[0])
    # and once she opted out, an operator can schedule none
    say(agent, lambda_context, "STOP")
    status, answer = admin_call(
        admin, lambda_context, "POST", path, body, **{"Idempotency-Key": "k2"}
    )
    assert status == 400 and "opted out" in answer["error"]


# ------------------------------------------------------------------ when Scheduler refuses

# What Scheduler answers (HTTP status, message): a role it cannot assume (its trust policy names
# another source: "Confused deputy prevention"), a grant the caller lacks, a rate exceeded
REFUSALS = {
    "ValidationException": (
        400,
        "The execution role you provide must allow AWS EventBridge Scheduler to assume the role.",
    ),
    "AccessDeniedException": (
        400,
        "User: arn:aws:sts::123456789012:assumed-role/ConsumerRole/f is not authorized to "
        "perform: scheduler:CreateSchedule",
    ),
    "ThrottlingException": (429, "Rate exceeded"),
}


def scheduler_refuses(monkeypatch, operation: str, code: str) -> list[str]:
    """moto's Scheduler answers `operation` (create_schedule, delete_schedule) with `code`, over
    HTTP as Scheduler would; returns the refusals made (botocore retries throttling)."""
    from moto.core.exceptions import JsonRESTError
    from moto.scheduler.models import EventBridgeSchedulerBackend

    status, message = REFUSALS[code]
    refused: list[str] = []

    def refuse(self, *args, **kwargs):
        refused.append(code)
        error = JsonRESTError(code, message)
        error.code = status
        raise error

    monkeypatch.setattr(EventBridgeSchedulerBackend, operation, refuse)
    return refused


def emitted(out: str, metric: str) -> bool:
    """Whether Powertools flushed the metric `metric` (EMF, on stdout)."""
    blobs = [json.loads(line) for line in out.splitlines() if line.startswith('{"_aws"')]
    return any(metric in blob for blob in blobs)


def logged(caplog, message: str) -> list[dict[str, Any]]:
    """The log records of `message`, with their extra keys."""
    return [vars(r) for r in caplog.records if r.getMessage() == message]


@pytest.mark.parametrize("code", list(REFUSALS))
def test_when_scheduler_refuses_maya_hears_it_could_not_be_scheduled_and_nothing_is_kept(
    stack, openai, whasp, lambda_context, monkeypatch, capsys, caplog, aws_retry_pauses, code
):
    # given Scheduler refuses to create schedules
    agent, firing, env = stack
    openai.responder = Model(tomorrow_at_nine())
    capsys.readouterr()
    # when Maya asks for a reminder: the record is handled, not failed (`say` checks)
    with monkeypatch.context() as refusing, caplog.at_level("INFO"):
        refused = scheduler_refuses(refusing, "create_schedule", code)
        say(agent, lambda_context, ASK)
    # then the model was told it could not be scheduled, and she hears so
    [told] = [
        i["output"]
        for r in openai.calls()
        for i in r["input"]
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert "could not be scheduled" in told and "nothing is scheduled" in told
    assert whasp.texts_to(MAYA) == [SORRY]
    # and nothing is kept: no follow-up listed or counted toward her limit, no schedule
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []
    # and it was counted and logged with ids only (a throttle after botocore's retries)
    assert len(refused) == (1 if code != "ThrottlingException" else len(aws_retry_pauses) + 1)
    assert emitted(capsys.readouterr().out, "FollowUpSchedulerErrors")
    [line] = logged(caplog, "Scheduler refused: nothing scheduled or cancelled")
    assert (line["operation"], line["code"]) == ("CreateSchedule", code)
    assert line["schedule"].startswith("fu-")
    everything = json.dumps([vars(r) for r in caplog.records], default=str)
    for private in (MAYA, MAYA.lstrip("+"), "dentist"):
        assert private not in everything
    # when Scheduler takes schedules again and she asks again, it is scheduled
    say(agent, lambda_context, ASK)
    assert len(due_items(env["TABLE_NAME"])) == 1 and len(firing.pending()) == 1


def test_a_cancel_scheduler_refuses_is_told_and_the_reminder_stays_pending(
    stack, openai, whasp, lambda_context, monkeypatch
):
    # given Maya's reminder, and Scheduler refusing to delete schedules
    agent, firing, env, _at, _model = asked(stack, openai, lambda_context)
    scheduler_refuses(monkeypatch, "delete_schedule", "AccessDeniedException")
    # when she asks to cancel it
    say(agent, lambda_context, "Oh, cancel the reminder please, I called already")
    # then she hears it could not be cancelled, and it is still pending, schedule and all
    assert whasp.texts_to(MAYA)[-1] == SORRY
    assert len(due_items(env["TABLE_NAME"])) == 1 and len(firing.pending()) == 1


def test_stop_cancels_her_follow_ups_even_when_scheduler_will_not_delete_the_schedule(
    stack, openai, whasp, lambda_context, monkeypatch, aws_retry_pauses
):
    # given Maya's reminder, and Scheduler throttling every deletion
    agent, firing, env, at, _model = asked(stack, openai, lambda_context)
    with monkeypatch.context() as refusing:
        scheduler_refuses(refusing, "delete_schedule", "ThrottlingException")
        # when she writes STOP: the turn is not failed by it (`say` checks)
        say(agent, lambda_context, "STOP")
    # then her follow-up is dropped though its schedule is left
    assert due_items(env["TABLE_NAME"]) == [] and len(firing.pending()) == 1
    # and when the left schedule fires at 9, it finds nothing pending: nothing is sent
    nothing_sent_at(agent, firing, lambda_context, env, at, whasp)


def test_an_operators_follow_up_scheduler_refuses_is_a_503_with_an_audit_line(
    stack, admin, openai, whasp, lambda_context, monkeypatch, caplog
):
    from tests.integration.test_operator import audit_lines, person
    from tests.integration.test_operator import call as admin_call

    # given Maya wrote (so she is known), and Scheduler cannot assume the schedules' role
    agent, firing, env = stack
    openai.responder = Model(tomorrow_at_nine())
    say(agent, lambda_context, "Hi there")
    scheduler_refuses(monkeypatch, "create_schedule", "ValidationException")
    when = tomorrow_at_nine().strftime("%Y-%m-%dT%H:%M")
    caplog.clear()
    # when an operator schedules a follow-up for her
    with caplog.at_level("INFO"):
        status, answer = admin_call(
            admin,
            lambda_context,
            "POST",
            f"{person()}/follow-ups",
            {"when": when, "about": "ask how the new job is going"},
            **{"idempotency-key": "op-1"},
        )
    # then it is a 503 saying nothing was scheduled, audited as failed with the code
    assert status == 503 and "nothing was scheduled" in answer["error"]
    [line] = audit_lines(caplog)
    assert (line["audit"], line["outcome"], line["reason"]) == (
        "follow_up_add",
        "failed",
        "ValidationException",
    )
    # and nothing is kept for her
    assert due_items(env["TABLE_NAME"]) == [] and firing.pending() == []


def test_an_operators_cancel_scheduler_refuses_is_a_503_and_the_follow_up_stays(
    stack, admin, openai, whasp, lambda_context, monkeypatch, caplog
):
    from tests.integration.test_operator import audit_lines, person
    from tests.integration.test_operator import call as admin_call

    # given Maya's reminder, and Scheduler refusing to delete schedules
    _agent, firing, env, _at, _model = asked(stack, openai, lambda_context)
    [pending] = due_items(env["TABLE_NAME"])
    scheduler_refuses(monkeypatch, "delete_schedule", "AccessDeniedException")
    caplog.clear()
    # when an operator cancels it
    with caplog.at_level("INFO"):
        path = f"{person()}/follow-ups/{pending['name']}"
        status, answer = admin_call(admin, lambda_context, "DELETE", path)
    # then it is a 503, audited as failed, and the follow-up is still pending, schedule and all
    assert status == 503 and "AccessDeniedException" in answer["error"]
    [line] = audit_lines(caplog)
    assert (line["audit"], line["outcome"], line["reason"]) == (
        "follow_up_cancel",
        "failed",
        "AccessDeniedException",
    )
    assert len(due_items(env["TABLE_NAME"])) == 1 and len(firing.pending()) == 1


def test_whasp_refuses_a_template_and_sends_nothing(whasp_server):
    # given whasp's client: whasp has no templates, nor a window a template would cross
    from memagent.errors import SendRejected
    from memagent.providers import TemplateMessage
    from memagent.providers.whasp import WhaspClient

    client = WhaspClient(whasp_server.url, "whasp-test-key")
    before = len(whasp_server.requests)  # the server is the worker's: other tests' are there
    # when it is asked for an approved template all the same
    with pytest.raises(SendRejected):
        client.send_template(
            sender="+15550001111",
            to=MAYA,
            template=TemplateMessage("reminder", "en_GB", ("Hi",)),
            key="k",
        )
    # then it refused for good (SendRejected: never retried) and nothing reached whasp
    assert len(whasp_server.requests) == before
