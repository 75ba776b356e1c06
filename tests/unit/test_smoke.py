"""scripts/smoke.py's side of AWS: what it reads from CloudFormation and Lambda (botocore's
Stubber holds each client to the API's shapes, no request leaves), and which secrets a function
reads. The checks themselves run against the local stack: tests/stack/test_smoke.py."""

from __future__ import annotations

import importlib
from typing import Any

import boto3
from botocore.stub import Stubber

from devstack import cfn
from scripts.smoke import CloudFormationStack, Function, check_outputs, secrets_read

REGION = "eu-west-1"
TEMPLATE = """
Parameters:
  ArchiveBucket:
    Type: String
    Default: ""
Conditions:
  HasArchiveBucket: !Not [!Equals [!Ref ArchiveBucket, ""]]
Resources: {}
Outputs:
  WebhookUrl:
    Value: !Sub https://${HttpApi}.execute-api.${AWS::Region}.amazonaws.com/webhook
  TranscriptArchiveBucketName:
    Condition: HasArchiveBucket
    Value: !Ref TranscriptArchiveBucket
"""


class Session:
    """A boto3 session whose clients are stubbed."""

    region_name = REGION

    def __init__(self, **clients: Any):
        self.clients = clients

    def client(self, name: str) -> Any:
        return self.clients[name]


def stubbed(service: str) -> tuple[Any, Stubber]:
    client = boto3.client(
        service,
        region_name=REGION,
        aws_access_key_id="x",
        aws_secret_access_key="x",  # never sent: the Stubber answers
    )
    return client, Stubber(client)


def deployed_with(archive_bucket: str) -> tuple[dict, dict, dict]:
    """The stub stack's template, outputs and parameters, read through CloudFormationStack."""
    client, stub = stubbed("cloudformation")
    stub.add_response(
        "get_template",
        {"TemplateBody": TEMPLATE},
        {"StackName": "agent", "TemplateStage": "Original"},
    )
    stub.add_response(
        "describe_stacks",
        {
            "Stacks": [
                {
                    "StackName": "agent",
                    "CreationTime": "2026-12-01T09:00:00Z",
                    "StackStatus": "CREATE_COMPLETE",
                    "Parameters": [
                        {"ParameterKey": "ArchiveBucket", "ParameterValue": archive_bucket}
                    ],
                    "Outputs": [{"OutputKey": "WebhookUrl", "OutputValue": "https://x/webhook"}],
                }
            ]
        },
        {"StackName": "agent"},
    )
    with stub:
        stack = CloudFormationStack("agent", Session(cloudformation=client, **{"lambda": None}))
        template = stack.template()
        outputs, parameters = stack.description()
    stub.assert_no_pending_responses()
    return template, outputs, parameters


def test_an_output_is_expected_only_where_its_condition_holds_for_the_deployed_parameters():
    # given a stack deployed without an archive bucket, then one with, neither listing the
    # archive's output
    for bucket, expected in (
        ("", "pass  outputs: all 1 present"),
        ("kept-transcripts", "FAIL  outputs: missing: TranscriptArchiveBucketName"),
    ):
        template, outputs, parameters = deployed_with(bucket)
        # when the outputs are checked against the template (CloudFormation's short tags read)
        conditions = cfn.Resolver(template, parameters)
        # then the conditional output is missed only where its condition holds
        assert check_outputs(template, outputs, conditions).line() == expected


def test_a_functions_role_and_environment_come_from_lambda():
    # given a stack whose webhook is a Lambda function named by CloudFormation
    formation, formation_stub = stubbed("cloudformation")
    functions, functions_stub = stubbed("lambda")
    formation_stub.add_response(
        "list_stack_resources",
        {
            "StackResourceSummaries": [
                {
                    "LogicalResourceId": "WebhookFunction",
                    "PhysicalResourceId": "agent-WebhookFunction-AbC123",
                    "ResourceType": "AWS::Lambda::Function",
                    "LastUpdatedTimestamp": "2026-12-01T09:00:00Z",
                    "ResourceStatus": "CREATE_COMPLETE",
                }
            ]
        },
        {"StackName": "agent"},
    )
    role = "arn:aws:iam::111122223333:role/agent-WebhookRole-XyZ"
    functions_stub.add_response(
        "get_function_configuration",
        {"Role": role, "Environment": {"Variables": {"PROVIDER": "whasp"}}},
        {"FunctionName": "agent-WebhookFunction-AbC123"},
    )
    stack = CloudFormationStack("agent", Session(cloudformation=formation, **{"lambda": functions}))
    # when the smoke reads its resources and the function
    with formation_stub, functions_stub:
        physical = stack.resources()
        function = stack.function("WebhookFunction", physical["WebhookFunction"])
    # then it has the function's deployed role and environment
    assert function == Function("WebhookFunction", role, {"PROVIDER": "whasp"})


def test_a_meta_webhook_reads_metas_secrets_and_not_whasps():
    # given a Meta stack's webhook: the template declares whasp's parameter for it too
    environment = {
        "PROVIDER": "meta",
        "AGENT_ID": "coach",
        "QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/111122223333/agent-EventQueue.fifo",
        "PERSON_KEY_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:111122223333:secret:key-a1B2c3",
        "WEBHOOK_SECRET_PARAM": "/whasp-agent/webhook-secret",
        "META_APP_SECRET_PARAM": "/whasp-agent/meta-app-secret",
        "META_VERIFY_TOKEN_PARAM": "/whasp-agent/meta-verify-token",
    }
    # when the smoke asks which secrets it reads
    read = secrets_read(Function("WebhookFunction", "arn:aws:iam::1:role/r", environment))
    # then they are Meta's two and the person key, as its settings read them
    assert [(variable, store) for variable, store, _, _ in read] == [
        ("META_APP_SECRET_PARAM", "SSM parameter"),
        ("META_VERIFY_TOKEN_PARAM", "SSM parameter"),
        ("PERSON_KEY_SECRET_ARN", "secret"),
    ]


def test_every_function_that_reads_a_secret_has_its_settings_in_the_smoke():
    # given template.yaml's functions, and the variables that name a secret in each
    from devstack.resources import load_template
    from scripts.smoke import SETTINGS, STORES

    template = load_template()
    functions = {
        logical_id: (resource.get("Properties") or {}).get("Environment", {}).get("Variables", {})
        for logical_id, resource in template["Resources"].items()
        if resource["Type"] == cfn.FUNCTION
    }
    naming = {
        lid
        for lid, variables in functions.items()
        if any(v.endswith(tuple(STORES)) for v in variables)
    }
    # then the smoke knows each one's settings (which of those it reads), and each is there
    assert naming <= set(SETTINGS)
    for module, name in SETTINGS.values():
        assert hasattr(importlib.import_module(module), name)
