"""The published local person key stays local: a deployed function refuses it (as it refuses the
webhook's test-only secret), the stack's secret wins over a plain PERSON_KEY, and the operator's
command-line tool exports or erases only under the stack's own key. Through the handlers'
cold starts and requests, and scripts/people.py run as an operator runs it, against moto over
HTTP (Secrets Manager, CloudFormation, DynamoDB)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from devstack.lambda_harness import reported_failures as failures
from memagent.errors import ConfigurationError
from memagent.memory.person import LOCAL_PERSON_KEY
from tests.conftest import (
    AGENT,
    MAYA,
    OTHER_SECRET,
    dynamodb_table,
    load_function,
    sqs_batch,
    whasp_message,
)
from tests.integration.test_webhook_hardening import queued as queued  # a fixture
from tests.integration.webhook_calls import post_signed, webhook_env

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "people.py"
STACKS_KEY = "s" * 64  # what the template's generated secret holds (a random 64 characters)


def deployed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A function in AWS: Lambda names it, and neither local flag is set."""
    monkeypatch.delenv("MEMAGENT_LOCAL_STACK", raising=False)
    monkeypatch.delenv("AWS_SAM_LOCAL", raising=False)
    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "whasp-agent-ConsumerFunction-1a2b3c")


def key_under(secret: str, phone: str) -> str:
    """A phone's partition key under `secret` (memagent.memory.person's HMAC, computed here)."""
    digest = hmac.new(secret.encode(), f"{AGENT}\x1f{phone}".encode(), hashlib.sha256)
    return f"P#{digest.hexdigest()[:40]}"


def a_secret(value: str = STACKS_KEY) -> str:
    name = f"PersonKeySecret-{os.urandom(4).hex()}"
    return boto3.client("secretsmanager").create_secret(Name=name, SecretString=value)["ARN"]


# ------------------------------------------------------------------ the functions


@pytest.mark.parametrize("function", ["webhook", "consumer", "admin"])
def test_a_deployed_function_refuses_the_published_local_key_at_cold_start(
    function, resources, consumer_env, monkeypatch
):
    # given a deployed function whose PERSON_KEY is the key the README publishes
    deployed(monkeypatch)
    env = {
        "webhook": webhook_env(resources, secret=OTHER_SECRET),
        "consumer": consumer_env,
        "admin": {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT},
    }[function]
    # when it starts, then it refuses, naming the setting and never the key
    with pytest.raises(ConfigurationError, match=r"PERSON_KEY is the published local key") as no:
        load_function(function, {**env, "PERSON_KEY": LOCAL_PERSON_KEY}, monkeypatch)
    assert LOCAL_PERSON_KEY not in str(no.value)


def test_the_published_local_key_in_the_stacks_secret_fails_closed(
    resources, queued, monkeypatch, lambda_context
):
    import memagent.memory.person as person

    # given a deployed webhook whose generated secret was overwritten with the local key
    deployed(monkeypatch)
    monkeypatch.delenv("PERSON_KEY")
    env = webhook_env(
        resources, secret=OTHER_SECRET, PERSON_KEY_SECRET_ARN=a_secret(LOCAL_PERSON_KEY)
    )
    webhook = load_function("webhook", env, monkeypatch)
    monkeypatch.setattr(person, "_key", None)  # the key is read on first use
    # when whasp delivers, then the answer is a 503 and nothing is queued under that key
    status, _ = post_signed(webhook, whasp_message(), lambda_context, secret=OTHER_SECRET)
    assert status == 503
    assert queued() == []


def test_the_published_local_key_padded_with_nuls_in_the_stacks_secret_fails_closed_too(
    resources, queued, monkeypatch, lambda_context
):
    import memagent.memory.person as person

    # given a deployed webhook whose secret is the local key padded with NULs: HMAC pads a key
    # shorter than its block with NULs, so it derives the published key's keys exactly
    deployed(monkeypatch)
    monkeypatch.delenv("PERSON_KEY")
    padded = LOCAL_PERSON_KEY + "\0" * 8
    env = webhook_env(resources, secret=OTHER_SECRET, PERSON_KEY_SECRET_ARN=a_secret(padded))
    webhook = load_function("webhook", env, monkeypatch)
    monkeypatch.setattr(person, "_key", None)  # the key is read on first use
    # when whasp delivers, then it is refused as the published key is: a 503, nothing queued
    status, _ = post_signed(webhook, whasp_message(), lambda_context, secret=OTHER_SECRET)
    assert status == 503
    assert queued() == []


def test_the_stacks_secret_wins_over_a_plain_person_key(
    consumer_env, resources, monkeypatch, lambda_context
):
    import memagent.memory.person as person

    # given a consumer with both: the stack's secret, and a PERSON_KEY left in its environment
    arn = a_secret()
    consumer = load_function(
        "consumer", {**consumer_env, "PERSON_KEY_SECRET_ARN": arn}, monkeypatch
    )
    monkeypatch.setattr(person, "_key", None)  # read on first use, as after a cold start
    # when Maya writes
    assert failures(consumer.handler(sqs_batch(whasp_message("Hi")), lambda_context)) == []
    # then her memory is under the stack's key, not the plain one's
    table = dynamodb_table(resources.table_name)
    keys = {item["pk"] for item in table.scan()["Items"] if item["pk"].startswith("P#")}
    assert keys == {key_under(STACKS_KEY, MAYA)}


# ------------------------------------------------------------------ the operator's tool


