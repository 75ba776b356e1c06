"""A stack deployed before keyed person keys, upgraded (memagent.lifecycle.upgrade): the memory it
kept under a bare SHA-256 of (agent, phone) is the person's again from their next message, and the
admin API's forget reaches it."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import boto3
import pytest
from boto3.dynamodb.conditions import Key

import memagent.turn.identity
from devstack.lambda_harness import reported_failures as failures
from devstack.lambda_harness import retried
from memagent.memory.person import legacy_key, person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, sqs_batch
from tests.integration.test_consumer import SAM, message
from tests.integration.test_lifecycle import admin, admin_event, only_the_mark  # noqa: F401 (fixture)


def partition(resources, pk: str) -> list[dict]:
    table = dynamodb_table(resources.table_name)
    return table.query(KeyConditionExpression=Key("pk").eq(pk), ConsistentRead=True)["Items"]


def before_the_upgrade(consumer, lambda_context, monkeypatch, *texts: str) -> list[dict]:
    """Maya's messages, handled as a stack before keyed keys did: keyed by the bare hash."""
    with monkeypatch.context() as old_stack:
        old_stack.setattr(memagent.turn.identity, "person_key", legacy_key)
        batches = [sqs_batch(message(text, minute)) for minute, text in enumerate(texts)]
        for batch in batches:
            assert failures(consumer.handler(batch, lambda_context)) == []
    return batches


def test_memory_kept_under_a_legacy_key_is_the_persons_context_on_their_next_message(
    consumer, resources, openai, whasp, lambda_context, monkeypatch
):
    # given Maya's memory, stored by the stack before its upgrade
    batches = before_the_upgrade(
        consumer, lambda_context, monkeypatch, "I have a dog called Biscuit", "He is three"
    )
    old = partition(resources, legacy_key(AGENT, MAYA))
    # the messages, their ledger, the state, and the day's conversation (outcomes)
    assert {i["sk"][:4] for i in old} == {"MSG#", "EVT#", "STATE"[:4], "CONV"}
    # when she writes after the upgrade
    assert (
        failures(consumer.handler(sqs_batch(message("Guess his name?", 5)), lambda_context)) == []
    )
    # then her earlier turns are in the model's input, and everything now lives under her key
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == ["I have a dog called Biscuit", "He is three", "Guess his name?"]
    assert partition(resources, legacy_key(AGENT, MAYA)) == []
    moved = {i["sk"] for i in partition(resources, person_key(AGENT, MAYA))}
    assert {i["sk"] for i in old} < moved
    # and the ledger moved with it: a late redelivery of her first message is no new turn
    sent = len(whasp.sent)
    assert failures(consumer.handler(batches[0], lambda_context)) == []
    assert len(whasp.sent) == sent
    assert [m["content"] for m in openai.calls()[-1]["input"]].count("He is three") == 1


@pytest.mark.parametrize(
    ("operation", "nth"),
    [("BatchWriteItem", 2), ("TransactWriteItems", 1)],
    ids=["after-the-copies", "at-the-commit"],
)
def test_a_crash_in_the_middle_of_the_move_then_a_redelivery_ends_with_one_copy(
    consumer, resources, openai, whasp, lambda_context, monkeypatch, operation, nth
):
    # given Maya's memory under her legacy key, and a move that dies at `operation`
    before_the_upgrade(consumer, lambda_context, monkeypatch, "I have a dog called Biscuit")
    calls = Counter()

    def crash(model, **_):
        calls[model.name] += 1
        if model.name == operation and calls[operation] == nth:
            raise ConnectionError("the invocation died")

    client = consumer.consumer.agent.store._client
    client.meta.events.register("before-call.dynamodb.*", crash)
    batch = sqs_batch(message("Guess his name?", 5))
    # when the first attempt fails there and the queue redelivers it
    assert retried(consumer.handler, batch, lambda_context) != []
    client.meta.events.unregister("before-call.dynamodb.*", crash)
    assert failures(consumer.handler(batch, lambda_context)) == []
    # then one copy of each turn, under her key alone, and one reply to the message
    assert partition(resources, legacy_key(AGENT, MAYA)) == []
    texts = [i["text"] for i in partition(resources, person_key(AGENT, MAYA)) if "text" in i]
    assert texts.count("I have a dog called Biscuit") == 1 and texts.count("Guess his name?") == 1
    assert len(whasp.sent) == 2
    said = [m["content"] for m in openai.calls()[-1]["input"] if m["role"] == "user"]
    assert said == ["I have a dog called Biscuit", "Guess his name?"]


