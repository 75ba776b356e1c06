"""A compaction that failed all its retries on the stream is retried later, from
CompactionFailureQueue, not left until the person writes again.

As on AWS: the stream's records (moto's, through the template's filter) fail in the compactor
handler as many times as the mapping's MaximumRetryAttempts allows; then Lambda's on-failure
record (where the batch was in the stream, never whose) goes to CompactionFailureQueue, built
from template.yaml with its redrive policy. The queue's event source mapping is
devstack.delivery.QueueDelivery, on moto's SQS clock: hours of backoff pass in seconds, and each
message still comes back exactly when its visibility says.
"""

from __future__ import annotations

import json
from itertools import pairwise
from typing import Any

import boto3
import pytest

from devstack.clock import SQS_CLOCK
from devstack.delivery import QueueDelivery, in_process
from devstack.lambda_harness import retried, sqs_message_record, stream_failure_record
from devstack.resources import load_template, max_receive_count
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function, seed_turns
from tests.integration.test_compactor import fold_reply, seqs, state, summary

HOUR = 3600.0
TEMPLATE = load_template()
STREAM = TEMPLATE["Resources"]["CompactorFunction"]["Properties"]["Events"]["Stream"]
MAXIMUM_RETRY_ATTEMPTS = int(STREAM["Properties"]["MaximumRetryAttempts"])


@pytest.fixture
def compactor(compactor_env, monkeypatch) -> Any:
    # one attempt per fold call: each failed compaction is one request to the model
    return load_function("compactor", {**compactor_env, "OPENAI_MAX_RETRIES": "0"}, monkeypatch)


@pytest.fixture
def failure_queue(compactor, resources, lambda_context) -> QueueDelivery:
    """CompactionFailureQueue's event source mapping: the template's batch size, to the
    compactor handler."""
    return QueueDelivery(
        sqs=boto3.client("sqs"),
        queue_url=resources.queue_urls["CompactionFailureQueue"],
        queue_arn=resources.queue_arns["CompactionFailureQueue"],
        invoke=in_process(compactor.handler, lambda_context),
        batch_size=1,
        concurrency=1,
        idle_jump=True,
    )


def fails_on_the_stream(compactor, tap, resources, lambda_context) -> list[dict[str, Any]]:
    """The stream's mapping with the model down: the batch fails its first attempt and every
    retry, then Lambda sends its on-failure record to CompactionFailureQueue."""
    records = tap.matching()
    assert records, "the flagged state records pass the template's filter"
    for _ in range(1 + MAXIMUM_RETRY_ATTEMPTS):
        assert retried(compactor.handler, {"Records": records}, lambda_context)
    failure = stream_failure_record(
        records,
        shard_id=tap.shard_of(records[0]["dynamodb"]["SequenceNumber"]),
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:compactor:live",
        attempts=1 + MAXIMUM_RETRY_ATTEMPTS,
    )
    boto3.client("sqs").send_message(
        QueueUrl=resources.queue_urls["CompactionFailureQueue"], MessageBody=json.dumps(failure)
    )
    return records


def given_up(resources) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs")
    url = resources.queue_urls["CompactionRetryDeadLetterQueue"]
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])


def test_a_compaction_that_failed_on_the_stream_is_retried_later_until_it_works(
    compactor, store, tap, resources, openai, failure_queue, lambda_context
):
    # given Maya has 45 turns waiting, and the model is down for the next 3 hours (AWS time)
    seed_turns(store, MAYA, [f"message {i}" for i in range(45)])
    started = SQS_CLOCK.now()
    asked: list[float] = []  # when the model was asked, AWS time

    def outage() -> int | None:
        asked.append(SQS_CLOCK.now())
        return 500 if SQS_CLOCK.now() < started + 3 * HOUR else None

    openai.outage = outage
    openai.responder = fold_reply()
    # and her compaction failed every attempt on the stream, so it reached the failure queue
    records = fails_on_the_stream(compactor, tap, resources, lambda_context)
    assert len(records) > 1  # several flagged records in the batch: still one person
    on_the_stream = len(openai.calls())
    failed_at = SQS_CLOCK.now()

    # when the failure queue's mapping runs, through the outage and past it
    failure_queue.drain()

    # then her memory is compacted, without her writing again
    current = state(resources.table_name)
    assert int(current["marker"]) == 25
    assert current["compaction_due"] is False
    assert summary(resources.table_name) == "Maya works nights and has a dog."
    assert seqs(resources.table_name) == list(range(26, 46))
    # once the model was back, after a few spaced attempts: one fold per attempt, never a burst
    assert SQS_CLOCK.now() - started >= 3 * HOUR
    attempts = len(openai.calls()) - on_the_stream
    assert 3 <= attempts <= 6
    # the first 15 minutes after the failure, each retry after it later than the one before
    assert asked[on_the_stream] - failed_at >= 900
    # (15 minutes, doubling, with jitter)
    delays = failure_queue.stats.retry_delays
    assert len(delays) == attempts - 1
    assert all(later > earlier for earlier, later in pairwise(delays))
    assert delays[0] >= 0.8 * 900
    # and nothing is left on either queue
    assert failure_queue.idle()
    assert given_up(resources) == []


