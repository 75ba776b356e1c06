"""Figure 14: outcomes over scripted conversations (issue 42, item 4). Twenty people write over a
week through the consumer handler (the offline model), in five scripts whose outcomes are known
in advance: one day's chat, two chats days apart, a return the next morning (within 24 hours),
an explicit request for a human, a request for the team in other words (the model's built-in
request_human). Then the admin API's `GET /outcomes` (the admin handler) sums the days: what it
reports must be what the scripts make, the turns' DynamoDB requests and write units
(DynamoMeter), outcome writes included, are reported beside the tokens per conversation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import harness

from devstack.apigw import http_api_event
from devstack.fake_openai import offline_model

OPERATOR = "arn:aws:iam::123456789012:user/bench-operator"
# (name, [(days after the week's start, hour UTC, text)], conversations, returned, handed off)
SCRIPTS = [
    ("one day's chat", [(0, 9, "Ran 5 km this morning"), (0, 10, "Thanks!")], 1, 0, 0),
    ("two chats, days apart", [(0, 9, "Ran 5 km"), (3, 9, "Ran 8 km today")], 2, 0, 0),
    ("back the next morning", [(1, 20, "My knee hurts"), (2, 8, "Still hurts")], 2, 1, 0),
    ("asks for a human", [(2, 9, "talk to a human")], 1, 0, 1),
    ("asks for the team", [(3, 9, "Can someone from the clinic call me back?")], 1, 0, 1),
]
PEOPLE_PER_SCRIPT = 4


def _ask(admin: Any, first: str, last: str) -> dict[str, Any]:
    event = http_api_event(
        method="GET",
        path="/outcomes",
        headers={},
        body=b"",
        query=f"from={first}&to={last}",
        caller=OPERATOR,
    )
    response = admin.handler(event, harness.LambdaContext())
    assert response["statusCode"] == 200, response
    return json.loads(response["body"])


def run(stack: harness.Stack, people_per_script: int = PEOPLE_PER_SCRIPT) -> dict[str, Any]:
    resources = stack.resources("out")
    env = stack.consumer_env(resources)
    stack.openai.responder = offline_model
    stack.openai.reset()
    stack.whasp.reset()
    consumer = harness.load_function("consumer", env)
    admin = harness.load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": harness.AGENT,
            "PROVIDER": "whasp",
            "WHASP_API_URL": stack.whasp.url,
            "WHASP_API_KEY": "whasp-key",
        },
    )
    start = (datetime.now(UTC) - timedelta(days=5)).replace(hour=0, minute=0, second=0)
    start = start.replace(microsecond=0)
    meter = harness.DynamoMeter()
    meter.attach(consumer.consumer.agent.store._client)
    expected = {"conversations": 0, "returned": 0, "handed_off": 0}
    counts = {"requests": 0.0, "wru": 0.0, "messages": 0.0}
    with harness.captured_logs(harness.LogSink()):
        _write(consumer, meter, start, people_per_script, expected, counts)
        week = _ask(admin, start.date().isoformat(), (start + timedelta(days=6)).date().isoformat())
    requests, wru, messages = counts["requests"], counts["wru"], counts["messages"]
    got = {key: week[key] for key in expected}
    people = len(SCRIPTS) * people_per_script
    return {
        "people": people,
        "scripts": [s[0] for s in SCRIPTS],
        "expected": expected,
        "reported": got,
        "mismatches": sum(1 for key in expected if expected[key] != got[key]),
        "resolved": week["resolved"],
        "containment": week["containment"],
        "handoff_rate": week["handoff_rate"],
        "tokens_per_conversation": week["tokens_per_conversation"],
        "messages": messages,
        "requests_per_message": requests / messages,
        "wru_per_message": wru / messages,
    }


def _write(
    consumer: Any,
    meter: Any,
    start: datetime,
    people_per_script: int,
    expected: dict[str, int],
    counts: dict[str, float],
) -> None:
    """Every script's messages, each person's in order, one record a message."""
    for n, (_name, lines, conversations, returned, handed) in enumerate(SCRIPTS):
        expected["conversations"] += conversations * people_per_script
        expected["returned"] += returned * people_per_script
        expected["handed_off"] += handed * people_per_script
        for p in range(people_per_script):
            phone = f"+4477009{n:02d}{p:03d}"
            for day, hour, text in lines:
                at = start + timedelta(days=day, hours=hour)
                stamp = at.isoformat(timespec="seconds").replace("+00:00", "Z")
                event = harness.whasp_message(text, chat=phone, created_at=stamp)
                meter.reset()
                consumer.handler(harness.sqs_batch(event), harness.LambdaContext())
                counts["requests"] += meter.snapshot()["total_requests"]
                counts["wru"] += meter.wru
                counts["messages"] += 1
