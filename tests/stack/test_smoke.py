"""`make smoke` (scripts/smoke.py) against the local stack: a healthy stack passes every check;
a missing secret, a role that may not read its secret, a webhook that takes an unsigned POST,
an alarm gone and alarms nobody confirmed are each a FAIL line saying why.

IAM's policy simulator is the local stack's own evaluation of the template's roles in moto's IAM
(devstack.moto_fixes.make_iam_simulate). Here every question is recorded on the way, and a test
may have IAM refuse a (role, action, resource) the template allows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse

from devstack import LoopbackServer, Reply, Request, cfn
from devstack.stack import DevStack
from memagent.providers import TEST_PERSON
from scripts.smoke import LocalStack, Result, Smoke, check_alarms, check_secrets

pytestmark = pytest.mark.xdist_group("smoke-stack")  # one stack for the module: one worker

ACCOUNT = "123456789012"


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[DevStack]:
    # given a local stack whose alarm topic has an email subscribed (AlarmEmail), unconfirmed
    parameters = {"AlarmEmail": "ops@example.com"}
    log = tmp_path_factory.mktemp("smoke") / "stack.log"
    # warm=False: each function starts on its first invocation (the compactor never does here)
    with DevStack(env={}, level="quiet", parameters=parameters, log_path=log, warm=False) as stack:
        yield stack


@pytest.fixture
def pager(stack) -> Iterator[str]:
    """A queue subscribed to the alarm topic, as an operator's pager would be (confirmed at once:
    a queue of the topic's own account)."""
    sqs, sns = boto3.client("sqs"), boto3.client("sns")
    url = sqs.create_queue(QueueName=f"{stack.prefix}-pager")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    topic = stack.outputs()["AlarmTopic"]
    subscription = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn["QueueArn"])
    yield topic
    sns.unsubscribe(SubscriptionArn=subscription["SubscriptionArn"])


class Watched(LocalStack):
    """The local stack as the smoke reads it, with a session that notes what IAM's simulator
    is asked and answers implicitDeny for what a test refuses (botocore's before-call event,
    once botocore has checked the request against IAM's model); the rest goes to moto."""

    def __init__(self, stack: DevStack, refuse: set[tuple[str, str, str]] | None = None):
        super().__init__(stack)
        self.refuse = refuse or set()
        self.asked: list[tuple[str, str, str]] = []

    def session(self) -> Any:
        session = boto3.Session()
        session.events.register("before-call.iam.SimulatePrincipalPolicy", self._asked)
        return session

    def _asked(self, params: dict[str, Any], **_: Any) -> Any:
        form = params["body"]  # the Query protocol's form fields (one action, one resource)
        asked = (
            form["PolicySourceArn"],
            form["ActionNames.member.1"],
            form["ResourceArns.member.1"],
        )
        self.asked.append(asked)
        if asked not in self.refuse:
            return None  # moto answers
        result = {"EvalActionName": asked[1], "EvalResourceName": asked[2]}
        answer = {"EvaluationResults": [{**result, "EvalDecision": "implicitDeny"}]}
        return AWSResponse("", 200, {}, None), {**answer, "IsTruncated": False}


def smoke(deployed: LocalStack, *, wait: float = 60) -> Smoke:
    return Smoke(deployed, deployed.session(), wait, poll_seconds=0.05, max_poll_seconds=0.05)


def secrets_of(deployed: LocalStack) -> list[str]:
    functions = [deployed.function(lid, "") for lid in deployed.stack.functions]
    return lines(list(check_secrets(functions, deployed.session())))


def lines(results: list[Result]) -> list[str]:
    return [result.line() for result in results]