def test_a_compaction_that_keeps_failing_is_given_up_after_a_day_for_the_operator(
    compactor, store, tap, resources, openai, failure_queue, lambda_context
):
    # given the model is down for good, and Maya's compaction reached the failure queue
    seed_turns(store, MAYA, [f"message {i}" for i in range(45)])
    openai.outage = lambda: 500
    fails_on_the_stream(compactor, tap, resources, lambda_context)
    on_the_stream = len(openai.calls())
    started = SQS_CLOCK.now()

    # when the failure queue's mapping runs until nothing is left to retry
    failure_queue.drain()

    # then the model was asked once per receive the redrive policy allows, spread over more
    # than 12 hours (a 12-hour outage is survived), and not once more
    receives = max_receive_count(TEMPLATE, "CompactionFailureQueue")
    assert len(openai.calls()) - on_the_stream == receives
    assert SQS_CLOCK.now() - started > 12 * HOUR
    # and the job waits in the dead-letter queue, alarmed, naming her key, not her number
    [dead] = given_up(resources)
    job = json.loads(dead["Body"])
    assert job == {"job": "fold", "person": person_key(AGENT, MAYA)}
    assert MAYA not in dead["Body"]
    # and her memory is as it was: every turn kept, the flag still up for her next message
    assert seqs(resources.table_name) == list(range(1, 46))
    assert state(resources.table_name)["compaction_due"] is True

    # when the operator fixes the model and redrives the dead-letter queue
    openai.outage = None
    openai.responder = fold_reply()
    boto3.client("sqs").send_message(
        QueueUrl=resources.queue_urls["CompactionFailureQueue"], MessageBody=dead["Body"]
    )
    failure_queue.drain()
    # then she is compacted
    assert int(state(resources.table_name)["marker"]) == 25


def test_forgetting_a_silent_person_is_retried_from_the_queue(
    compactor, store, resources, lambda_context
):
    # given Maya's retention ended, and forgetting her failed on the stream
    seed_turns(store, MAYA, [f"message {i}" for i in range(5)])
    pk = person_key(AGENT, MAYA)
    job = {"messageId": "m1", "body": json.dumps({"job": "forget", "person": pk})}
    record = sqs_message_record(
        {"MessageId": "m1", "ReceiptHandle": "r1", "Body": job["body"]},
        resources.queue_arns["CompactionFailureQueue"],
    )
    # when its job comes back from the failure queue
    response = compactor.handler({"Records": [record]}, lambda_context)
    # then she is forgotten: only the content-free erasure mark is left
    assert response == {"batchItemFailures": []}
    rows = store.everything(pk)
    assert [set(r) - {"pk", "sk"} for r in rows] == [{"erased_at"}]


def test_a_message_that_is_no_job_is_retried_towards_the_dead_letter_queue_not_dropped(
    compactor, resources, lambda_context
):
    body = json.dumps({"hello": "world"})
    record = sqs_message_record(
        {"MessageId": "m1", "ReceiptHandle": "r1", "Body": body},
        resources.queue_arns["CompactionFailureQueue"],
    )
    assert compactor.handler({"Records": [record]}, lambda_context) == {
        "batchItemFailures": [{"itemIdentifier": "m1"}]
    }


