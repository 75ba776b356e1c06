"""Create the memory table and the queues from template.yaml itself, on moto or any endpoint.

Key schema, stream, TTL and queue attributes are read from the template's resources, so the
local stack and the tests cannot drift from what `sam deploy` creates: change a resource in
template.yaml and this creates the changed resource, with no second place to edit.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3

from devstack import cfn

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "template.yaml"

# The queue properties the template may set; CloudFormation names them as SQS's attributes
_SQS_ATTRIBUTES = (
    "FifoQueue",
    "ContentBasedDeduplication",
    "DeduplicationScope",
    "FifoThroughputLimit",
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "DelaySeconds",
    "ReceiveMessageWaitTimeSeconds",
    "SqsManagedSseEnabled",
)


def load_template(path: Path = TEMPLATE) -> dict[str, Any]:
    """Parse template.yaml, CloudFormation short tags (!Ref, !GetAtt, !Sub ...) included.

    Each call returns a copy the caller may change. The parse is cached per file and
    modification time: the pure-Python YAML parser takes about 0.2 s, and every test's
    resources start from the template."""
    stat = path.stat()
    return copy.deepcopy(_parsed(str(path), stat.st_mtime_ns, stat.st_size))


def parameter_default(name: str, path: Path = TEMPLATE) -> str:
    """A template Parameter's Default, as text: the one place the stack's defaults are written
    (the agent id the local stack and the tools use unless told otherwise, say)."""
    stat = path.stat()
    parameters = _parsed(str(path), stat.st_mtime_ns, stat.st_size)["Parameters"]
    return str(parameters[name].get("Default", ""))


@functools.lru_cache(maxsize=4)
def _parsed(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    from samtranslator.yaml_helper import yaml_parse

    return yaml_parse(Path(path).read_text())


def resources_of_type(template: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {
        name: resource
        for name, resource in template["Resources"].items()
        if resource.get("Type") == kind
    }


@dataclass
class LocalResources:
    table_name: str
    stream_arn: str | None
    queue_urls: dict[str, str]  # logical id -> URL
    queue_arns: dict[str, str]


def create_table(
    template: dict[str, Any], name: str, *, client: Any = None, logical_id: str = "MemoryTable"
) -> str | None:
    """Create a DynamoDB table of the template (the memory table unless `logical_id` says
    another, the example tool's calendar); return its stream ARN (if any)."""
    client = client or _client("dynamodb")
    tables = resources_of_type(template, "AWS::DynamoDB::Table")
    table = tables[logical_id] if logical_id in tables else next(iter(tables.values()))
    props = table["Properties"]
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": props["KeySchema"],
        "AttributeDefinitions": _every_branch(props["AttributeDefinitions"]),
        "BillingMode": props.get("BillingMode", "PAY_PER_REQUEST"),
    }
    if props.get("GlobalSecondaryIndexes"):
        kwargs["GlobalSecondaryIndexes"] = _every_branch(props["GlobalSecondaryIndexes"])
    stream = props.get("StreamSpecification")
    if stream:
        kwargs["StreamSpecification"] = {
            "StreamEnabled": True,
            "StreamViewType": stream["StreamViewType"],
        }
    description = client.create_table(**kwargs)["TableDescription"]
    ttl = props.get("TimeToLiveSpecification")
    if ttl and ttl.get("Enabled"):
        client.update_time_to_live(
            TableName=name,
            TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
        )
    return description.get("LatestStreamArn")


def _every_branch(items: list[Any]) -> list[Any]:
    """A list whose items may be `!If [cond, item, !Ref AWS::NoValue]` (an index only some
    stacks have, OperatorConsole's RecentIndex): every such item. A local table has every index
    the template can give it; a sparse index no write fills costs nothing and changes nothing."""
    return [
        item["Fn::If"][1] if isinstance(item, dict) and "Fn::If" in item else item for item in items
    ]


def create_queues(
    template: dict[str, Any], prefix: str, *, client: Any = None
) -> tuple[dict, dict]:
    """Create every SQS queue of the template (dead-letter queues first); return url and arn
    maps keyed by logical id."""
    client = client or _client("sqs")
    queues = resources_of_type(template, "AWS::SQS::Queue")
    urls: dict[str, str] = {}
    arns: dict[str, str] = {}

    def create(logical_id: str) -> None:
        if logical_id in urls:
            return
        props = queues[logical_id].get("Properties", {})
        attributes = {name: cfn.as_text(props[name]) for name in _SQS_ATTRIBUTES if name in props}
        redrive = props.get("RedrivePolicy")
        if redrive:
            target = redrive["deadLetterTargetArn"]["Fn::GetAtt"][0]
            create(target)
            attributes["RedrivePolicy"] = json.dumps(
                {"deadLetterTargetArn": arns[target], "maxReceiveCount": redrive["maxReceiveCount"]}
            )
        name = f"{prefix}-{logical_id}" + (".fifo" if props.get("FifoQueue") else "")
        url = client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        urls[logical_id] = url
        # The ARN is the region, the account and the name; the URL (https://sqs.<region>.
        # amazonaws.com/<account>/<name>, moto's alike) holds the last two: no second request
        # (the tests create queues for every test). A wrong ARN fails the redrive policy above.
        account, queue_name = urlsplit(url).path.strip("/").split("/")[-2:]
        arns[logical_id] = f"arn:aws:sqs:{client.meta.region_name}:{account}:{queue_name}"

    for logical_id in queues:
        create(logical_id)
    return urls, arns


def _client(service: str) -> Any:
    """One client per service and endpoint, reused: creating a boto3 client costs ~40 ms, and
    the tests create resources for every test."""
    return _cached_client(service, os.environ.get("AWS_ENDPOINT_URL"))


@functools.lru_cache(maxsize=16)
def _cached_client(service: str, _endpoint: str | None) -> Any:
    return boto3.client(service)  # type: ignore[call-overload]  # boto3-stubs: a literal name


def max_receive_count(template: dict[str, Any], queue: str = "EventQueue") -> int:
    return int(template["Resources"][queue]["Properties"]["RedrivePolicy"]["maxReceiveCount"])


def create_all(
    prefix: str, template: dict[str, Any] | None = None, *, sqs: Any = None
) -> LocalResources:
    """The template's memory table and queues; `sqs`: what creates the queues (by default a
    boto3 client of AWS_ENDPOINT_URL)."""
    template = template or load_template()
    stream_arn = create_table(template, f"{prefix}-memory")
    urls, arns = create_queues(template, prefix, client=sqs)
    return LocalResources(f"{prefix}-memory", stream_arn, urls, arns)