def a_stack(table: str) -> str:
    """A deployed stack as people.py reads it: its outputs (the table, the person key's secret)
    and AgentId, and its table tagged by CloudFormation with the stack's name (CloudFormation
    tags what it creates; moto's CloudFormation does not, so the test does)."""
    name, arn = f"whasp-agent-{table}", a_secret()
    template = {
        "Parameters": {"AgentId": {"Type": "String", "Default": AGENT}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},  # a stack holds one at least
        "Outputs": {
            "MemoryTableName": {"Value": table},
            "PersonKeySecretArn": {"Value": arn},
        },
    }
    boto3.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))
    dynamodb = boto3.client("dynamodb")
    table_arn = dynamodb.describe_table(TableName=table)["Table"]["TableArn"]
    dynamodb.tag_resource(
        ResourceArn=table_arn, Tags=[{"Key": "aws:cloudformation:stack-name", "Value": name}]
    )
    return name


def mayas_memory(table: str) -> str:
    """Maya's three messages and her state, written under the stack's key (as its functions
    wrote them: every turn writes the state, and messages without one are what an expiry left)."""
    pk = key_under(STACKS_KEY, MAYA)
    with dynamodb_table(table).batch_writer() as batch:
        for seq in (1, 2, 3):
            at = f"2026-11-29T10:0{seq}:00+00:00"
            item = {"pk": pk, "sk": f"MSG#{seq:012d}", "seq": seq, "role": "user", "at": at}
            batch.put_item(Item={**item, "text": f"private text {seq}"})
        batch.put_item(Item={"pk": pk, "sk": "STATE", "last_seq": 3})
    return pk


def people(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    """scripts/people.py in a shell of its own, with `env` changed (None: unset)."""
    shell = {**os.environ}
    for name, value in env.items():
        shell.pop(name, None) if value is None else shell.__setitem__(name, value)
    return subprocess.run(  # noqa: S603 (this repository's script, by its path)
        [sys.executable, str(SCRIPT), *args], env=shell, capture_output=True, text=True, check=False
    )


def answer(done: subprocess.CompletedProcess[str]) -> dict:
    """The tool's JSON answer (its indented document; memagent's log lines come before it)."""
    return json.loads(done.stdout[done.stdout.index("{\n") :])


def items_of(table: str, pk: str) -> list[dict]:
    return [i for i in dynamodb_table(table).scan()["Items"] if i["pk"] == pk]


@pytest.mark.parametrize("action", ["export", "forget"])
def test_an_operator_shell_holding_the_local_key_is_refused(resources, action):
    # given a deployed stack's table holding Maya's memory, and a shell that ran the local stack
    table = resources.table_name
    a_stack(table)
    pk = mayas_memory(table)
    # when the operator exports or forgets Maya by the table's name (with the agent's id)
    done = people(
        action, MAYA, "--table", table, "--agent", AGENT,
        PERSON_KEY=LOCAL_PERSON_KEY, MEMAGENT_LOCAL_STACK=None,
    )  # fmt: skip
    # then the tool refuses, says why, and Maya's memory is untouched
    assert done.returncode == 2, done.stdout
    assert "published local key" in done.stderr and done.stdout == ""
    assert len(items_of(table, pk)) == 4  # untouched: three messages and the state


@pytest.mark.parametrize("action", ["export", "forget"])
def test_a_key_that_is_not_the_stacks_is_refused(resources, action):
    # given a shell holding some other stack's key
    table = resources.table_name
    stack = a_stack(table)
    pk = mayas_memory(table)
    done = people(action, MAYA, "--table", table, PERSON_KEY="t" * 64, MEMAGENT_LOCAL_STACK=None)
    # then the tool refuses, naming the stack to give instead
    assert done.returncode == 2, done.stdout
    assert f"not stack {stack}'s" in done.stderr and f"--stack {stack}" in done.stderr
    assert len(items_of(table, pk)) == 4  # untouched: three messages and the state


def test_with_the_stack_its_own_key_is_used_whatever_the_shell_holds(resources):
    # given a shell that still holds the local stack's key and flag
    table = resources.table_name
    stack = a_stack(table)
    pk = mayas_memory(table)
    shell = {"PERSON_KEY": LOCAL_PERSON_KEY, "MEMAGENT_LOCAL_STACK": "1"}
    # when the operator exports, then forgets, Maya by the stack
    exported = people("export", MAYA, "--stack", stack, **shell)
    forgotten = people("forget", MAYA, "--stack", stack, **shell)
    # then both ran under the stack's key: her three messages out, then erased
    assert exported.returncode == 0, exported.stderr
    assert [m["text"] for m in answer(exported)["messages"]] == [
        "private text 1",
        "private text 2",
        "private text 3",
    ]
    assert forgotten.returncode == 0, forgotten.stderr
    assert answer(forgotten)["by_kind"]["messages"] == 3
    assert [set(item) for item in items_of(table, pk)] == [{"pk", "sk", "erased_at"}]


def test_the_tool_says_an_expired_person_is_gone_rather_than_exporting_them(resources):
    # given Maya's messages with no state item: what her retention's expiry leaves until the
    # stream's record erases the rest
    table = resources.table_name
    stack = a_stack(table)
    pk = mayas_memory(table)
    dynamodb_table(table).delete_item(Key={"pk": pk, "sk": "STATE"})
    # when the operator exports her by the stack, then the tool says she is gone, shows nothing
    exported = people("export", MAYA, "--stack", stack, PERSON_KEY=None, MEMAGENT_LOCAL_STACK=None)
    assert exported.returncode == 1, exported.stderr
    assert "retention has ended" in exported.stderr
    assert "private text" not in exported.stdout + exported.stderr