def test_only_the_failed_batch_is_read_back_not_the_records_after_it(
    compactor, store, tap, resources, lambda_context
):
    # given Maya's flagged records, then Sam's, in the stream
    sam = "+447700900456"
    seed_turns(store, MAYA, [f"message {i}" for i in range(45)])
    seed_turns(store, sam, [f"message {i}" for i in range(45)])
    maya = [
        r for r in tap.matching() if r["dynamodb"]["Keys"]["pk"]["S"] == person_key(AGENT, MAYA)
    ]
    # when Lambda's on-failure record for a batch of Maya's alone comes from the queue
    failure = stream_failure_record(
        maya,
        shard_id=tap.shard_of(maya[0]["dynamodb"]["SequenceNumber"]),
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:compactor:live",
        attempts=1 + MAXIMUM_RETRY_ATTEMPTS,
    )
    body = json.dumps(failure)
    record = sqs_message_record(
        {"MessageId": "m1", "ReceiptHandle": "r1", "Body": body},
        resources.queue_arns["CompactionFailureQueue"],
    )
    assert compactor.handler({"Records": [record]}, lambda_context) == {"batchItemFailures": []}
    # then one job is queued, for later, and it is Maya's fold: nothing of Sam's
    sqs, url = boto3.client("sqs"), resources.queue_urls["CompactionFailureQueue"]
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []  # not yet
    SQS_CLOCK.advance(901)
    [job] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(job["Body"]) == {"job": "fold", "person": person_key(AGENT, MAYA)}


def test_a_ttl_expiry_that_failed_on_the_stream_is_read_back_as_forgetting_the_person(
    compactor, store, tap, ttl, resources, lambda_context
):
    from datetime import UTC, datetime

    # given Maya's retention ended and DynamoDB's TTL deleted her state item (devstack.ttl:
    # GetRecords names the deleter as AWS's does), and forgetting her failed on the stream
    seed_turns(store, MAYA, [f"message {i}" for i in range(5)])
    pk = person_key(AGENT, MAYA)
    expired = int(datetime.now(UTC).timestamp()) - 1
    store.table.update_item(
        Key={"pk": pk, "sk": "STATE"},
        UpdateExpression="SET expires_at = :t",
        ExpressionAttributeValues={":t": expired},
    )
    tap.poll()
    ttl.lag = 0
    assert ttl.sweep() == 1
    expiry = tap.matching()
    assert [r["userIdentity"] for r in expiry] == [
        {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    ]
    failure = stream_failure_record(
        expiry,
        shard_id=tap.shard_of(expiry[0]["dynamodb"]["SequenceNumber"]),
        function_arn="arn:aws:lambda:us-east-1:123456789012:function:compactor:live",
        attempts=1 + MAXIMUM_RETRY_ATTEMPTS,
    )
    # when Lambda's on-failure record comes from the queue, and its job 15 minutes later
    record = sqs_message_record(
        {"MessageId": "m1", "ReceiptHandle": "r1", "Body": json.dumps(failure)},
        resources.queue_arns["CompactionFailureQueue"],
    )
    assert compactor.handler({"Records": [record]}, lambda_context) == {"batchItemFailures": []}
    sqs, url = boto3.client("sqs"), resources.queue_urls["CompactionFailureQueue"]
    SQS_CLOCK.advance(901)
    [job] = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert json.loads(job["Body"])["job"] == "forget"
    job_record = sqs_message_record(job, resources.queue_arns["CompactionFailureQueue"])
    assert compactor.handler({"Records": [job_record]}, lambda_context) == {"batchItemFailures": []}
    # then she is forgotten: only the content-free erasure mark is left
    assert [set(r) - {"pk", "sk"} for r in store.everything(pk)] == [{"erased_at"}]


def test_a_job_for_a_person_erased_meanwhile_brings_nothing_back(
    compactor, store, resources, lambda_context
):
    from memagent.lifecycle.rights import forget_key

    # given Maya's fold was queued for later, and she was erased meanwhile
    seed_turns(store, MAYA, [f"message {i}" for i in range(45)])
    pk = person_key(AGENT, MAYA)
    forget_key(store, pk)
    left = store.everything(pk)
    # when the job comes back
    body = json.dumps({"job": "fold", "person": pk})
    record = sqs_message_record(
        {"MessageId": "m1", "ReceiptHandle": "r1", "Body": body},
        resources.queue_arns["CompactionFailureQueue"],
    )
    assert compactor.handler({"Records": [record]}, lambda_context) == {"batchItemFailures": []}
    # then nothing of hers is written again: only the erasure mark, as before
    assert store.everything(pk) == left
    assert [set(r) - {"pk", "sk"} for r in left] == [{"erased_at"}]
