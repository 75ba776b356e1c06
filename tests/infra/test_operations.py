"""Operating the stack, as AWS will run it (after the SAM transform): a flood of the public
webhook is capped, both APIs keep access logs that expire and hold no phone number, and the
admin function fits API Gateway's 30 s."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from samtranslator.yaml_helper import yaml_parse

from tests.infra.conftest import operator_tools
from tests.infra.test_template import (
    PARAMETERS,
    ROOT,
    TEMPLATE,
    Template,
    deployed,
    evaluate,
    references,
    resolve_all,
    resources,
    sam_transform,
    target,
)


def api_with_path(cfn: Template, path: str) -> tuple[str, dict[str, Any]]:
    apis = resources(cfn, "AWS::ApiGatewayV2::Api")
    # the console's API has no OpenAPI body (its routes are resources), and SAM's order varies
    bodies = {k: a["Properties"].get("Body") or {"paths": {}} for k, a in apis.items()}
    return next((k, apis[k]) for k, body in bodies.items() if path in body["paths"])


def stage_of(cfn: Template, api_id: str) -> dict[str, Any]:
    stages = resources(cfn, "AWS::ApiGatewayV2::Stage").values()
    return next(s["Properties"] for s in stages if target(s["Properties"]["ApiId"]) == api_id)


def function_behind(cfn: Template, path: str) -> dict[str, Any]:
    """The Lambda function whose invoke permission names the API serving `path`."""
    api_id, _ = api_with_path(cfn, path)
    for permission in resources(cfn, "AWS::Lambda::Permission").values():
        if api_id in json.dumps(permission["Properties"].get("SourceArn")):
            return cfn["Resources"][target(permission["Properties"]["FunctionName"])]
    raise AssertionError(f"no function behind {path}")


# Lambda keeps 100 of an account's concurrency unreserved; a new account's quota may be as low
# as 10, so a stack that reserves any fails to create there (docs/deploy.md, the quota check)
UNRESERVED_MINIMUM = 100
DEFAULT_QUOTA = 1000  # Lambda's default concurrent executions per Region
# the reservations docs/deploy.md and docs/security.md recommend where the quota allows them
RESERVING = {"WebhookReservedConcurrency": "50", "ReserveConsumerConcurrency": "true"}


def reservations(cfn: Template, parameters: dict[str, str]) -> dict[str, Any]:
    """Each function's ReservedConcurrentExecutions as this stack resolves it (none: absent)."""
    found = {}
    for function_id, function in resources(cfn, "AWS::Lambda::Function").items():
        properties = resolve_all(cfn, function["Properties"], parameters)
        if properties.get("ReservedConcurrentExecutions") is not None:  # AWS::NoValue: none
            found[function_id] = int(properties["ReservedConcurrentExecutions"])
    return found


def test_the_webhook_route_is_throttled_and_a_new_account_can_create_the_stack(
    cfn: Template,
) -> None:
    # given the default parameters
    api_id, _ = api_with_path(cfn, "/webhook")
    route = stage_of(cfn, api_id)["DefaultRouteSettings"]
    rate = evaluate(cfn, route["ThrottlingRateLimit"], PARAMETERS)
    burst = evaluate(cfn, route["ThrottlingBurstLimit"], PARAMETERS)
    # then the route is throttled, sized from an expected peak of 100 deliveries a second
    # (docs/security.md): 2x for redeliveries
    assert (rate, burst) == (200, 400)
    # and no function reserves concurrency: a new account's quota has none to give
    assert reservations(cfn, PARAMETERS) == {}


def test_the_recommended_reservations_fit_an_account_of_the_default_quota(
    sam_template: Template,
) -> None:
    # given the reservations the docs recommend once the account's quota allows them
    parameters = {**PARAMETERS, **RESERVING}
    cfn = sam_transform(sam_template, parameters)
    reserved = reservations(cfn, parameters)
    webhook = next(k for k in reserved if k.startswith("WebhookFunction"))
    consumer = next(k for k in reserved if k.startswith("ConsumerFunction"))
    rate = int(evaluate(cfn, {"Ref": "WebhookRateLimit"}, parameters))
    # then the webhook's serves the route's rate at 250 ms a request, the consumer's is its
    # queue mapping's maximum, and both leave the 100 Lambda keeps unreserved in 1,000
    assert reserved[webhook] == rate * 0.25
    assert reserved[consumer] == int(
        evaluate(cfn, {"Ref": "ConsumerMaximumConcurrency"}, parameters)
    )
    assert sum(reserved.values()) + UNRESERVED_MINIMUM <= DEFAULT_QUOTA


