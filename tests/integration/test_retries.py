"""Failure timing on AWS's clock: when a failed record comes back, and what a long outage costs.

The whole path runs as on AWS: whasp's signed POST through the webhook handler into moto's SQS
FIFO queue (built from template.yaml, redrive policy included), Lambda's event source mapping
(devstack.delivery.QueueDelivery: failed records are left alone, exactly as Lambda leaves them)
and the consumer handler. moto's SQS runs on devstack.clock.SQS_CLOCK; the delivery jumps that
clock to the next visible message when nothing else can run, so hours of backoff pass in
seconds, without a sleep, and each record still comes back exactly when its visibility says.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from devstack.clock import SQS_CLOCK
from devstack.delivery import QueueDelivery, in_process
from devstack.lambda_harness import reported_failures as failures
from devstack.resources import load_template, max_receive_count
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, sqs_batch, whasp_message
from tests.integration.webhook_calls import signed_request, webhook_env

SAM = "+447700900456"
ALEX = "+447700900789"
HOUR = 3600.0


class Pipeline:
    """whasp -> webhook -> SQS FIFO (moto) -> event source mapping -> consumer, in-process."""

    def __init__(self, webhook, consumer, resources, lambda_context):
        self.webhook = webhook
        self.consumer = consumer
        self.resources = resources
        self.context = lambda_context
        self.delivery = QueueDelivery(
            sqs=boto3.client("sqs"),
            queue_url=resources.queue_urls["EventQueue"],
            queue_arn=resources.queue_arns["EventQueue"],
            invoke=in_process(consumer.handler, lambda_context),
            batch_size=10,
            concurrency=1,
            idle_jump=True,
        )

    def use(self, consumer) -> None:
        """Deliver to another consumer (the same function, other settings) from now on."""
        self.consumer = consumer
        self.delivery._invoke = in_process(consumer.handler, self.context)

    def post(self, event: dict[str, Any]) -> None:
        response = self.webhook.handler(signed_request(event), self.context)
        assert response["statusCode"] == 200

    def dead_letters(self) -> int:
        return self._messages_in("EventDeadLetterQueue")

    def waiting(self) -> int:
        return self._messages_in("EventQueue")

    def _messages_in(self, queue: str) -> int:
        """The template queue's messages, visible or in flight."""
        attributes = boto3.client("sqs").get_queue_attributes(
            QueueUrl=self.resources.queue_urls[queue],
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())


@pytest.fixture
def pipeline(resources, consumer_env, monkeypatch, lambda_context) -> Pipeline:
    webhook = load_function("webhook", webhook_env(resources), monkeypatch)
    # the template's model retries: one in-process retry, then the queue's backoff
    consumer = load_function("consumer", {**consumer_env, "OPENAI_MAX_RETRIES": "1"}, monkeypatch)
    return Pipeline(webhook, consumer, resources, lambda_context)


def written(seconds_ago: float, text: str, chat: str = MAYA) -> dict[str, Any]:
    at = datetime.now(UTC) - timedelta(seconds=seconds_ago)
    return whasp_message(text, chat=chat, created_at=at.isoformat().replace("+00:00", "Z"))


def user_turns(resources, phone: str) -> list[str]:
    table = dynamodb_table(resources.table_name)
    items = table.query(
        KeyConditionExpression="pk = :pk AND begins_with(sk, :msg)",
        ExpressionAttributeValues={":pk": person_key(AGENT, phone), ":msg": "MSG#"},
        ConsistentRead=True,
    )["Items"]
    return [i["text"] for i in sorted(items, key=lambda i: int(i["seq"])) if i["role"] == "user"]


# ------------------------------------------------------------------ one failure


def test_a_model_500_brings_the_record_back_within_30_seconds_and_it_is_answered_once(
    pipeline, openai, whasp
):
    # given the model answers 500 to the first attempt (the call and the client's one retry)
    openai.fail_next(2, status=500)
    pipeline.post(written(5, "How far should I run today?"))

    # when the event source mapping delivers it once
    assert pipeline.delivery.drain(max_batches=1) == 1
    # then the record was reported failed, nothing was sent, and it is not visible yet
    assert pipeline.delivery.stats.retried == 1
    assert whasp.sent == []
    queue = pipeline.resources.queue_urls["EventQueue"]
    assert boto3.client("sqs").receive_message(QueueUrl=queue).get("Messages", []) == []

    # when the queue runs on: the record comes back after the backoff the consumer set
    pipeline.delivery.drain()
    [delay] = pipeline.delivery.stats.retry_delays
    assert 1 <= delay <= 30  # seconds of AWS time, not the queue's 42-minute visibility timeout
    # and the second attempt answers: exactly one reply, the message stored once
    assert len(whasp.texts_to(MAYA)) == 1
    assert user_turns(pipeline.resources, MAYA) == ["How far should I run today?"]
    assert pipeline.waiting() == 0