def role(stack: DevStack, logical_id: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{stack.prefix}-{logical_id}"


def parameter(name: str) -> str:
    return f"arn:aws:ssm:us-east-1:{ACCOUNT}:parameter/whasp-agent/{name}"


def test_a_healthy_local_stack_passes_every_check(stack, pager):
    # given the local stack, its alarm topic with a confirmed subscriber (the pager)
    local = Watched(stack)
    # when the smoke runs against it
    check = smoke(local)
    ok = check.run()
    # then every check passed, one line each
    assert ok, "\n".join(lines(check.results))
    said = "\n".join(lines(check.results))
    for expected in (
        "pass  outputs: all",
        "pass  SSM parameter /whasp-agent/webhook-secret: exists, and WebhookFunction may read it",
        "pass  SSM parameter /whasp-agent/whasp-api-key: exists, and ConsumerFunction, "
        "AdminFunction may read it",
        "pass  SSM parameter /whasp-agent/openai-api-key: exists, and ConsumerFunction, "
        "CompactorFunction may read it",
        "pass  webhook: refuses an unsigned POST (401)",
        "pass  test person: a signed message was taken (200)",
        "pass  test person: erased",
        "pass  alarms: all 15 exist, each with its actions",
        f"pass  alarm topic {pager}: 1 confirmed subscriber(s) (sqs)",
    ):
        assert expected in said
    assert "answered within" in said and "sent into the void" in said
    # and Meta's parameters, which a whasp stack's webhook never reads, were not asked for
    assert "meta" not in said
    # and IAM (the stack's own evaluation of its roles) was asked about each reader's own role,
    # the action and the secret's ARN
    asked = (role(stack, "WebhookRole"), "ssm:GetParameter", parameter("webhook-secret"))
    assert asked in local.asked
    key = next(r for r in local.asked if r[1] == "secretsmanager:GetSecretValue")
    assert key[2] == stack.outputs()["PersonKeySecretArn"]
    # and nothing went to the test person, and nothing of them remains
    assert stack.whasp.texts_to(TEST_PERSON) == []
    assert [i["sk"] for i in stack.view(TEST_PERSON).items if i["sk"].startswith("MSG#")] == []
    # and the functions' logs never name them
    assert TEST_PERSON.lstrip("+") not in stack.log_path.read_text()


def test_a_missing_secret_fails_saying_which_and_who_reads_it(stack, pager):
    # given the webhook's signing secret was never created
    ssm = boto3.client("ssm")
    name = "/whasp-agent/webhook-secret"
    value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    ssm.delete_parameter(Name=name)
    try:
        # when the smoke runs
        check = smoke(Watched(stack))
        ok = check.run()
    finally:
        ssm.put_parameter(Name=name, Value=value, Type="SecureString")
    # then it fails, naming the parameter and its reader, and the test event cannot be signed
    assert not ok
    said = lines(check.results)
    assert (
        f"FAIL  SSM parameter {name}: does not exist: create it (docs/deploy.md, step 1); "
        "read by WebhookFunction (WEBHOOK_SECRET_PARAM)"
    ) in said
    assert f"FAIL  test person: not tried: {name} could not be read (ParameterNotFound)" in said
    # and the other checks still ran
    assert "pass  webhook: refuses an unsigned POST (401)" in said


def test_a_role_that_may_not_read_its_secret_fails_saying_whose(stack):
    # given IAM refuses the consumer's role the OpenAI key (as a role without its grant would)
    refused = (role(stack, "ConsumerRole"), "ssm:GetParameter", parameter("openai-api-key"))
    # when the secrets are checked
    said = secrets_of(Watched(stack, {refused}))
    # then that secret's line says which role may not read it, and IAM's decision
    assert (
        "FAIL  SSM parameter /whasp-agent/openai-api-key: ConsumerFunction's role may not "
        "ssm:GetParameter it (implicitDeny)"
    ) in said


def test_a_secret_under_a_key_of_yours_needs_decrypt_on_that_key(stack):
    # given the OpenAI key is stored under a customer managed KMS key (the template grants no
    # role kms:Decrypt on a key of yours: deploy.md's step 1 asks you to)
    kms, ssm = boto3.client("kms"), boto3.client("ssm")
    key = kms.create_key(Description="the operator's own")["KeyMetadata"]
    kms.create_alias(AliasName=f"alias/{stack.prefix}", TargetKeyId=key["KeyId"])
    name = "/whasp-agent/openai-api-key"
    value = ssm.get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
    ssm.put_parameter(
        Name=name, Value=value, Type="SecureString", KeyId=f"alias/{stack.prefix}", Overwrite=True
    )
    local = Watched(stack)
    try:
        # when the secrets are checked
        said = secrets_of(local)
    finally:
        ssm.put_parameter(
            Name=name, Value=value, Type="SecureString", KeyId="alias/aws/ssm", Overwrite=True
        )
    # then that secret's line names each role that may not decrypt it, and the key
    assert (
        f"FAIL  SSM parameter {name}: ConsumerFunction's role may not kms:Decrypt its key "
        f"{key['Arn']} (implicitDeny); CompactorFunction's role may not kms:Decrypt its key "
        f"{key['Arn']} (implicitDeny)"
    ) in said
    # and IAM was asked about no key for the parameters under AWS's own (alias/aws/ssm)
    decrypts = {asked for asked in local.asked if asked[1] == "kms:Decrypt"}
    assert decrypts == {
        (role(stack, reader), "kms:Decrypt", key["Arn"])
        for reader in ("ConsumerRole", "CompactorRole")
    }


class TakesAnything(LoopbackServer):
    """A webhook that answers 200 to anything, signed or not."""

    def handle(self, request: Request) -> Reply:
        return Reply.json(200, {"ok": True})


class WebhookReplaced(Watched):
    """The local stack, its WebhookUrl pointing at another endpoint."""

    def __init__(self, stack: DevStack, url: str):
        super().__init__(stack)
        self.url = url

    def description(self) -> tuple[dict[str, str], dict[str, str]]:
        outputs, parameters = super().description()
        return {**outputs, "WebhookUrl": self.url}, parameters


def test_a_webhook_that_accepts_an_unsigned_post_fails(stack, pager):
    # given the stack's webhook is replaced by one that takes anything
    with TakesAnything() as anything:
        # when the smoke runs (a short wait: nothing will answer the test person)
        deployed = WebhookReplaced(stack, f"{anything.url}/webhook")
        check = smoke(deployed, wait=0.5)
        ok = check.run()
    # then it fails, saying the webhook took an unsigned POST, and the message went nowhere
    assert not ok
    said = lines(check.results)
    assert (
        "FAIL  webhook: accepted an unsigned POST (200): anyone can write to the agent as anyone"
    ) in said
    assert any(line.startswith("FAIL  test person: not answered within 0 s") for line in said)


def test_alarms_nobody_confirmed_and_an_alarm_gone_are_reported(stack):
    # given the alarm topic's only subscriber is the email nobody confirmed (no pager), and one
    # alarm deleted by hand
    cloudwatch = boto3.client("cloudwatch")
    deleted = stack.alarms["EventDeadLetterAlarm"]
    alarm = cloudwatch.describe_alarms(AlarmNames=[deleted])["MetricAlarms"][0]
    cloudwatch.delete_alarms(AlarmNames=[deleted])
    local = LocalStack(stack)
    _, parameters = local.description()
    conditions = cfn.Resolver(stack.template, parameters)
    try:
        # when the alarms are checked
        said = lines(
            list(check_alarms(stack.template, conditions, local.resources(), boto3.Session()))
        )
    finally:
        keys = ("Namespace", "MetricName", "Dimensions", "Statistic", "Period", "Threshold")
        cloudwatch.put_metric_alarm(
            AlarmName=deleted,
            EvaluationPeriods=alarm["EvaluationPeriods"],
            ComparisonOperator=alarm["ComparisonOperator"],
            AlarmActions=alarm["AlarmActions"],
            **{k: alarm[k] for k in keys},
        )
    # then both are FAIL lines saying why
    topic = stack.outputs()["AlarmTopic"]
    assert said == [
        "FAIL  alarms: not in the stack: EventDeadLetterAlarm",
        f"FAIL  alarm topic {topic}: no confirmed subscriber: alarms reach nobody (1 pending "
        "confirmation: follow the link AWS emailed); subscribe AlarmEmail, a pager or a chat to it",
    ]


# ------------------------------------------------------------------ Meta


@pytest.fixture(scope="module")
def meta_stack(tmp_path_factory) -> Iterator[DevStack]:
    log = tmp_path_factory.mktemp("smoke-meta") / "stack.log"
    with DevStack(env={}, level="quiet", provider="meta", log_path=log) as stack:
        yield stack


@pytest.mark.slow  # a stack of its own: about 10 s with its start and stop (make test-slow)
def test_a_meta_stack_answers_the_subscription_check_and_the_test_person(meta_stack):
    # given a local stack serving Meta's Cloud API, a pager on its alarm topic
    sqs = boto3.client("sqs")
    url = sqs.create_queue(QueueName=f"{meta_stack.prefix}-pager")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    topic = meta_stack.outputs()["AlarmTopic"]
    boto3.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn["QueueArn"])
    # when the smoke runs
    check = smoke(Watched(meta_stack))
    ok = check.run()
    # then every check passed: Meta's secrets, its subscription check both ways, the test person
    said = "\n".join(lines(check.results))
    assert ok, said
    for expected in (
        "pass  SSM parameter /whasp-agent/meta-app-secret: exists, and WebhookFunction may read it",
        "pass  SSM parameter /whasp-agent/meta-verify-token: exists",
        "pass  webhook: answers Meta's subscription check with its challenge",
        "pass  webhook: refuses a wrong verify token (401)",
        "pass  test person: erased",
    ):
        assert expected in said
    assert "webhook-secret" not in said and "whasp-api-key" not in said
    # and the Graph API stand-in saw no send and no read receipt
    assert meta_stack.graph.sent == [] and meta_stack.graph.reads == []
