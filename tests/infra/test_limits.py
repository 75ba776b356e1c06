"""What a first deploy meets, for ANY legal stack name and parameter values: every name the
template builds fits its service's limit, and every function's environment fits Lambda's 4 KB in
every shape of the stack.

The template is resolved as CloudFormation would resolve it (devstack.cfn.Resolver, after the SAM
transform) for the longest of everything:

- a stack name of 128 characters, mixed case (CloudFormation's CreateStack, botocore's model:
  "alphanumeric characters (case sensitive) and hyphens ... can't be longer than 128");
- the longest partition, Region and DNS suffix AWS publishes (botocore's endpoints.json);
- each parameter at its longest legal value: its MaxLength (or MaxValue), within its
  AllowedPattern, each character as wide in UTF-8 as the pattern lets it be (4 bytes; 3 for
  the free texts, whose patterns keep to the Basic Multilingual Plane; 1 for URLs and names);
- each name CloudFormation generates (a queue's, a table's, a function's) as its guide composes
  one ("Name type": MyStack-MyBucket-abcdefghijk1, the stack's name, the logical id and 12
  characters), cut at the longest the service allows.

Limits and their sources: the CloudFormation resource provider schemas AWS publishes (as cfn-lint
ships them: maxLength, pattern), and where a schema is silent the service's API model or
documentation (botocore), named at each entry of SUPPLEMENTS.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import botocore
import botocore.session
import pytest
import regex

from devstack import cfn
from devstack.resources import load_template
from tests.infra.test_template import PARAMETERS, Template, references, sam_transform

# --------------------------------------------------------------------------- the longest stack


def _partitions() -> list[dict[str, Any]]:
    endpoints = Path(botocore.__file__).parent / "data" / "endpoints.json"
    return json.loads(endpoints.read_text(encoding="utf-8"))["partitions"]


PARTITION = max((p["partition"] for p in _partitions()), key=len)
REGION = max((region for p in _partitions() for region in p["regions"]), key=len)
URL_SUFFIX = max((p["dnsSuffix"] for p in _partitions()), key=len)
ACCOUNT = "123456789012"
# 128 characters, upper and lower case: a name some service wants in lower case is caught too
STACK_NAME = ("Whasp-Agent-" * 11)[:127] + "Z"
STACK_ID = (
    f"arn:{PARTITION}:cloudformation:{REGION}:{ACCOUNT}:stack/{STACK_NAME}/"
    "0123abcd-4567-89ef-0123-456789abcdef"
)
# Lambda: "Lambda was unable to configure your environment variables because the environment
# variables you have provided exceeded the 4KB limit. String measured: {...}", the variables
# as compact JSON; quota L-6581F036, "Environment variable size", 4 KB, not adjustable
ENVIRONMENT_LIMIT = 4096
# characters 4, 3, 2 and 1 bytes wide in UTF-8: a free text is filled with the widest its
# AllowedPattern takes
WIDTHS = ("\U0001d11e", "\u4e2d", "\u00e9", "a")

BOTOCORE = botocore.session.get_session()


def _api_limit(service: str, shape: str) -> tuple[int, str | None]:
    """A name's longest length and pattern, as the service's API model in botocore has them (an
    API's pattern matches the whole value; a schema's, JSON Schema's way, anywhere in it)."""
    metadata = BOTOCORE.get_service_model(service).shape_for(shape).metadata
    pattern = metadata.get("pattern")
    return int(metadata["max"]), None if pattern is None else f"^(?:{pattern})$"


# Names CloudFormation generates where the template gives none: <stack>-<logical id>-<12>, cut at
# what the service takes (its API model in botocore, or the documentation quoted)
GENERATED = {
    # CreateFunction: "If you specify only the function name, it is limited to 64 characters"
    "AWS::Lambda::Function": 64,
    "AWS::SQS::Queue": 80,  # CreateQueue: "A queue name can have up to 80 characters"
    "AWS::DynamoDB::Table": _api_limit("dynamodb", "TableName")[0],  # 255
    "AWS::S3::Bucket": 63,  # the provider schema's BucketName maxLength
    "AWS::IAM::Role": _api_limit("iam", "roleNameType")[0],  # 64
    "AWS::SNS::Topic": 256,  # the provider schema's TopicName maxLength
    "AWS::Scheduler::ScheduleGroup": _api_limit("scheduler", "ScheduleGroupName")[0],  # 64
    "AWS::Logs::LogGroup": _api_limit("logs", "LogGroupName")[0],  # 512
    "AWS::Cognito::UserPool": _api_limit("cognito-idp", "UserPoolIdType")[0],  # its id: 55
    "AWS::Cognito::UserPoolClient": _api_limit("cognito-idp", "ClientIdType")[0],  # its id: 128
}
# API Gateway's ids are 10 characters (every execute-api host name shows one)
API_ID_LENGTH = 10

# Where a resource provider schema has no limit for a name the template builds: the service's
SUPPLEMENTS: dict[tuple[str, str], tuple[int, str | None, str]] = {
    ("AWS::ApiGatewayV2::Api", "Name"): (
        128,
        None,
        "API Gateway V2 CreateApi: Name is a StringWithLengthBetween1And128 (botocore)",
    ),
    ("AWS::ApiGatewayV2::Authorizer", "Name"): (
        128,
        None,
        "API Gateway V2 CreateAuthorizer: Name is a StringWithLengthBetween1And128 (botocore)",
    ),
    ("AWS::CloudWatch::Dashboard", "DashboardName"): (
        255,
        r"^[A-Za-z0-9_-]+$",
        'CloudWatch PutDashboard: "The maximum length is 255, and valid characters are A-Z, '
        'a-z, 0-9, "-", and "_""',
    ),
    ("AWS::Cognito::UserPoolDomain", "Domain"): (
        *_api_limit("cognito-idp", "DomainType"),
        "Cognito CreateUserPoolDomain: DomainType (botocore), lower case",
    ),
    ("AWS::SNS::Topic", "DisplayName"): (
        100,
        None,
        'the provider schema\'s description: "The display name must be maximum 100 characters"',
    ),
    ("AWS::Events::EventBus", "Name"): (
        *_api_limit("events", "EventBusName"),
        "EventBridge CreateEventBus: EventBusName (botocore)",
    ),
}
# SSM's PutParameter (botocore's documentation of Name): "The maximum length for a parameter name,
# including the full length of the parameter ARN, is 1011 characters", "can't be prefixed with
# "aws" or "ssm" (case-insensitive)", "only the following symbols and letters: a-zA-Z0-9_.-" and
# "/", "Parameter hierarchies are limited to a maximum depth of fifteen levels"
SSM_ARN_LIMIT = 1011
SSM_NAME = regex.compile(r"(?!(?i:aws|ssm))[a-zA-Z0-9_.-]+(/[a-zA-Z0-9_.-]+)*")
SSM_LEVELS = 15


# --------------------------------------------------------------------------- the provider schemas


@cache
def _schemas() -> dict[str, str]:
    return json.loads((_schema_dir() / "providers" / "us-east-1.json").read_text("utf-8"))


def _schema_dir() -> Path:
    import cfnlint

    return Path(cfnlint.__file__).parent / "data" / "schemas"


@cache
def schema(resource_type: str) -> dict[str, Any]:
    """The CloudFormation registry's schema of a resource type, as cfn-lint ships it."""
    digest = _schemas()[resource_type]
    return json.loads((_schema_dir() / "resources" / f"{digest}.json").read_text("utf-8"))


def limit_of(resource_type: str, prop: str) -> tuple[int | None, str | None, str]:
    """(longest, pattern, source) of a top-level string property; the schema first."""
    if (resource_type, prop) in SUPPLEMENTS:
        return SUPPLEMENTS[(resource_type, prop)]
    spec = schema(resource_type).get("properties", {}).get(prop, {})
    return (
        spec.get("maxLength"),
        spec.get("pattern"),
        f"the CloudFormation resource provider schema of {resource_type}",
    )


# --------------------------------------------------------------------------- the longest values


# Values a pattern constrains, at their longest (each checked against its parameter below)
def longest_patterned(name: str, length: int) -> str | None:
    """The longest legal value of a parameter whose AllowedPattern restricts its characters."""
    explicit = {
        "WhaspApiUrl": lambda n: "https://" + "w" * (n - 8),
        "MetaGraphUrl": lambda n: "https://" + "g" * (n - 8),
        "OpenAIBaseUrl": lambda n: "https://" + "o" * (n - 8),
        "TranscriptionBaseUrl": lambda n: "https://" + "t" * (n - 8),
        "OpenAIModel": lambda n: "m" * n,
        "TranscriptionModel": lambda n: "t" * n,
        "BedrockModel": lambda n: "us.openai." + "b" * (n - 10),
        "TimeZone": lambda n: "Z" * n,
        "ToolHosts": lambda n: "h" * n,
        "SecretsPrefix": lambda n: "P" * n,
        "SystemPromptFile": lambda n: "p" * (n - 3) + ".md",
        "ToolsFile": lambda n: "t" * (n - 5) + ".json",
        "RepliesFile": lambda n: "r" * (n - 5) + ".toml",
        "ArchiveBucket": lambda n: "a" * n,
        "FollowUpTemplate": lambda n: "f" * n,
        "FollowUpTemplateLanguage": lambda n: "fil_PH",
        "AgentId": lambda n: "A" * n,
    }.get(name)
    return explicit(length) if explicit else None


def widest(pattern: str | None, length: int) -> str | None:
    """`length` characters as wide as `pattern` allows (any, without a pattern)."""
    for character in WIDTHS:
        if pattern is None or regex.fullmatch(pattern, character * length):
            return character * length
    return None


def longest_parameters(template: Template) -> dict[str, str]:
    """Every parameter at its longest legal value (see the module's docstring)."""
    values = {}
    for name, spec in template["Parameters"].items():
        if "AllowedValues" in spec:
            values[name] = max((cfn.as_text(v) for v in spec["AllowedValues"]), key=len)
        elif spec["Type"] == "Number":
            bounds = [spec.get("MaxValue"), spec.get("MinValue")]
            values[name] = max((str(b) for b in bounds if b is not None), key=len, default="")
        elif spec["Type"] == "String":
            length = spec.get("MaxLength")
            if length is None:
                continue  # unbounded: test_every_string_parameter_a_function_reads_is_bounded
            pattern = spec.get("AllowedPattern")
            value = longest_patterned(name, int(length)) or widest(pattern, int(length))
            if value is not None:
                values[name] = value
    return values


# --------------------------------------------------------------------------- the resolver


def _name_property(resource: dict[str, Any]) -> str | None:
    """The property that names a resource of this type, when the template sets it."""
    names = {
        "AWS::Events::EventBus": "Name",
        "AWS::Scheduler::ScheduleGroup": "Name",
        "AWS::S3::Bucket": "BucketName",
        "AWS::Logs::LogGroup": "LogGroupName",
        "AWS::Cognito::UserPoolDomain": "Domain",
        "AWS::SQS::Queue": "QueueName",
        "AWS::DynamoDB::Table": "TableName",
        "AWS::Lambda::Function": "FunctionName",
        "AWS::IAM::Role": "RoleName",
        "AWS::SNS::Topic": "TopicName",
    }
    prop = names.get(resource["Type"])
    return prop if prop and prop in (resource.get("Properties") or {}) else None


def _arns(kind: str, logical_id: str, name: str) -> dict[str, str]:
    """What Ref and Fn::GetAtt give for a resource of this type named `name`."""
    region = f"{PARTITION}:{{service}}:{REGION}:{ACCOUNT}"
    arn = "arn:" + region
    if kind == "AWS::Lambda::Function":
        return {"Ref": name, "Arn": f"{arn.format(service='lambda')}:function:{name}"}
    if kind == "AWS::SQS::Queue":
        return {
            "Ref": f"https://sqs.{REGION}.{URL_SUFFIX}/{ACCOUNT}/{name}",
            "Arn": f"{arn.format(service='sqs')}:{name}",
            "QueueName": name,
        }
    if kind == "AWS::DynamoDB::Table":
        table = f"{arn.format(service='dynamodb')}:table/{name}"
        return {"Ref": name, "Arn": table, "StreamArn": f"{table}/stream/2026-12-04T00:00:00.000"}
    if kind == "AWS::S3::Bucket":
        return {"Ref": name, "Arn": f"arn:{PARTITION}:s3:::{name}"}
    if kind == "AWS::IAM::Role":
        return {"Ref": name, "Arn": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}"}
    if kind == "AWS::Events::EventBus":
        return {"Ref": name, "Arn": f"{arn.format(service='events')}:event-bus/{name}"}
    if kind == "AWS::Scheduler::ScheduleGroup":
        return {"Ref": name, "Arn": f"{arn.format(service='scheduler')}:schedule-group/{name}"}
    if kind == "AWS::Logs::LogGroup":
        return {"Ref": name, "Arn": f"{arn.format(service='logs')}:log-group:{name}:*"}
    if kind == "AWS::SNS::Topic":
        topic = f"{arn.format(service='sns')}:{name}"
        return {"Ref": topic, "TopicArn": topic, "TopicName": name}
    if kind == "AWS::SecretsManager::Secret":
        # Secrets Manager's guide ("Create an AWS Secrets Manager secret with CloudFormation"):
        # a secret without a Name is named <logical id>-<12 characters>; its ARN adds -<6>
        secret = f"{arn.format(service='secretsmanager')}:secret:{logical_id}-{'s' * 12}-{'x' * 6}"
        return {"Ref": secret, "Id": secret}
    if kind == "AWS::Cognito::UserPool":
        # an id is <Region>_<letters and digits>, at most 55 characters (UserPoolIdType)
        pool = f"{REGION}_{'P' * (GENERATED[kind] - len(REGION) - 1)}"
        return {"Ref": pool, "Arn": f"{arn.format(service='cognito-idp')}:userpool/{pool}"}
    if kind == "AWS::Cognito::UserPoolClient":
        return {"Ref": "c" * GENERATED[kind]}
    if kind == "AWS::ApiGatewayV2::Api":
        return {"Ref": "a" * API_ID_LENGTH, "ApiEndpoint": f"https://{'a' * 10}.example"}
    # anything else (an API's parts, an alias ...): an id, as long as API Gateway's
    return {"Ref": "i" * API_ID_LENGTH, "Arn": f"{arn.format(service='x')}:{'i' * 10}"}


class LongestStack(cfn.Resolver):
    """devstack's resolver, where an attribute no test models (a version's number, a stage's
    id) is an id as long as API Gateway's."""

    def _get_att(self, logical_id: str, attribute: str) -> str:
        unknown = "9" * 10 if attribute == "Version" else "i" * API_ID_LENGTH
        return self.attributes.get((logical_id, attribute), unknown)


def resolver(cfn_template: Template, parameters: dict[str, str]) -> cfn.Resolver:
    """The template's intrinsics as CloudFormation resolves them in the longest stack."""
    values = cfn.parameter_values(cfn_template, parameters)
    resolved = LongestStack(cfn_template, values)
    resolved.pseudo.update(
        {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": URL_SUFFIX,
            "AWS::StackName": STACK_NAME,
            "AWS::StackId": STACK_ID,
        }
    )
    named = []
    for logical_id, resource in cfn_template["Resources"].items():
        kind = resource["Type"]
        if _name_property(resource):
            named.append(logical_id)
            continue
        composed = f"{STACK_NAME}-{logical_id}-{'g' * 12}"
        _bind(resolved, logical_id, _arns(kind, logical_id, composed[: GENERATED.get(kind, 0)]))
    # names the template builds (from parameters, the stack's name and id): resolved now
    for logical_id in named:
        resource = cfn_template["Resources"][logical_id]
        name = cfn.as_text(resolved.resolve(resource["Properties"][_name_property(resource)]))
        _bind(resolved, logical_id, _arns(resource["Type"], logical_id, name))
    return resolved


def _bind(resolved: cfn.Resolver, logical_id: str, values: dict[str, str]) -> None:
    for attribute, value in values.items():
        if attribute == "Ref":
            resolved.refs[logical_id] = value
        else:
            resolved.attributes[(logical_id, attribute)] = value


# --------------------------------------------------------------------------- shapes


@pytest.fixture(scope="module")
def template() -> Template:
    return load_template()


@pytest.fixture(scope="module")
def transformed(sam_template: Template) -> Template:
    """As AWS sees it: the functions' environments with the Globals merged in."""
    return sam_transform(sam_template, PARAMETERS)


def functions(cfn_template: Template) -> dict[str, dict[str, Any]]:
    return {
        logical_id: resource
        for logical_id, resource in cfn_template["Resources"].items()
        if resource["Type"] == "AWS::Lambda::Function"
    }


def _conditions_in(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if "Fn::If" in node:
            found.add(node["Fn::If"][0])
        if "Condition" in node and isinstance(node["Condition"], str):
            found.add(node["Condition"])
        for value in node.values():
            found |= _conditions_in(value)
    elif isinstance(node, list):
        for value in node:
            found |= _conditions_in(value)
    return found


def _parameters_in(template: Template, condition: str) -> set[str]:
    """The parameters a condition reads, through the conditions it names."""
    node = template["Conditions"][condition]
    names = references(node) & set(template["Parameters"])
    for inner in _conditions_in(node):
        names |= _parameters_in(template, inner)
    return names


def environment_shapes(cfn_template: Template) -> Iterator[dict[str, str]]:
    """Every combination of the parameters that decide which variables a function gets (its
    conditions: Provider, ModelProvider, FollowUps, OperatorConsole, ArchiveBucket, tools,
    transcription...), each parameter set or empty, and every other at its longest."""
    longest = longest_parameters(cfn_template)
    deciding: set[str] = set()
    for function in functions(cfn_template).values():
        for condition in _conditions_in(function.get("Properties", {}).get("Environment", {})):
            deciding |= _parameters_in(cfn_template, condition)
        if "Condition" in function:
            deciding |= _parameters_in(cfn_template, function["Condition"])
    choices = []
    for name in sorted(deciding):
        spec = cfn_template["Parameters"][name]
        if "AllowedValues" in spec:
            choices.append([(name, cfn.as_text(v)) for v in spec["AllowedValues"]])
        else:
            choices.append([(name, ""), (name, longest[name])])
    for combination in itertools.product(*choices):
        yield {**longest, **dict(combination)}


def measured(environment: dict[str, str]) -> int:
    """The size Lambda checks: the variables as compact JSON, in UTF-8 bytes."""
    text = json.dumps(environment, separators=(",", ":"), ensure_ascii=False)
    return len(text.encode("utf-8"))


def environments(cfn_template: Template, parameters: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each function this shape deploys, and its environment as Lambda receives it."""
    resolved = resolver(cfn_template, parameters)
    found = {}
    for logical_id, function in functions(cfn_template).items():
        if "Condition" in function and not resolved.condition(function["Condition"]):
            continue
        variables = function["Properties"].get("Environment", {}).get("Variables", {})
        values = resolved.resolve(variables)
        found[logical_id] = {name: cfn.as_text(value) for name, value in values.items()}
    return found


# =========================================================================== environments


def test_every_string_parameter_a_function_reads_is_bounded(template: Template) -> None:
    # given every parameter that reaches a function's environment
    reaching = references(template["Globals"]) & set(template["Parameters"])
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            variables = (resource.get("Properties") or {}).get("Environment", {})
            reaching |= references(variables) & set(template["Parameters"])
    # then each has a longest value: a MaxLength, a MaxValue, a list of values or a pattern
    # whose longest match is known
    unbounded = []
    for name in sorted(reaching):
        spec = template["Parameters"][name]
        if "AllowedValues" in spec:
            continue
        if spec["Type"] == "Number" and "MaxValue" in spec:
            continue
        if spec["Type"] == "String" and spec.get("MaxLength"):
            continue
        unbounded.append(name)
    assert unbounded == [], "give these a MaxLength (String) or MaxValue (Number)"


def test_each_longest_value_is_legal_and_as_long_as_allowed(template: Template) -> None:
    # the longest values above cannot drift from the parameters they stand for
    for name, value in longest_parameters(template).items():
        spec = template["Parameters"][name]
        if "AllowedValues" in spec or spec["Type"] != "String":
            continue
        pattern = spec.get("AllowedPattern")
        assert pattern is None or regex.fullmatch(pattern, value), f"{name}: {value!r}"
        # as long as the parameter allows, in characters
        assert len(value) == int(spec["MaxLength"]), name
        # and where a value is written out (a URL, a file name), no wider character is legal
        if longest_patterned(name, len(value)) is not None:
            middle = len(value) // 2
            assert value.isascii(), name
            assert not regex.fullmatch(pattern, value[:middle] + "\u00e9" + value[middle + 1 :])
    # the language codes' pattern holds at most 6 characters (xxx_YY)
    language = template["Parameters"]["FollowUpTemplateLanguage"]
    assert not regex.fullmatch(language["AllowedPattern"], "abcd_EF")


def test_every_functions_environment_fits_4_kb_in_every_shape(transformed: Template) -> None:
    # given every shape of the stack (each combination of the parameters that add variables),
    # with every value at its longest, and (the fixture's second run) an operator's tool ARN
    # among the consumer's variables, as docs/tools.md adds it
    largest: dict[str, tuple[int, dict[str, str]]] = {}
    shapes = 0
    for parameters in environment_shapes(transformed):
        shapes += 1
        for function_id, environment in environments(transformed, parameters).items():
            size = measured(environment)
            if size > largest.get(function_id, (0, {}))[0]:
                largest[function_id] = (size, parameters)
    # then no function's variables take more than Lambda's 4 KB
    assert shapes >= 2**8, "the shapes must cover the conditions that add variables"
    sizes = {function_id: size for function_id, (size, _) in largest.items()}
    assert max(sizes.values()) <= ENVIRONMENT_LIMIT, sizes
    assert {"ConsumerFunction", "WebhookFunction", "CompactorFunction", "AdminFunction"} <= set(
        largest
    )


def test_a_prompt_in_the_environment_would_be_caught(transformed: Template) -> None:
    # given the consumer with its persona put back into the environment (20 KB), as before
    template = copy.deepcopy(transformed)
    variables = template["Resources"]["ConsumerFunction"]["Properties"]["Environment"]
    variables["Variables"]["SYSTEM_PROMPT"] = "A warm coach. " * 1500
    parameters = next(environment_shapes(template))
    # then the measure finds it over Lambda's limit
    assert measured(environments(template, parameters)["ConsumerFunction"]) > ENVIRONMENT_LIMIT


# =========================================================================== names


@pytest.fixture(scope="module")
def all_on(sam_template: Template) -> tuple[Template, dict[str, str]]:
    """The stack with every optional part on and every value at its longest."""
    template = load_template()
    parameters = {
        **longest_parameters(template),
        "FollowUps": "true",
        "OperatorConsole": "true",
        "ExampleBookingTool": "true",
        "ToolFunctionArns": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:orders",
    }
    return sam_transform(sam_template, parameters), parameters


def built_names(cfn_template: Template, parameters: dict[str, str]) -> list[tuple[str, str, str]]:
    """(logical id, property, resolved value) of every string a deployed resource sets at its
    top level where the service limits it (a name above all, a domain, an ARN, a description),
    and the HTTP APIs' names SAM takes from their OpenAPI body's title."""
    resolved = resolver(cfn_template, parameters)
    found = []
    for logical_id, resource in cfn_template["Resources"].items():
        if "Condition" in resource and not resolved.condition(resource["Condition"]):
            continue
        properties = resource.get("Properties") or {}
        for prop, value in properties.items():
            longest, pattern, _ = limit_of(resource["Type"], prop)
            if longest is None and pattern is None:
                continue
            text = resolved.resolve(value)
            if isinstance(text, str):
                found.append((logical_id, prop, text))
        title = properties.get("Body", {}).get("info", {}).get("title")
        if resource["Type"] == "AWS::ApiGatewayV2::Api" and title is not None:
            found.append((logical_id, "Name", cfn.as_text(resolved.resolve(title))))
    return found


def too_long(cfn_template: Template, names: list[tuple[str, str, str]]) -> list[str]:
    problems = []
    for logical_id, prop, value in names:
        kind = cfn_template["Resources"][logical_id]["Type"]
        longest, pattern, source = limit_of(kind, prop)
        if longest is not None and len(value) > longest:
            problems.append(f"{logical_id}.{prop}: {len(value)} > {longest} ({source})")
        if pattern is not None and not regex.search(pattern, value):
            problems.append(f"{logical_id}.{prop}: {value!r} is not {pattern} ({source})")
    return problems


def test_every_name_the_template_builds_fits_for_a_128_character_stack_name(all_on) -> None:
    # given the stack with everything on, a 128-character name and the longest values
    cfn_template, parameters = all_on
    names = built_names(cfn_template, parameters)
    # then every name fits its service's length and characters
    assert too_long(cfn_template, names) == []
    # and the names the template builds are among those checked
    checked = {(cfn_template["Resources"][lid]["Type"], prop) for lid, prop, _ in names}
    assert {
        ("AWS::Cognito::UserPool", "UserPoolName"),
        ("AWS::Cognito::UserPoolDomain", "Domain"),
        ("AWS::ApiGatewayV2::Api", "Name"),
        ("AWS::Events::EventBus", "Name"),
        ("AWS::CloudWatch::Dashboard", "DashboardName"),
        ("AWS::Logs::LogGroup", "LogGroupName"),
        ("AWS::S3::Bucket", "BucketName"),
        ("AWS::IAM::Policy", "PolicyName"),
    } <= checked


def test_a_name_built_from_the_stack_name_is_caught(all_on) -> None:
    # given the schedule group named as it was (the stack's name and a suffix)
    cfn_template, parameters = all_on
    template = copy.deepcopy(cfn_template)
    group = template["Resources"]["FollowUpScheduleGroup"]
    group.setdefault("Properties", {})["Name"] = {"Fn::Sub": "${AWS::StackName}-follow-ups"}
    # then the check names it: 139 characters where Scheduler takes 64
    problems = too_long(template, built_names(template, parameters))
    assert [p for p in problems if p.startswith("FollowUpScheduleGroup.Name: 139 > 64")]


@pytest.mark.parametrize("prefix", ["longest", "deepest"])
def test_every_ssm_parameter_name_the_functions_read_fits(all_on, prefix: str) -> None:
    # given every SecureString the functions read, under the longest SecretsPrefix, or the
    # deepest the template takes (14 levels; the secret's name is the 15th)
    cfn_template, parameters = all_on
    pattern = cfn_template["Parameters"]["SecretsPrefix"]["AllowedPattern"]
    if prefix == "deepest":
        parameters = {**parameters, "SecretsPrefix": "/".join("p" * 14)}
        assert not regex.fullmatch(pattern, "/".join("p" * 15))
    assert regex.fullmatch(pattern, parameters["SecretsPrefix"])
    names = set()
    for provider, model in itertools.product(("whasp", "meta"), ("openai", "bedrock")):
        shape = {**parameters, "Provider": provider, "ModelProvider": model}
        for environment in environments(cfn_template, shape).values():
            names |= {v for k, v in environment.items() if k.endswith("_PARAM")}
    assert len(names) == 7, names
    for name in names:
        arn = f"arn:{PARTITION}:ssm:{REGION}:{ACCOUNT}:parameter{name}"
        # then each is a name SSM accepts: characters, prefix, depth, and length with its ARN
        assert SSM_NAME.fullmatch(name.removeprefix("/")), name
        assert name.count("/") <= SSM_LEVELS, name
        assert len(arn) <= SSM_ARN_LIMIT, (len(arn), name)