def test_a_strangers_first_message_costs_one_request_more_than_without_the_lookup(
    consumer, lambda_context
):
    agent = consumer.consumer.agent
    calls: list[str] = []
    agent.store._client.meta.events.register(
        "before-call.dynamodb.*", lambda model, **_: calls.append(model.name)
    )

    def first_message(chat: str) -> Counter:
        calls.clear()
        assert failures(consumer.handler(sqs_batch(message("hi", chat=chat)), lambda_context)) == []
        return Counter(calls)

    with_lookup = first_message(MAYA)
    agent.settings = dataclasses.replace(agent.settings, legacy_person_keys=False)
    without = first_message(SAM)
    assert with_lookup - without == Counter({"BatchGetItem": 1})
    assert without - with_lookup == Counter()
    # and her second message looks up nothing old
    agent.settings = dataclasses.replace(agent.settings, legacy_person_keys=True)
    calls.clear()
    assert failures(consumer.handler(sqs_batch(message("again", 1)), lambda_context)) == []
    assert "BatchGetItem" not in calls


def test_forget_by_phone_removes_a_legacy_partition(
    consumer,
    admin,  # noqa: F811 (the fixture)
    resources,
    lambda_context,
    monkeypatch,
):
    # given Maya's memory under her legacy key only, and the admin's export of her
    before_the_upgrade(consumer, lambda_context, monkeypatch, "I have a dog called Biscuit")
    exported = admin.handler(admin_event("GET", MAYA), lambda_context)
    assert "Biscuit" in exported["body"]
    # when an operator forgets her by phone
    response = admin.handler(admin_event("DELETE", MAYA), lambda_context)
    # then nothing of it is left but erasure marks, under either key; the receipt counts what
    # both held (her two messages, their ledger entry, the day's conversation, her state)
    assert response["statusCode"] == 200
    receipt = json.loads(response["body"])
    kinds = {"messages": 2, "ledger": 1, "other": 1, "state": 1, "media": 0}
    assert (receipt["person"], receipt["removed"], receipt["by_kind"]) == (
        person_key(AGENT, MAYA),
        5,
        kinds,
    )
    for pk in (legacy_key(AGENT, MAYA), person_key(AGENT, MAYA)):
        assert [only_the_mark(i) for i in partition(resources, pk)] == [True]
    assert "Biscuit" not in admin.handler(admin_event("GET", MAYA), lambda_context)["body"]


def test_forget_by_phone_erases_both_her_memories_and_the_files_kept_under_her_legacy_key(
    consumer, resources, lambda_context, monkeypatch
):
    from memagent.aws.archive import KeptMedia
    from tests.conftest import load_function
    from tests.integration.test_operator import call, person

    # given Maya's memory from before the upgrade, with a voice note kept under its key, and
    # one begun since on the stack while LegacyPersonKeys was false (nothing carried over)
    before_the_upgrade(consumer, lambda_context, monkeypatch, "I have a dog called Biscuit")
    bucket = f"{resources.table_name}-media".lower()
    boto3.client("s3").create_bucket(Bucket=bucket)
    media = KeptMedia(bucket)
    media.put(legacy_key(AGENT, MAYA), "evt_voice", b"OggS....", "audio/ogg")
    agent = consumer.consumer.agent
    monkeypatch.setattr(
        agent, "settings", dataclasses.replace(agent.settings, legacy_person_keys=False)
    )
    assert failures(consumer.handler(sqs_batch(message("Hi, it's Maya", 5)), lambda_context)) == []
    assert partition(resources, legacy_key(AGENT, MAYA)) != []
    # and an operator noted a fact in the new one
    env = {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT, "MEDIA_BUCKET": bucket}
    media_admin = load_function("admin", env, monkeypatch)
    fact = {"text": "Has a dog called Biscuit"}
    assert call(media_admin, lambda_context, "POST", f"{person()}/facts", fact)[0] == 200
    # when an operator forgets her by phone, LegacyPersonKeys true again
    response = media_admin.handler(admin_event("DELETE", MAYA), lambda_context)
    # then nothing of either memory is left but erasure marks, nor the kept voice note; the
    # receipt counts what both held
    assert response["statusCode"] == 200
    receipt = json.loads(response["body"])
    for pk in (legacy_key(AGENT, MAYA), person_key(AGENT, MAYA)):
        assert [only_the_mark(i) for i in partition(resources, pk)] == [True]
    assert media.get(legacy_key(AGENT, MAYA), "evt_voice") is None
    kinds = {"messages": 2 + 2, "ledger": 1 + 1, "other": 1 + 1, "state": 1 + 1, "media": 1}
    assert (receipt["removed"], receipt["by_kind"]) == (12, {**kinds, "facts": 1})
