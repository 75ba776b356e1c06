"""Least privilege, as AWS will see it: every IAM statement of every function, after the SAM
transform, for each shape of the stack (whasp or Meta, with or without the transcript archive).

A statement on Resource "*" is refused unless AWS offers the action on "*" only (X-Ray,
CloudWatch metrics). AWS managed policies are refused outright: their statements are not in the
template, and the ones SAM attaches (basic execution, the SQS and stream pollers) are on "*".
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.infra.conftest import operator_tools
from tests.infra.test_template import (
    PARAMETERS,
    RESOURCE_STAR_ONLY,
    Template,
    as_list,
    deployed,
    evaluate,
    policy_statements,
    resolve_all,
    resources,
    sam_transform,
    target,
)

ORDERS_TOOL = "arn:aws:lambda:eu-west-1:123456789012:function:orders"
SHAPES = {
    "whasp": {},
    "whasp-with-archive": {"ArchiveBucket": "transcripts-example"},
    "meta-with-archive": {"Provider": "meta", "ArchiveBucket": "transcripts-example"},
    "bedrock": {"ModelProvider": "bedrock"},
    "whasp-with-tools": {"ExampleBookingTool": "true", "ToolFunctionArns": ORDERS_TOOL},
    "whasp-with-follow-ups": {"FollowUps": "true"},
    "meta-with-voice": {"Provider": "meta", "VoiceReplies": "mirror"},
    "meta-with-openai-voice": {
        "Provider": "meta",
        "VoiceReplies": "mirror",
        "VoiceSpeech": "openai",
    },
}
PROFILE = "arn:aws:bedrock:us-east-1:123456789012:inference-profile/eu.openai.gpt-6-luna"


@pytest.fixture(scope="module", params=list(SHAPES), ids=list(SHAPES))
def shape(request, sam_template: Template) -> tuple[Template, dict[str, str]]:
    parameters = {**PARAMETERS, **SHAPES[request.param]}
    return sam_transform(sam_template, parameters), parameters


def deployed_resources(cfn: Template, type_: str, parameters: dict[str, str]) -> dict[str, Any]:
    """The resources of a type that this shape deploys (their Condition holds)."""
    return {
        logical_id: resource
        for logical_id, resource in resources(cfn, type_).items()
        if deployed(cfn, resource, parameters)
    }


def function_roles(cfn: Template, parameters: dict[str, str] | None = None) -> dict[str, str]:
    """Function logical id -> the logical id of its execution role (of this shape's functions)."""
    found = {}
    for function_id, function in deployed_resources(
        cfn, "AWS::Lambda::Function", parameters or {}
    ).items():
        role = target(function["Properties"]["Role"])
        assert role in cfn["Resources"], f"{function_id}'s role is not in the stack"
        found[function_id] = role
    return found


def role_statements(
    cfn: Template, role_id: str, parameters: dict[str, str]
) -> Iterator[dict[str, Any]]:
    """Every Allow statement the role carries: inline, and in policies attached to it."""
    role = resolve_all(cfn, cfn["Resources"][role_id]["Properties"], parameters)
    documents = [p["PolicyDocument"] for p in role.get("Policies", [])]
    for policy in {
        **resources(cfn, "AWS::IAM::Policy"),
        **resources(cfn, "AWS::IAM::ManagedPolicy"),
    }.values():
        if not deployed(cfn, policy, parameters):
            continue
        properties = resolve_all(cfn, policy["Properties"], parameters)
        if role_id in [target(r) for r in properties.get("Roles", [])]:
            documents.append(properties["PolicyDocument"])
    for statement in policy_statements(documents):
        if statement.get("Effect") == "Allow":
            yield statement


def listing(cfn: Template, parameters: dict[str, str]) -> list[tuple[str, str, str]]:
    """(function, action, resource) for every grant: the table a reviewer reads."""
    rows = []
    for function_id, role_id in function_roles(cfn, parameters).items():
        for statement in role_statements(cfn, role_id, parameters):
            for action in as_list(statement["Action"]):
                for resource in as_list(statement["Resource"]):
                    rows.append((function_id, action, _name(resource)))
    return sorted(rows)


def _name(resource: Any) -> str:
    """A resource as a reader would say it: "*", "EventQueue.Arn", "${Bucket.Arn}/*"."""
    if isinstance(resource, str):
        return resource
    if "Fn::GetAtt" in resource:
        attribute = resource["Fn::GetAtt"]
        return ".".join(attribute) if isinstance(attribute, list) else attribute
    if "Fn::Sub" in resource:
        text = resource["Fn::Sub"]
        return text[0] if isinstance(text, list) else text
    return json.dumps(resource)


def _too_wide(resource: str) -> bool:
    """Resource "*", or a wildcard anywhere but after a resource of this stack ("${X.Arn}/*":
    the objects of one bucket)."""
    if resource == "*":
        return True
    # the schedules of this stack's own schedule group (follow-ups)
    resource = re.sub(r":schedule/\$\{FollowUpScheduleGroup\}/\*$", "", resource)
    return "*" in re.sub(r"\$\{[A-Za-z0-9]+\.Arn\}/\*$", "", resource)


# --------------------------------------------------------------------------- tests


def profile_bound(cfn: Template, parameters: dict[str, str]) -> set[tuple[str, str, str]]:
    """Grants whose wildcard (the Regions a cross-Region profile routes to) is bound by a
    condition to this stack's one inference profile."""
    bound = set()
    for function_id, role_id in function_roles(cfn).items():
        for statement in role_statements(cfn, role_id, parameters):
            if "bedrock:InferenceProfileArn" in json.dumps(statement.get("Condition", {})):
                for action in as_list(statement["Action"]):
                    bound |= {
                        (function_id, action, _name(r)) for r in as_list(statement["Resource"])
                    }
    return bound


def test_every_grant_names_its_resource_except_where_aws_allows_only_star(shape) -> None:
    cfn, parameters = shape
    grants = [g for g in listing(cfn, parameters) if g not in profile_bound(cfn, parameters)]
    # every function was listed
    assert {function for function, _, _ in grants} == set(function_roles(cfn, parameters))
    wide = [
        f"{function}: {action} on {resource}"
        for function, action, resource in grants
        if _too_wide(resource) and action not in RESOURCE_STAR_ONLY
    ]
    table = "\n".join(f"{f:<20} {a:<28} {r}" for f, a, r in grants)
    assert not wide, "grants on '*':\n" + "\n".join(wide) + "\n\nall grants:\n" + table


def test_no_function_role_attaches_a_managed_policy(shape) -> None:
    cfn, _ = shape
    attached = {
        role: cfn["Resources"][role]["Properties"].get("ManagedPolicyArns")
        for role in function_roles(cfn).values()
    }
    assert not any(attached.values()), attached


def test_nothing_can_scan_change_lifecycles_or_read_parameters_it_does_not_need(shape) -> None:
    cfn, parameters = shape
    actions = {action for _, action, _ in listing(cfn, parameters)}
    assert "dynamodb:Scan" not in actions  # every read is one person's Query
    assert not [a for a in actions if "Lifecycle" in a]  # expiry is the template's, not ours
    assert "ssm:DescribeParameters" not in actions
    assert "ssm:GetParametersByPath" not in actions
    assert not [a for a in actions if a.endswith("*") or a == "*"]


def test_the_compactor_may_archive_and_erase_and_nothing_else_in_s3(shape) -> None:
    cfn, parameters = shape
    if not parameters.get("ArchiveBucket"):
        pytest.skip("no archive in this shape")
    compactor = next(f for f in function_roles(cfn) if f.startswith("Compactor"))
    s3 = {(a, r) for f, a, r in listing(cfn, parameters) if f == compactor and a.startswith("s3:")}
    bucket_objects = "${TranscriptArchiveBucket.Arn}/*"
    assert s3 == {
        ("s3:PutObject", bucket_objects),
        ("s3:DeleteObject", bucket_objects),
        ("s3:ListBucket", "TranscriptArchiveBucket.Arn"),  # a silent person's copies, to erase
        ("s3:ListBucket", "MediaBucket.Arn"),
        ("s3:DeleteObject", "${MediaBucket.Arn}/*"),
    }


def test_pollers_and_logs_are_scoped_to_this_stacks_queue_stream_and_log_groups(shape) -> None:
    cfn, parameters = shape
    grants = listing(cfn, parameters)
    by_action: dict[str, set[str]] = {}
    for _, action, resource in grants:
        by_action.setdefault(action, set()).add(resource)
    assert by_action["sqs:ReceiveMessage"] == {"EventQueue.Arn", "CompactionFailureQueue.Arn"}
    assert by_action["dynamodb:GetRecords"] == {"MemoryTable.StreamArn"}
    example = {"BookingToolLogGroup.Arn"} if parameters.get("ExampleBookingTool") else set()
    # an operator's tool writes to its own log group (test_an_operators_tool_function_...)
    tools = {f"{t.removesuffix('Function')}LogGroup.Arn" for t in operator_tools(cfn)}
    assert by_action["logs:PutLogEvents"] - tools == {
        "WebhookLogGroup.Arn",
        "ConsumerLogGroup.Arn",
        "CompactorLogGroup.Arn",
        "AdminLogGroup.Arn",
        *example,
    }
    assert "logs:CreateLogGroup" not in by_action  # the template creates them, with retention


def test_the_compactor_retries_its_own_failure_queue_and_reads_back_only_its_stream(shape) -> None:
    cfn, parameters = shape
    compactor = next(f for f in function_roles(cfn) if f.startswith("Compactor"))
    grants = {(a, r) for f, a, r in listing(cfn, parameters) if f == compactor}
    queues = {(a, r) for a, r in grants if a.startswith("sqs:")}
    # the stream mapping's on-failure records, then our jobs: received, deleted when done,
    # postponed on the backoff when not, queued 15 minutes ahead; on that one queue
    assert queues == {
        (action, "CompactionFailureQueue.Arn")
        for action in (
            "sqs:SendMessage",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
            "sqs:GetQueueAttributes",
            "sqs:ChangeMessageVisibility",
        )
    }
    # and a failed batch is read back from the memory table's stream, nothing else
    streams = {(a, r) for a, r in grants if a.startswith("dynamodb:") and "Stream" in r}
    assert streams == {
        (action, "MemoryTable.StreamArn")
        for action in (
            "dynamodb:DescribeStream",
            "dynamodb:GetRecords",
            "dynamodb:GetShardIterator",
            "dynamodb:ListStreams",
        )
    }


def test_the_operators_grants_name_the_bus_the_handoff_index_and_the_table(shape) -> None:
    cfn, parameters = shape
    grants = listing(cfn, parameters)
    by_action: dict[str, set[str]] = {}
    for function, action, resource in grants:
        by_action.setdefault(action, set()).add(f"{function[:5]}:{resource}")
    # handoff notifications only on the stack's own bus
    assert {r.split(":", 1)[1] for r in by_action["events:PutEvents"]} == {"OperatorEventBus.Arn"}
    # the waiting list reads the sparse index, nothing else of the table's indexes
    index_reads = {r for r in by_action["dynamodb:Query"] if "/index/" in r}
    assert index_reads == {"Admin:${MemoryTable.Arn}/index/HandoffIndex"}
    # the admin API deletes one fact at a time, in the memory table only
    assert "Admin:MemoryTable.Arn" in by_action["dynamodb:DeleteItem"]
    assert {r.split(":", 1)[1] for r in by_action["dynamodb:DeleteItem"]} == {"MemoryTable.Arn"}
    # and a retention expiry, in the compactor or finished by a turn, deletes item by item
    assert {"Consu:MemoryTable.Arn", "Compa:MemoryTable.Arn"} <= by_action["dynamodb:DeleteItem"]
    # the operator's replies read the provider's key, and only that secret
    admin_parameters = {r for r in by_action["ssm:GetParameter"] if r.startswith("Admin")}
    key = "meta-access-token" if parameters.get("Provider") == "meta" else "whasp-api-key"
    assert len(admin_parameters) == 1 and next(iter(admin_parameters)).endswith(key)


# What each function's code does to the memory table, as IAM authorises it: a transaction
# item by item (Put -> PutItem, Update -> UpdateItem, Delete -> DeleteItem, ConditionCheck ->
# ConditionCheckItem: "Using IAM with DynamoDB transactions"), a batch as its own action.
# The local stack's IAM evaluation checks that they suffice; this, that nothing more is granted.
MEMORY_ACTIONS = {
    # the turn: its Query, writes and transactions; a reply to one message is a Put beside a
    # ConditionCheck on the state (memagent.store.turn.remember_reply); a new person's first
    # message reads the old keys' states in one BatchGetItem (LegacyPersonKeys:
    # memagent.lifecycle.upgrade.carry_over); erasure and a moved memory batch-write
    "ConsumerFunction": {
        "GetItem",
        "BatchGetItem",
        "Query",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "BatchWriteItem",
    },
    # a fold's commit (Update, Put, Delete items), the clean-up's batches, a silent person's
    # expiry: no ConditionCheck, no batch read
    "CompactorFunction": {
        "GetItem",
        "Query",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
    },
    # the operator's edits check the person exists in their transaction (ConditionCheck:
    # memagent.store.operator); export and erasure read the old key's state (BatchGetItem:
    # memagent.lifecycle.rights.legacy) and erase in batches
    "AdminFunction": {
        "GetItem",
        "BatchGetItem",
        "Query",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "BatchWriteItem",
    },
}


def test_each_function_may_do_to_the_memory_table_what_its_code_does_and_no_more(shape) -> None:
    # given the stack as deployed, in each shape
    cfn, parameters = shape
    # when the grants on the memory table itself (not its stream, not its indexes) are listed
    granted: dict[str, set[str]] = {}
    for function, action, resource in listing(cfn, parameters):
        if resource == "MemoryTable.Arn":
            granted.setdefault(function, set()).add(action.removeprefix("dynamodb:"))
    # then each function holds exactly what its calls are authorised as; the webhook none
    assert granted == MEMORY_ACTIONS


def _arn(cfn: Template, resource: Any, parameters: dict[str, str]) -> str:
    """A Fn::Sub ARN as AWS would expand it in us-east-1, account 123456789012."""
    text, names = (
        resource["Fn::Sub"] if isinstance(resource["Fn::Sub"], list) else (resource["Fn::Sub"], {})
    )
    values = {"AWS::Partition": "aws", "AWS::Region": "us-east-1", "AWS::AccountId": "123456789012"}
    model = evaluate(cfn, {"Ref": "BedrockModel"}, parameters)
    values["BedrockModel"] = model
    for name, node in names.items():  # Fn::Select [i, Fn::Split [".", BedrockModel]]
        index, split = node["Fn::Select"]
        values[name] = model.split(split["Fn::Split"][0])[index]
    return re.sub(r"\$\{([^}]+)\}", lambda m: values[m.group(1)], text)


def _expanded(cfn: Template, node: Any, parameters: dict[str, str]) -> Any:
    if isinstance(node, dict) and "Fn::Sub" in node:
        return _arn(cfn, node, parameters)
    if isinstance(node, dict):
        return {k: _expanded(cfn, v, parameters) for k, v in node.items()}
    return node


def test_bedrock_grants_the_one_profile_its_model_the_default_project_and_short_term_tokens(
    sam_template: Template,
) -> None:
    # given the stack on Bedrock with a European profile
    parameters = {**PARAMETERS, "ModelProvider": "bedrock", "BedrockModel": "eu.openai.gpt-6-luna"}
    cfn = sam_transform(sam_template, parameters)
    for function_id, role_id in function_roles(cfn).items():
        grants = {
            (
                action,
                _expanded(cfn, resource, parameters),
                json.dumps(_expanded(cfn, statement.get("Condition"), parameters)),
            )
            for statement in role_statements(cfn, role_id, parameters)
            for action in as_list(statement["Action"])
            if action.startswith("bedrock")
            for resource in as_list(statement["Resource"])
        }
        if not function_id.startswith(("Consumer", "Compactor")):
            assert grants == set(), function_id  # the webhook and the admin call no model
            continue
        # then the model functions may invoke that profile, the model it routes to (only
        # through it), the default project (only for it), and use a short-term token: no more
        assert grants == {
            ("bedrock:InvokeModel", PROFILE, "null"),
            (
                "bedrock:InvokeModel",
                "arn:aws:bedrock:*::foundation-model/openai.gpt-6-luna*",
                json.dumps({"StringEquals": {"bedrock:InferenceProfileArn": PROFILE}}),
            ),
            (
                "bedrock:InvokeModel",
                "arn:aws:bedrock:us-east-1:123456789012:project/default",
                json.dumps({"StringEquals": {"bedrock:ModelArn": PROFILE}}),
            ),
            (
                "bedrock:CallWithBearerToken",
                "*",
                json.dumps({"StringEquals": {"bedrock:bearerTokenType": "SHORT_TERM"}}),
            ),
        }, function_id
    # and with OpenAI no role holds any Bedrock permission
    openai = sam_transform(sam_template, PARAMETERS)
    assert not [g for g in listing(openai, PARAMETERS) if g[1].startswith("bedrock")]


def test_the_consumer_may_invoke_exactly_the_declared_tool_functions(shape) -> None:
    cfn, parameters = shape
    invokes = {
        (function.removesuffix("Function")[:8], resource)
        for function, action, resource in listing(cfn, parameters)
        if action.startswith("lambda:")
    }
    # an operator's tool function in the stack: its own grant, on it alone (docs/tools.md)
    own = {("Consumer", f"{tool}.Arn") for tool in operator_tools(cfn)}
    if not parameters.get("ExampleBookingTool"):
        assert invokes == own  # no tools declared: nothing to invoke
        return
    assert invokes == {
        ("Consumer", "BookingToolFunction.Arn"),
        ("Consumer", ORDERS_TOOL),
        *own,
    }


def test_no_function_sets_both_role_and_policies(sam_template: Template) -> None:
    # SAM ignores `Policies` when `Role` is given: a permission added there would silently
    # never reach AWS. Add it to the function's role instead.
    for function_id, function in sam_template["Resources"].items():
        if function["Type"] == "AWS::Serverless::Function":
            properties = function["Properties"]
            assert not ("Role" in properties and "Policies" in properties), function_id


def test_every_bucket_refuses_plain_http(sam_template: Template) -> None:
    cfn = sam_transform(sam_template, {**PARAMETERS, "ArchiveBucket": "transcripts-example"})
    buckets = resources(cfn, "AWS::S3::Bucket")
    assert buckets  # the archive, in this shape
    denied = set()
    for policy in resources(cfn, "AWS::S3::BucketPolicy").values():
        for statement in policy_statements(policy["Properties"]["PolicyDocument"]):
            insecure = statement.get("Condition", {}).get("Bool", {}).get("aws:SecureTransport")
            if (
                statement["Effect"] == "Deny"
                and statement["Principal"] == "*"
                and statement["Action"] in ("s3:*", ["s3:*"])
                and insecure == "false"
            ):
                covered = {_name(r) for r in as_list(statement["Resource"])}
                bucket = target(policy["Properties"]["Bucket"])
                if covered >= {f"{bucket}.Arn", f"${{{bucket}.Arn}}/*"}:
                    denied.add(bucket)
    assert denied == set(buckets)


def test_only_the_webhooks_role_may_send_to_the_event_queue(sam_template: Template) -> None:
    # given the stack with and without a redrive role of the operator's
    redrive = "arn:aws:iam::123456789012:role/ops"
    # (and the admin function's role: a hand-back's CSAT question, signed with the stack's key
    # like a follow-up's firing, which the consumer checks: memagent/lifecycle/csat.py)
    shapes = (
        ({}, {"WebhookRole", "AdminRole"}),
        ({"QueueRedriveRoleArn": redrive}, {"WebhookRole", "AdminRole", redrive}),
        # due follow-ups: EventBridge Scheduler sends them with the stack's scheduler role
        ({"FollowUps": "true"}, {"WebhookRole", "AdminRole", "FollowUpSchedulerRole"}),
    )
    for extra, allowed in shapes:
        parameters = {**PARAMETERS, **extra}
        cfn = sam_transform(sam_template, parameters)
        (policy,) = [
            p["Properties"]
            for p in resources(cfn, "AWS::SQS::QueuePolicy").values()
            if [target(q) for q in p["Properties"]["Queues"]] == ["EventQueue"]
        ]
        (deny,) = policy_statements(policy["PolicyDocument"])
        # then every other principal is refused SendMessage on the queue
        assert (deny["Effect"], deny["Principal"], deny["Action"]) == (
            "Deny",
            "*",
            "sqs:SendMessage",
        )
        assert target(deny["Resource"]) == "EventQueue"
        principals = deny["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
        exempt = as_list(resolve_all(cfn, principals, parameters))
        names = {target(e) or e for e in exempt}
        assert names == allowed


def test_the_person_key_is_read_by_the_functions_that_derive_keys_and_by_no_other(shape) -> None:
    # the compactor works on the keys its stream records carry: it never needs the key
    cfn, parameters = shape
    secrets = {(f, a, r) for f, a, r in listing(cfn, parameters) if a.startswith("secretsmanager")}
    key = json.dumps({"Ref": "PersonKeySecret"})
    assert secrets == {
        (function, "secretsmanager:GetSecretValue", key)
        for function in ("WebhookFunction", "ConsumerFunction", "AdminFunction")
    }


def test_polly_is_granted_to_the_consumer_alone_and_only_with_voice_replies_on(shape) -> None:
    # given each shape; then only the consumer may synthesize speech, and only where
    # VoiceReplies is on with provider meta (whasp sends text: no grant it would not use) and
    # Polly speaks (VoiceSpeech=openai speaks through the model's endpoint, with its key)
    cfn, parameters = shape
    polly = {(f, a) for f, a, _ in listing(cfn, parameters) if a.startswith("polly:")}
    on = parameters.get("Provider") == "meta" and parameters.get("VoiceReplies", "off") != "off"
    on = on and parameters.get("VoiceSpeech", "polly") == "polly"
    assert polly == ({("ConsumerFunction", "polly:SynthesizeSpeech")} if on else set())


def test_the_example_tool_may_read_and_write_its_calendar_and_no_other_table(shape) -> None:
    # given the stack as deployed (the example booking tool on, or off)
    cfn, parameters = shape
    grants = {
        (action, resource)
        for function, action, resource in listing(cfn, parameters)
        if function == "BookingToolFunction" and action.startswith("dynamodb:")
    }
    if not parameters.get("ExampleBookingTool"):
        assert grants == set()
        return
    # then its conditional booking (TransactWriteItems is authorised as its PutItems), its
    # idempotency read and its day's Query, on its own table only
    assert grants == {
        ("dynamodb:GetItem", "BookingTable.Arn"),
        ("dynamodb:PutItem", "BookingTable.Arn"),
        ("dynamodb:Query", "BookingTable.Arn"),
    }
    # and no other function may touch it
    others = {f for f, _, r in listing(cfn, parameters) if r.startswith("BookingTable")}
    assert others == {"BookingToolFunction"}


def test_scheduler_may_assume_its_role_only_for_this_stacks_schedule_group(
    sam_template: Template,
) -> None:
    # given the stack with follow-ups on
    parameters = {**PARAMETERS, "FollowUps": "true"}
    cfn = sam_transform(sam_template, parameters)
    role = cfn["Resources"]["FollowUpSchedulerRole"]["Properties"]
    # when Scheduler assumes the role a schedule names
    (trust,) = policy_statements(role["AssumeRolePolicyDocument"])
    assert (trust["Effect"], trust["Principal"], trust["Action"]) == (
        "Allow",
        {"Service": "scheduler.amazonaws.com"},
        "sts:AssumeRole",
    )
    # then its condition is what Scheduler presents: the schedule group's ARN ("Confused
    # deputy prevention in EventBridge Scheduler": never a schedule's, never a name prefix),
    # the group's own attribute (no name rebuilt from the stack's), and this account
    conditions = trust["Condition"]
    assert conditions["ArnEquals"] == {
        "aws:SourceArn": {"Fn::GetAtt": ["FollowUpScheduleGroup", "Arn"]}
    }
    assert conditions["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert set(conditions) == {"ArnEquals", "StringEquals"}
    assert ":schedule/" not in json.dumps(trust)


def test_an_operators_tool_function_is_held_to_a_tools_rules(shape) -> None:
    # given the stack with an operator's tool function added as docs/tools.md says (the
    # fixture's "with an operator's tool" template; as written there is none)
    cfn, parameters = shape
    tools = operator_tools(cfn)
    if not tools:
        pytest.skip("the template as written carries no operator's tool")
    roles = function_roles(cfn, parameters)
    for tool in tools:
        # then it runs under its own explicit role, which no other function shares
        role = roles[tool]
        assert role.startswith(tool.removesuffix("Function")) and role.endswith("Role")
        assert [f for f, r in roles.items() if r == role] == [tool]
        # and writes to its own log group, which expires
        group = cfn["Resources"][f"{tool.removesuffix('Function')}LogGroup"]["Properties"]
        assert tool in json.dumps(group["LogGroupName"])
        assert group["RetentionInDays"]
        # and its grants are its logs and its traces, nothing on "*" but what only takes "*"
        grants = {(a, r) for f, a, r in listing(cfn, parameters) if f == tool}
        assert {a for a, r in grants if a.startswith("logs:")} == {
            "logs:CreateLogStream",
            "logs:PutLogEvents",
        }
        assert {r for a, r in grants if a.startswith("logs:")} == {
            f"{tool.removesuffix('Function')}LogGroup.Arn"
        }
        assert all(a in RESOURCE_STAR_ONLY for a, r in grants if r == "*")