def test_a_reservation_of_zero_means_none_not_a_stopped_webhook(sam_template: Template) -> None:
    parameters = {**PARAMETERS, **RESERVING, "WebhookReservedConcurrency": "0"}
    cfn = sam_transform(sam_template, parameters)
    webhook = function_behind(cfn, "/webhook")["Properties"]
    chosen = evaluate(cfn, webhook["ReservedConcurrentExecutions"], parameters)
    assert chosen == {"Ref": "AWS::NoValue"}
    assert [f for f in reservations(cfn, parameters) if f.startswith("WebhookFunction")] == []


@pytest.mark.parametrize("path", ["/webhook", "/{proxy+}"])
def test_both_apis_keep_access_logs_that_expire_and_hold_no_path(cfn: Template, path) -> None:
    api_id, _ = api_with_path(cfn, path)
    settings = stage_of(cfn, api_id)["AccessLogSettings"]
    group = cfn["Resources"][target(settings["DestinationArn"])]
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    record = json.loads(settings["Format"])
    assert record["requestId"] == "$context.requestId"
    # the admin path carries the phone number: only the route template is logged
    assert record["route"] == "$context.routeKey"
    assert not [v for v in record.values() if "path" in v.lower() or "querystring" in v.lower()]


def test_admin_access_logs_name_the_caller(cfn: Template) -> None:
    api_id, _ = api_with_path(cfn, "/{proxy+}")
    record = json.loads(stage_of(cfn, api_id)["AccessLogSettings"]["Format"])
    assert record["caller"] == "$context.identity.userArn"


def test_the_admin_function_fits_api_gateways_30_seconds(cfn: Template) -> None:
    admin = function_behind(cfn, "/{proxy+}")["Properties"]
    assert admin["Timeout"] < 30


# --------------------------------------------------------------------------- alarms


def alarms(cfn: Template) -> dict[str, dict[str, Any]]:
    return {k: v["Properties"] for k, v in resources(cfn, "AWS::CloudWatch::Alarm").items()}


