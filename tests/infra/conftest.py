"""The template as these tests read it: as written, and after the SAM transform (as AWS sees it);
each also with an operator's own tool function added as docs/tools.md says to (its function,
role, log group and logs policy, its ARN passed to the consumer, and the consumer's grant to
invoke it), so the checks hold for a stack that carries a tool, not only for ours."""

from __future__ import annotations

import copy

import pytest
from samtranslator.yaml_helper import yaml_parse

from devstack.resources import load_template
from tests.infra.test_template import PARAMETERS, TEMPLATE, Template, sam_transform

# an operator's tool, as docs/tools.md ("A function of this stack") writes it
TOOL_RESOURCES = yaml_parse("""
LookupToolFunction:
  Type: AWS::Serverless::Function
  Properties:
    Description: An operator's tool - looks up an order.
    CodeUri: tools/lookup/
    Timeout: 10
    Role: !GetAtt LookupToolRole.Arn
LookupToolLogGroup:
  Type: AWS::Logs::LogGroup
  Properties:
    LogGroupName: !Sub /aws/lambda/${LookupToolFunction}
    RetentionInDays: !Ref LogRetentionDays
LookupToolRole:
  Type: AWS::IAM::Role
  Properties:
    Description: An operator's tool - its logs and traces.
    AssumeRolePolicyDocument:
      Version: "2012-10-17"
      Statement:
        - Effect: Allow
          Principal: { Service: lambda.amazonaws.com }
          Action: sts:AssumeRole
    Policies:
      - PolicyName: lookup-tool
        PolicyDocument:
          Version: "2012-10-17"
          Statement:
            - Sid: Tracing
              Effect: Allow
              Action: [xray:PutTraceSegments, xray:PutTelemetryRecords]
              Resource: "*"
LookupToolLogsPolicy:
  Type: AWS::IAM::Policy
  Properties:
    PolicyName: logs
    Roles: [!Ref LookupToolRole]
    PolicyDocument:
      Version: "2012-10-17"
      Statement:
        - Effect: Allow
          Action: [logs:CreateLogStream, logs:PutLogEvents]
          Resource: !GetAtt LookupToolLogGroup.Arn
ConsumerInvokesLookupTool:
  Type: AWS::IAM::Policy
  Properties:
    PolicyName: invoke-lookup-tool
    Roles: [!Ref ConsumerRole]
    PolicyDocument:
      Version: "2012-10-17"
      Statement:
        - Effect: Allow
          Action: lambda:InvokeFunction
          Resource: !GetAtt LookupToolFunction.Arn
""")


# the stack's own functions; any other is an operator's tool, held to a tool's rules
STACK_FUNCTIONS = frozenset(
    {"WebhookFunction", "ConsumerFunction", "CompactorFunction", "AdminFunction",
     "BookingToolFunction"}
)  # fmt: skip


def operator_tools(template: Template) -> set[str]:
    """The functions an operator added (as written or transformed): any but the stack's own."""
    kinds = ("AWS::Serverless::Function", "AWS::Lambda::Function")
    return {
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("Type") in kinds and logical_id not in STACK_FUNCTIONS
    }


# what with_a_tool gives the consumer: read by the operator's own tools file, not in this repo
OPERATOR_TOOL_VARIABLES = {"LOOKUP_TOOL_ARN"}


def with_a_tool(template: Template) -> Template:
    """A copy of the template with the operator's tool function added, and its ARN given to the
    consumer (the tools file then names it "${LOOKUP_TOOL_ARN}")."""
    added = copy.deepcopy(template)
    added["Resources"].update(copy.deepcopy(TOOL_RESOURCES))
    consumer = added["Resources"]["ConsumerFunction"]["Properties"]
    consumer["Environment"]["Variables"]["LOOKUP_TOOL_ARN"] = {
        "Fn::GetAtt": ["LookupToolFunction", "Arn"]
    }
    return added


@pytest.fixture(scope="module", params=["as written", "with an operator's tool"])
def sam_template(request: pytest.FixtureRequest) -> Template:
    template = load_template(TEMPLATE)  # parsed once a process: a parse is 0.15 s of CPU
    return template if request.param == "as written" else with_a_tool(template)


@pytest.fixture(scope="module")
def cfn(sam_template: Template) -> Template:
    return sam_transform(sam_template, PARAMETERS)
