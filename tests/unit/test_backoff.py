"""The retry schedule and the outage it covers, as plain arithmetic."""

from __future__ import annotations

import random

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from memagent.aws.backoff import Retries, RetrySchedule, outage_survived_seconds
from memagent.errors import Deferred, TransientError


def test_the_delay_doubles_from_10_seconds_up_to_the_cap():
    schedule = RetrySchedule(base_seconds=10, cap_seconds=900, jitter=0.2)
    assert [schedule.nominal(n) for n in range(1, 10)] == [10, 20, 40, 80, 160, 320, 640, 900, 900]
    assert schedule.nominal(10_000) == 900  # no overflow however often it was received


def test_jitter_only_shortens_and_never_below_its_share():
    schedule = RetrySchedule(base_seconds=10, cap_seconds=900, jitter=0.2)
    rng = random.Random(7)
    for count in (1, 3, 8, 50):
        delays = {schedule.delay(count, rng) for _ in range(200)}
        assert min(delays) >= schedule.shortest(count)
        assert max(delays) <= schedule.nominal(count)
        assert len(delays) > 1  # people who failed together do not all come back together


def test_the_outage_budget_is_the_sum_of_the_shortest_waits():
    schedule = RetrySchedule(base_seconds=10, cap_seconds=900, jitter=0.2)
    # 8 + 16 + 32 + 64 + 128 + 256 + 512, then 720 s for each of the other 93 receives
    assert outage_survived_seconds(schedule, 100) == 1016 + 93 * 720
    assert outage_survived_seconds(schedule, 100) >= 12 * 3600
    assert outage_survived_seconds(schedule, 5) < 3600  # what 5 receives would have given


def test_each_attempts_own_time_adds_to_the_outage_budget():
    schedule = RetrySchedule(base_seconds=10, cap_seconds=900, jitter=0.2)
    # 8 + 16 + 32 + 64 + 128 of waits, and 5 attempts of 40 s
    assert outage_survived_seconds(schedule, 5, seconds_per_attempt=40) == 248 + 5 * 40


def test_a_delay_is_at_least_one_second_and_drawn_without_a_given_generator():
    # given a schedule whose delays round to nothing
    schedule = RetrySchedule(base_seconds=0.4, cap_seconds=900, jitter=0)
    # then SQS is asked for 1 s, the least that still waits
    assert schedule.delay(1) == 1
    assert schedule.shortest(1) == 1
    # and without a generator of its own, a delay is drawn within its bounds
    assert 8 <= RetrySchedule(base_seconds=10, jitter=0.2).delay(1) <= 10


def test_the_doubling_stops_at_2_to_the_32():
    schedule = RetrySchedule(base_seconds=1, cap_seconds=2**40, jitter=0)
    assert schedule.nominal(34) == 2**32
    assert schedule.nominal(10_000) == 2**32


def record(group: str, receive_count: int) -> SQSRecord:
    return SQSRecord(
        {
            "messageId": f"m-{group}-{receive_count}",
            "receiptHandle": f"rh-{group}-{receive_count}",
            "body": "{}",
            "attributes": {
                "ApproximateReceiveCount": str(receive_count),
                "MessageGroupId": group,
            },
        }
    )


def test_a_group_waits_as_long_as_its_first_failure_and_a_deferral_comes_back_at_once():
    retries = Retries(None, RetrySchedule(jitter=0), defer_seconds=2)
    plan = retries.plan(
        [
            (record("maya", 3), TransientError("model 500")),
            (record("maya", 1), None),  # failed unprocessed behind it (circuit breaker)
            (record("sam", 1), Deferred("no time left")),
            (record("sam", 1), None),
        ]
    )
    assert plan == [("rh-maya-3", 40), ("rh-maya-1", 40), ("rh-sam-1", 2), ("rh-sam-1", 2)]


def test_each_distinct_failure_of_a_batch_is_named_once_with_its_status_and_class(caplog):
    from aws_lambda_powertools.utilities.batch.exceptions import (
        SQSFifoMessageGroupCircuitBreakerError,
    )
    from botocore.exceptions import ClientError

    # given a batch failed by whasp twice, DynamoDB's throttling once, a record skipped behind
    # its group's failure and a deferral
    throttled = ClientError(
        {
            "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "+4477 x"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "TransactWriteItems",
    )
    whasp = TransientError("whasp answered HTTP 502", dependency="whasp", status=502, error="HTTP")
    failures = [
        (record("maya", 1), whasp),
        (record("maya", 1), SQSFifoMessageGroupCircuitBreakerError("skipped")),
        (record("sam", 1), whasp),
        (record("ana", 1), throttled),
        (record("li", 1), Deferred("no time left")),
    ]
    # when its retries are scheduled
    with caplog.at_level("INFO"):
        Retries(None, RetrySchedule(jitter=0), defer_seconds=2).schedule_failures(failures)
    # then each failure is named once, with how many records it holds back
    named = [
        (r.getMessage(), r.dependency, r.status, r.error, r.records)
        for r in caplog.records
        if hasattr(r, "dependency")
    ]
    assert named == [
        ("whasp failed: retrying", "whasp", 502, "HTTP", 2),
        (
            "aws:TransactWriteItems failed: retrying",
            "aws:TransactWriteItems",
            400,
            "ProvisionedThroughputExceededException",
            1,
        ),
    ]
    assert "+4477" not in caplog.text  # the error's message is never logged
