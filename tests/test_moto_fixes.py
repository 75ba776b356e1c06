"""devstack.moto_fixes: each patch corrects a moto behaviour that AWS does not have.

For each one, two tests on the same scenario (`probe`): moto as released still behaves that way
(run in a fresh interpreter with no patch applied: when that test fails, moto fixed it upstream
and the patch can go), and with the patches applied (this process's moto server) it behaves as
AWS does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

ROOT = Path(__file__).resolve().parent.parent
ACCOUNT, REGION = "123456789012", "us-east-1"


def probe() -> dict[str, Any]:
    """Each moto behaviour a patch corrects, observed through boto3 and moto's own state."""
    from moto.dynamodb.models import dynamodb_backends
    from moto.sqs.models import sqs_backends

    name = f"probe-{uuid.uuid4().hex[:8]}"
    seen: dict[str, Any] = {}

    # make_dynamodb_thread_safe: a cancelled transaction puts back a deep copy of every table,
    # taken before it started (writes made meanwhile by other clients are lost with it)
    dynamodb = boto3.client("dynamodb")
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "a"}})
    tables = dynamodb_backends[ACCOUNT][REGION].tables
    before = tables[name]
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException):
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": name,
                        "Item": {"pk": {"S": "a"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            ]
        )
    seen["cancelled_transaction_restores_a_copy"] = tables[name] is not before

    # make_sqs_faithful (_in_group_order): two messages of a FIFO group whose visibility ran out
    # together come back second first
    sqs = boto3.client("sqs")
    url = sqs.create_queue(
        QueueName=f"{name}.fifo",
        Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"},
    )["QueueUrl"]
    for body in ("first", "second"):
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="person")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
    queue = sqs_backends[ACCOUNT][REGION].queues[f"{name}.fifo"]
    for message in queue._messages:  # (moto's `messages` lists only the visible ones)
        message.visible_at = 0  # the visibility timeout ran out (no ChangeMessageVisibility)
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1).get("Messages", [])
    seen["group_comes_back_with"] = [m["Body"] for m in again]

    # make_sqs_faithful (_change_message_visibility): the 12-hour visibility limit counts from
    # the message's sending, not from its latest receive
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="sent 13 hours ago")
    for message in sqs_backends[ACCOUNT][REGION].queues[name]._messages:
        message.sent_timestamp -= 13 * 3600 * 1000
    received = sqs.receive_message(QueueUrl=url)["Messages"][0]
    try:
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=received["ReceiptHandle"], VisibilityTimeout=60
        )
        seen["visibility_of_an_old_message_refused"] = False
    except sqs.exceptions.ClientError:
        seen["visibility_of_an_old_message_refused"] = True

    # make_sns_faithful: an email subscription nobody confirmed is listed as confirmed
    sns = boto3.client("sns")
    topic = sns.create_topic(Name=name)["TopicArn"]
    queue_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{name}"
    sns.subscribe(TopicArn=topic, Protocol="email", Endpoint="ops@example.com")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    listed = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
    seen["subscriptions_listed"] = sorted(
        (s["Protocol"], s["SubscriptionArn"].startswith(topic)) for s in listed
    )
    return seen


_UNPATCHED = """
import json, os
from moto import mock_aws
from tests.test_moto_fixes import probe
with mock_aws():
    print(json.dumps(probe()))
"""


@pytest.fixture(scope="module")
def released_moto() -> dict[str, Any]:
    """The probe on moto as released: a fresh interpreter, in-process moto, no patch."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(AWS_DEFAULT_REGION=REGION, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="x")
    result = subprocess.run(  # noqa: S603 (our interpreter, our code)
        [sys.executable, "-c", _UNPATCHED],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def patched_moto(moto_server) -> dict[str, Any]:
    return probe()


pytestmark = pytest.mark.xdist_group("moto-fixes")  # one subprocess for the module


def test_moto_still_restores_a_copy_of_the_table_after_a_cancelled_transaction(released_moto):
    # when this fails, moto fixed it: delete make_dynamodb_thread_safe's _transact_write_items
    assert released_moto["cancelled_transaction_restores_a_copy"] is True


def test_patched_a_cancelled_transaction_leaves_the_table_in_place(patched_moto):
    assert patched_moto["cancelled_transaction_restores_a_copy"] is False


def test_moto_still_redelivers_a_fifo_group_second_first(released_moto):
    # when this fails, moto fixed it: delete make_sqs_faithful's _in_group_order
    assert released_moto["group_comes_back_with"] == ["second"]


def test_patched_a_fifo_group_comes_back_in_order(patched_moto):
    assert patched_moto["group_comes_back_with"] == ["first"]


def test_moto_still_counts_the_visibility_limit_from_sending(released_moto):
    # when this fails, moto fixed it: delete make_sqs_faithful's _change_message_visibility
    assert released_moto["visibility_of_an_old_message_refused"] is True


def test_patched_the_visibility_limit_counts_from_the_latest_receive(patched_moto):
    assert patched_moto["visibility_of_an_old_message_refused"] is False


def test_moto_still_confirms_an_email_subscription_at_once(released_moto):
    # when this fails, moto fixed it: delete make_sns_faithful
    assert released_moto["subscriptions_listed"] == [["email", True], ["sqs", True]]


def test_patched_an_email_subscription_waits_for_its_owner_and_a_queue_does_not(patched_moto):
    # (a queue of the topic's own account is confirmed at once, as in SNS)
    assert patched_moto["subscriptions_listed"] == [("email", False), ("sqs", True)]


@pytest.mark.parametrize(
    "expression",
    ["SET a = :v SET b = :v", "REMOVE a REMOVE b", "ADD n :one ADD m :one", "SET a = :v, b = :v"],
)
def test_patched_an_update_with_a_section_twice_is_still_refused_as_dynamodb_refuses_it(
    moto_server, expression
):
    # make_dynamodb_faster checks the sections once, on the whole expression: a section used
    # twice is still a ValidationException ("The "SET" section can only be used once in an
    # update expression"), and one SET with two actions is still fine
    dynamodb = boto3.client("dynamodb")
    name = f"sections-{uuid.uuid4().hex[:8]}"
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    values = {":v": {"S": "x"}, ":one": {"N": "1"}}
    update = {
        "TableName": name,
        "Key": {"pk": {"S": "a"}},
        "UpdateExpression": expression,
    }
    if ":" in expression:
        update["ExpressionAttributeValues"] = {k: v for k, v in values.items() if k in expression}
    if expression.count("SET") + expression.count("REMOVE") + expression.count("ADD") == 1:
        dynamodb.update_item(**update)
        item = dynamodb.get_item(TableName=name, Key={"pk": {"S": "a"}})["Item"]
        assert item == {"pk": {"S": "a"}, "a": {"S": "x"}, "b": {"S": "x"}}
        return
    with pytest.raises(dynamodb.exceptions.ClientError, match="can only be used once"):
        dynamodb.update_item(**update)