def test_the_person_s_later_messages_wait_with_the_failed_one_and_others_go_on(
    pipeline, openai, whasp
):
    # given Maya's voice note meets a transcription failure, with her next message and Sam's
    # in the same batch
    openai.transcriber = lambda audio: "a voice note"
    openai.fail_next(2, status=500)  # the transcription and the client's one retry
    pipeline.post(voice_note(whasp, seconds_ago=9))
    pipeline.post(written(8, "M2"))
    pipeline.post(written(7, "S1", chat=SAM))
    assert pipeline.delivery.drain(max_batches=1) == 1
    # then Sam is answered at once; nothing of Maya's is stored or answered yet
    assert len(whasp.texts_to(SAM)) == 1 and whasp.texts_to(MAYA) == []
    assert user_turns(pipeline.resources, MAYA) == []
    # when her messages come back, both after the same backoff, they are handled in order
    pipeline.delivery.drain()
    first, second = pipeline.delivery.stats.retry_delays
    assert abs(first - second) < 1 and first <= 30
    assert user_turns(pipeline.resources, MAYA) == ["[voice note] a voice note", "M2"]
    assert whasp.texts_to(MAYA)


# ------------------------------------------------------------------ a 12-hour outage


@pytest.mark.slow  # ~200 batches against moto over HTTP: tens of seconds on a busy machine
def test_a_twelve_hour_model_outage_loses_nothing_and_answers_everyone_in_order(
    pipeline, consumer_env, monkeypatch, openai, whasp
):
    # one reply per message (not one per burst: COALESCE_BURSTS would answer a person's
    # waiting messages together), so every message's reply is counted
    pipeline.use(
        load_function(
            "consumer",
            {**consumer_env, "OPENAI_MAX_RETRIES": "1", "COALESCE_BURSTS": "false"},
            monkeypatch,
        )
    )
    # given the model is down for 12 hours of AWS time, from now
    started = SQS_CLOCK.now()
    openai.outage = lambda: 500 if SQS_CLOCK.now() < started + 12 * HOUR else None
    # and 3 people write 5 messages each, interleaved, while it is down
    people = [MAYA, SAM, ALEX]
    for index in range(5):
        for phone in people:
            pipeline.post(written(60 - index, f"{phone[-3:]}-{index}", chat=phone))

    # when the queue and the consumer run through the outage and past it
    pipeline.delivery.drain()

    # then it lasted the whole 12 hours, with many failed attempts meanwhile
    assert SQS_CLOCK.now() - started >= 12 * HOUR
    assert pipeline.delivery.stats.retried > 3 * 40
    # and nothing reached the dead-letter queue, however many times it was received
    assert pipeline.dead_letters() == 0
    assert pipeline.waiting() == 0
    assert max_receive_count(load_template()) > 40
    # and after the recovery every message has exactly one reply, each person's in order,
    # and each message is stored once
    assert len(whasp.sent) == 15
    for phone in people:
        said = [f"{phone[-3:]}-{index}" for index in range(5)]
        assert user_turns(pipeline.resources, phone) == said
        assert len(whasp.texts_to(phone)) == 5
    # and the retries came on the backoff (15 minutes at most once capped), never after the
    # queue's visibility timeout (a message behind its person's failed one may wait for the
    # next retry of that one, so a few waits are two backoffs long)
    delays = sorted(pipeline.delivery.stats.retry_delays)
    assert delays[len(delays) // 2] <= 900
    visibility = load_template()["Resources"]["EventQueue"]["Properties"]["VisibilityTimeout"]
    assert delays[-1] < int(visibility)


# ------------------------------------------------------------------ whasp refuses the key


def test_a_rotated_whasp_key_is_read_again_and_the_reply_sent_once(
    consumer_env, monkeypatch, lambda_context, whasp
):
    # given the whasp key lives in Parameter Store and the consumer has read (and cached) it
    name = f"/t{uuid.uuid4().hex[:8]}/whasp-api-key"
    ssm = boto3.client("ssm")
    ssm.put_parameter(Name=name, Value="key-before-rotation", Type="SecureString")
    monkeypatch.setattr(whasp, "api_key", "key-before-rotation")
    env = {k: v for k, v in consumer_env.items() if k != "WHASP_API_KEY"}
    monkeypatch.delenv("WHASP_API_KEY", raising=False)
    consumer = load_function("consumer", {**env, "WHASP_API_KEY_PARAM": name}, monkeypatch)
    assert failures(consumer.handler(sqs_batch(written(60, "first")), lambda_context)) == []
    # when the operator rotates the key: whasp takes only the new one, the cache holds the old
    ssm.put_parameter(Name=name, Value="key-after-rotation", Type="SecureString", Overwrite=True)
    monkeypatch.setattr(whasp, "api_key", "key-after-rotation")
    whasp.requests.clear()
    response = consumer.handler(sqs_batch(written(30, "second")), lambda_context)
    # then whasp answered 401 once, the key was read again, and the reply went out once
    assert failures(response) == []
    sends = [r for r in whasp.requests if r["path"] == "/v1/messages"]
    assert [r["status"] for r in sends] == [401, 201]
    assert [r["headers"]["authorization"] for r in sends] == [
        "Bearer key-before-rotation",
        "Bearer key-after-rotation",
    ]
    assert len(whasp.texts_to(MAYA)) == 2


def test_a_key_whasp_keeps_refusing_is_retried_on_the_backoff_never_parked(pipeline, whasp, capsys):
    # given whasp refuses the key on the first attempt, also after it was read again
    whasp.reject_next(2, status=401)
    pipeline.post(written(5, "are you there?"))
    pipeline.delivery.drain(max_batches=1)
    # then the record failed (retried), not parked, and the alarm's metric was emitted
    assert pipeline.delivery.stats.retried == 1
    assert '"ProviderAuthFailed"' in capsys.readouterr().out
    # and once whasp takes the key again, the reply goes out, once
    pipeline.delivery.drain()
    assert len(whasp.texts_to(MAYA)) == 1
    assert pipeline.delivery.stats.retry_delays[0] <= 30


# ------------------------------------------------------------------ media fetched once


def voice_note(whasp, seconds_ago: float = 5) -> dict[str, Any]:
    url = whasp.add_media(b"OggS" + b"v" * 2000, "audio/ogg")
    at = (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")
    return whasp_message(
        "",
        chat=MAYA,
        created_at=at,
        message={
            "id": f"msg_{uuid.uuid4().hex[:6]}",
            "type": "audio",
            "timestamp": at,
            "media": {"url": url, "mime_type": "audio/ogg", "size": 2004},
        },
    )


def kept(consumer_env) -> list[str]:
    bucket = consumer_env["MEDIA_BUCKET"]
    listing = boto3.client("s3").list_objects_v2(Bucket=bucket)
    return [obj["Key"] for obj in listing.get("Contents", [])]


def test_a_voice_note_is_transcribed_on_the_retry_after_its_url_expired(
    pipeline, consumer_env, openai, whasp
):
    # given the transcription fails on the first attempt (the call and the client's retry)
    openai.transcriber = lambda audio: f"I ran {len(audio)} metres"
    openai.fail_next(2, status=500)
    pipeline.post(voice_note(whasp))
    assert pipeline.delivery.drain(max_batches=1) == 1
    # then the record is retried, not stored as "could not be played", and the file is kept
    assert pipeline.delivery.stats.retried == 1
    assert user_turns(pipeline.resources, MAYA) == []
    assert len(kept(consumer_env)) == 1
    # when whasp's media URL has expired (410) by the time of the retry
    whasp.expire_media()
    pipeline.delivery.drain()
    # then the retry transcribed the kept copy and answered once; the URL was fetched once
    assert user_turns(pipeline.resources, MAYA) == ["[voice note] I ran 2004 metres"]
    assert len(whasp.texts_to(MAYA)) == 1
    assert len([r for r in whasp.requests if r["path"].startswith("/media/")]) == 1
    # and once the text is stored, the copy is gone
    assert kept(consumer_env) == []


def test_forget_leaves_no_kept_copy(pipeline, consumer_env, resources, openai, whasp, monkeypatch):
    from tests.integration.test_lifecycle import admin_event

    # given a voice note waits for its retry, its file kept
    openai.fail_next(2, status=500)
    pipeline.post(voice_note(whasp))
    pipeline.delivery.drain(max_batches=1)
    assert len(kept(consumer_env)) == 1
    # when an operator erases Maya through the admin API
    admin = load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": AGENT,
            "MEDIA_BUCKET": consumer_env["MEDIA_BUCKET"],
        },
        monkeypatch,
    )
    response = admin.handler(admin_event("DELETE", MAYA), pipeline.context)
    assert response["statusCode"] == 200
    # then no kept copy is left, and the retry brings nothing back
    assert kept(consumer_env) == []
    pipeline.delivery.drain()
    assert user_turns(pipeline.resources, MAYA) == []
    assert kept(consumer_env) == []


# ------------------------------------------------------------------ deferred for time


def test_a_record_deferred_for_time_is_back_within_seconds(
    pipeline, consumer_env, monkeypatch, whasp
):
    # given an invocation with too little time left to start a record (30 s < 120 s)
    consumer = load_function(
        "consumer", {**consumer_env, "RECORD_TIME_BUDGET_SECONDS": "120"}, monkeypatch
    )
    left = iter([30_000])
    monkeypatch.setattr(
        pipeline.context, "get_remaining_time_in_millis", lambda: next(left, 400_000)
    )
    pipeline.use(consumer)
    pipeline.post(written(5, "quick one"))
    # when the queue runs
    pipeline.delivery.drain()
    # then the record was deferred, came back in the defer delay (2 s), not on the failure
    # backoff or the visibility timeout, and was answered once
    [delay] = pipeline.delivery.stats.retry_delays
    assert 1 <= delay <= 3
    assert len(whasp.texts_to(MAYA)) == 1
