"""Which stream records a failed batch's read-back turns into jobs: the same two the template's
filter hands the compactor, and no other."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from memagent.compaction.retry import FOLD, FORGET, Job, job_of

PK = "P#0123abcd"
TTL = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}


def state_change(flag: bool | None, *, sk: str = "STATE", event: str = "MODIFY") -> dict:
    image = {"pk": {"S": PK}, "sk": {"S": sk}, "last_seq": {"N": "41"}}
    if flag is not None:
        image["compaction_due"] = {"BOOL": flag}
    return {
        "eventName": event,
        "dynamodb": {"Keys": {"pk": {"S": PK}, "sk": {"S": sk}}, "NewImage": image},
    }


def test_a_state_whose_flag_is_up_is_a_fold_of_that_person():
    assert job_of(state_change(True)) == Job(PK, FOLD)


def test_the_ttls_deletion_of_a_state_is_forgetting_that_person_up_to_the_deletion():
    record = {
        "eventName": "REMOVE",
        "userIdentity": TTL,
        "dynamodb": {
            "ApproximateCreationDateTime": 1795946412,
            "Keys": {"pk": {"S": PK}, "sk": {"S": "STATE"}},
        },
    }
    deleted = datetime.fromtimestamp(1795946412, UTC)
    assert job_of(record) == Job(PK, FORGET, deleted)
    # and the job keeps that time through the queue: what the person wrote since is kept
    assert Job.read(json.loads(Job(PK, FORGET, deleted).body())) == Job(PK, FORGET, deleted)


def test_other_records_of_the_batch_are_no_job():
    # a lowered flag, no flag, a message, a flag-less insert; and a delete by anyone but the TTL
    assert job_of(state_change(False)) is None
    assert job_of(state_change(None)) is None
    assert job_of(state_change(None, sk="MSG#00000041", event="INSERT")) is None
    removed = {"eventName": "REMOVE", "dynamodb": {"Keys": {"pk": {"S": PK}, "sk": {"S": "STATE"}}}}
    assert job_of(removed) is None
    assert job_of({}) is None


def test_a_job_says_what_to_do_and_for_whom_only():
    assert Job(PK, FOLD).body() == '{"job": "fold", "person": "P#0123abcd"}'
    assert Job.read(json.loads(Job(PK, FOLD).body())) == Job(PK, FOLD)


def test_a_message_that_is_no_job_reads_as_none():
    for message in ({}, {"job": "fold"}, {"job": "delete", "person": PK}, {"person": PK}):
        assert Job.read(message) is None
    assert Job.read({"job": "forget", "person": PK, "at": "yesterday"}) is None