def watched(alarm: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(namespace, metric, dimensions) of every metric an alarm reads."""
    if "MetricName" in alarm:
        dims = {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}
        return [(alarm["Namespace"], alarm["MetricName"], dims)]
    found = []
    for query in alarm["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            dims = {d["Name"]: d["Value"] for d in metric.get("Dimensions", [])}
            found.append((metric["Namespace"], metric["MetricName"], dims))
    return found


@pytest.mark.parametrize(
    ("parameters", "destination"),
    [
        ({}, {"Ref": "AlarmTopic"}),
        (
            {"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:ops"},
            "arn:aws:sns:us-east-1:123456789012:ops",
        ),
    ],
    ids=["own-topic", "your-topic"],
)
def test_every_alarm_reaches_a_topic(sam_template: Template, parameters, destination) -> None:
    parameters = {**PARAMETERS, **parameters}
    cfn = sam_transform(sam_template, parameters)
    for alarm_id, alarm in alarms(cfn).items():
        actions = [evaluate(cfn, a, parameters) for a in alarm.get("AlarmActions", [])]
        assert actions == [destination], alarm_id
    topics = resources(cfn, "AWS::SNS::Topic")
    own = "AlarmTopic" in topics and evaluate(cfn, {"Condition": "CreatesAlarmTopic"}, parameters)
    assert own == (destination == {"Ref": "AlarmTopic"})


def test_an_alarm_email_subscribes_to_the_stacks_own_topic(sam_template: Template) -> None:
    parameters = {**PARAMETERS, "AlarmEmail": "oncall@example.com"}
    cfn = sam_transform(sam_template, parameters)
    [subscription] = [
        s
        for s in resources(cfn, "AWS::SNS::Subscription").values()
        if s["Properties"]["TopicArn"] == {"Ref": "AlarmTopic"}
    ]
    assert evaluate(cfn, {"Condition": subscription["Condition"]}, parameters)
    assert subscription["Properties"]["Protocol"] == "email"
    # and without an address there is none
    assert not evaluate(cfn, {"Condition": subscription["Condition"]}, PARAMETERS)


def test_outages_are_alarmed(cfn: Template) -> None:
    metrics = [m for alarm in alarms(cfn).values() for m in watched(alarm)]
    # the agent's functions; the example tool's failures show as the consumer's (its record is
    # retried on the backoff, then EventQueueAgeAlarm): an operator's own tools alarm their own
    # the stack's own functions; an operator's tool is alarmed by its owner (docs/tools.md)
    functions = {
        k
        for k, v in resources(cfn, "AWS::Lambda::Function").items()
        if v.get("Condition") != "ExampleBookingToolOn" and k not in operator_tools(cfn)
    }

    def functions_watched(name: str) -> set[str]:
        return {
            target(dims["FunctionName"])
            for namespace, metric, dims in metrics
            if namespace == "AWS/Lambda" and metric == name
        }

    # a wrong secret: signature rejections
    assert ("WhaspAgent", "WebhookRejected", {"reason": "signature", "service": "whasp-agent"}) in [
        (n, m, d) for n, m, d in metrics
    ]
    # every function's errors and throttles
    assert functions_watched("Errors") == functions
    assert functions_watched("Throttles") == functions
    # the consumer falling behind, and the compactor falling behind its stream
    queue_age = [d for n, m, d in metrics if m == "ApproximateAgeOfOldestMessage"]
    assert [target(d["QueueName"]) for d in queue_age] == ["EventQueue"]
    assert functions_watched("IteratorAge") == {"CompactorFunction"}


def test_the_signature_alarm_watches_the_metric_the_webhook_emits(
    monkeypatch, capsys, cfn, lambda_context
) -> None:
    # given the webhook as deployed (its namespace and service from the template's Globals)
    from tests.conftest import TEST_SECRET, load_function
    from tests.integration.test_webhook import http_event

    globals_env = yaml_parse(TEMPLATE.read_text())["Globals"]["Function"]["Environment"]
    env = {k: v for k, v in globals_env["Variables"].items() if isinstance(v, str) and v}
    webhook = load_function(
        "webhook",
        {
            **env,
            "QUEUE_URL": "https://sqs.example/q.fifo",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AGENT_ID": "coach",
            "WEBHOOK_SECRET": TEST_SECRET,
        },
        monkeypatch,
    )
    capsys.readouterr()
    # when a request with a bad signature arrives
    headers = {"webhook-id": "evt_1", "webhook-timestamp": "1", "webhook-signature": "v1,x"}
    webhook.handler(http_event(b"{}", headers), lambda_context)
    # then the metric it writes is exactly the one the alarm reads
    emitted = [
        json.loads(line)
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("{") and "_aws" in line
    ]
    [blob] = [b for b in emitted if "WebhookRejected" in b]
    [directive] = blob["_aws"]["CloudWatchMetrics"]
    dims = {name: blob[name] for name in directive["Dimensions"][0]}
    [alarm] = [a for a in alarms(cfn).values() if "WebhookRejected" in json.dumps(a)]
    [(namespace, metric, wanted)] = [w for w in watched(alarm) if w[1] == "WebhookRejected"]
    assert (directive["Namespace"], metric, dims) == (namespace, "WebhookRejected", wanted)


# --------------------------------------------------------------------------- the dashboard


def dashboard(cfn: Template) -> dict[str, Any]:
    [board] = resources(cfn, "AWS::CloudWatch::Dashboard").values()
    body = board["Properties"]["DashboardBody"]["Fn::Sub"]
    return json.loads(re.sub(r"\$\{[^}]+\}", "x", body))


def test_the_dashboard_shows_the_pipelines_health(cfn: Template) -> None:
    text = json.dumps(dashboard(cfn))
    for shown in (
        "WebhookAccepted",
        "RepliesSent",
        "RetriesScheduled",
        "ApproximateNumberOfMessagesVisible",  # dead letters
        "ModelLatency",
        "ModelInputTokens",
        "TurnsFolded",
        "PeopleForgotten",
        "ApproximateAgeOfOldestMessage",
        "IteratorAge",
    ):
        assert shown in text, shown


def test_every_custom_metric_on_the_dashboard_is_one_the_code_emits(cfn: Template) -> None:
    code = "\n".join(
        path.read_text() for path in (ROOT / "layers" / "memagent").rglob("*.py")
    ) + "\n".join(path.read_text() for path in (ROOT / "functions").glob("*/app.py"))
    emitted = set(re.findall(r"\"([A-Z][A-Za-z]+)\"", code))
    shown = {
        metric[1]
        for widget in dashboard(cfn)["widgets"]
        for metric in widget["properties"]["metrics"]
        if metric and metric[0] == "WhaspAgent"
    }
    assert shown and shown <= emitted, shown - emitted


# --------------------------------------------------------------------------- checkov (make scan)


def test_every_checkov_skip_says_why(sam_template: Template) -> None:
    skips = [
        (resource_id, skip)
        for resource_id, resource in sam_template["Resources"].items()
        for skip in (resource.get("Metadata") or {}).get("checkov", {}).get("skip", [])
    ]
    assert skips  # `make scan` (CI) fails on any finding that is neither fixed nor skipped here
    unexplained = [
        f"{resource_id}: {skip.get('id')}"
        for resource_id, skip in skips
        if not re.fullmatch(r"CKV2?_AWS_\d+", str(skip.get("id")))
        or len(str(skip.get("comment", "")).split()) < 5
    ]
    assert not unexplained, unexplained


@pytest.mark.parametrize(("reserve", "reserved"), [("false", False), ("true", True)])
def test_the_consumer_is_reserved_at_its_mappings_concurrency_or_not_at_all(
    sam_template: Template, reserve: str, reserved: bool
) -> None:
    from tests.infra.test_template import consumer_mapping, mapped_function

    # given the consumer with ReserveConsumerConcurrency off (the default) or on
    parameters = {**PARAMETERS, "ReserveConsumerConcurrency": reserve}
    cfn = sam_transform(sam_template, parameters)
    mapping = consumer_mapping(cfn)
    _, function = mapped_function(cfn, mapping)
    properties = resolve_all(cfn, function["Properties"], parameters)
    maximum = int(evaluate(cfn, mapping["ScalingConfig"]["MaximumConcurrency"], parameters))
    # then off, nothing is reserved; on, exactly what the queue may drive (more would be
    # wasted, fewer throttled), so account-wide throttling cannot take it from under the poller
    assert properties.get("ReservedConcurrentExecutions") == (maximum if reserved else None)
    # and the mapping's maximum is one Lambda takes (2 to 1,000)
    assert 2 <= maximum <= 1000


def test_the_consumers_throttles_and_the_fifo_in_flight_limit_are_alarmed(cfn: Template) -> None:
    from tests.infra.test_template import consumer_mapping, event_queue_id, mapped_function

    function_id, _ = mapped_function(cfn, consumer_mapping(cfn))
    # then a throttle of the consumer alone, and the FIFO in-flight limit, are alarmed
    alarms = resources(cfn, "AWS::CloudWatch::Alarm").values()
    throttles = [
        a["Properties"]
        for a in alarms
        if a["Properties"].get("MetricName") == "Throttles"
        and [target(d["Value"]) for d in a["Properties"]["Dimensions"]] == [function_id]
    ]
    assert throttles and throttles[0]["Threshold"] == 1
    in_flight = [
        a["Properties"]
        for a in alarms
        if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesNotVisible"
    ]
    queue = [target(d["Value"]) for d in in_flight[0]["Dimensions"]]
    assert queue == [event_queue_id(cfn)] and in_flight[0]["Threshold"] < 120_000


def test_budgets_reach_the_consumer_and_the_stack_token_budget_is_alarmed(cfn: Template) -> None:
    from tests.infra.test_template import consumer_mapping, mapped_function

    _, function = mapped_function(cfn, consumer_mapping(cfn))
    variables = function["Properties"]["Environment"]["Variables"]
    budgets = {
        "MAX_REPLY_TOKENS": "MaxReplyTokens",
        "MAX_REPLY_PARTS": "MaxReplyParts",
        "MAX_AUDIO_SECONDS": "MaxAudioSeconds",
        "PERSON_DAILY_TURNS": "PersonDailyTurns",
        "PERSON_DAILY_TOKENS": "PersonDailyTokens",
        "STACK_DAILY_TOKENS_HARD_LIMIT": "StackDailyTokensHardLimit",
    }
    chosen = {name: references(variables[name]) - {"AWS::NoValue"} for name in budgets}
    assert chosen == {name: {parameter} for name, parameter in budgets.items()}
    [alarm] = [
        a["Properties"]
        for a in resources(cfn, "AWS::CloudWatch::Alarm").values()
        if target(a["Properties"].get("Threshold")) == "StackDailyTokenBudget"
    ]
    watched = {
        m["MetricStat"]["Metric"]["MetricName"] for m in alarm["Metrics"] if "MetricStat" in m
    }
    assert watched == {"ModelInputTokens", "ModelOutputTokens"}
    assert {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m} == {86400}


def test_a_notify_email_hears_who_waits_through_a_rule_only_it_may_publish_by(
    sam_template: Template,
) -> None:
    from memagent.aws.notify import HANDOFF_MESSAGE, HANDOFF_STARTED, SOURCE

    # given a stack with NotifyEmail set, and one without
    told = {**PARAMETERS, "NotifyEmail": "desk@example.com"}
    cfn = sam_transform(sam_template, told)

    def stack(parameters: dict[str, str]) -> set[str]:
        return {k for k, v in cfn["Resources"].items() if deployed(cfn, v, parameters)}

    # then the address adds a topic, its email subscription, a rule and the topic's policy;
    # without it nothing is added
    added = stack(told) - stack(PARAMETERS)
    assert added == {
        "OperatorNotifyTopic",
        "OperatorNotifyEmailSubscription",
        "OperatorNotifyRule",
        "OperatorNotifyTopicPolicy",
    }
    assert stack(PARAMETERS) <= stack(told)
    subscription = cfn["Resources"]["OperatorNotifyEmailSubscription"]["Properties"]
    assert subscription["TopicArn"] == {"Ref": "OperatorNotifyTopic"}
    assert (subscription["Protocol"], evaluate(cfn, subscription["Endpoint"], told)) == (
        "email",
        "desk@example.com",
    )
    # and the rule, on the operators' bus, takes what the consumer puts when someone waits
    rule = cfn["Resources"]["OperatorNotifyRule"]["Properties"]
    assert rule["EventBusName"] == {"Ref": "OperatorEventBus"}
    assert rule["EventPattern"] == {
        "source": [SOURCE],
        "detail-type": [HANDOFF_STARTED, HANDOFF_MESSAGE],
    }
    [to] = rule["Targets"]
    assert to["Arn"] == {"Ref": "OperatorNotifyTopic"}
    assert "<agent>" in to["InputTransformer"]["InputTemplate"]  # no person's key in an email
    assert "person" not in json.dumps(to["InputTransformer"]["InputPathsMap"])
    # and only that rule may publish to the topic: EventBridge, sns:Publish, its own ARN
    policy = cfn["Resources"]["OperatorNotifyTopicPolicy"]["Properties"]
    assert policy["Topics"] == [{"Ref": "OperatorNotifyTopic"}]
    [statement] = policy["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert (statement["Effect"], statement["Action"]) == ("Allow", "sns:Publish")
    assert statement["Resource"] == {"Ref": "OperatorNotifyTopic"}
    assert statement["Condition"] == {
        "ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["OperatorNotifyRule", "Arn"]}}
    }
