"""The local stack refuses what IAM refuses (devstack.iam), and the template's roles suffice.

Every function of the local stack runs with its role's guard: each AWS call it makes is
authorised as IAM authorises it in AWS, against the role template.yaml gives it for the stack's
parameters. tests/conftest.py fails any test whose stack was refused a call; here:
- calls outside a role are refused with AWS's AccessDenied (probes run in a process of their
  own with a function's guard, as the function's own process has it);
- Scheduler refuses a role whose trust policy does not name it with the group's ARN;
- the sufficiency run (slow): one stack with every optional part on, through every path (a turn,
  media, compaction, a tool, a follow-up asked and fired, the console's seat, export, erasure,
  STOP, "forget me"), whose roles are refused nothing, and which made the calls it should have.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from devstack.clock import SQS_CLOCK
from devstack.iam.guard import ENV
from devstack.resources import ROOT, load_template
from devstack.stack import DevStack

MAYA = "+447700900123"

PROBE = """
import json, sys
from devstack.iam.guard import install_from_environment
install_from_environment()
import boto3
from botocore.exceptions import ClientError
service, operation, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
client = boto3.client(service)
try:
    getattr(client, operation)(**params)
    print(json.dumps({"ok": True}))
except ClientError as error:
    print(json.dumps({"ok": False, "code": error.response["Error"]["Code"],
                      "message": error.response["Error"]["Message"]}))
"""


def probe(stack: DevStack, function: str, service: str, operation: str, **params: Any) -> dict:
    """`operation` made from a process holding `function`'s guard (as its own process does)."""
    env = {**stack.pools[function]._env, **{k: v for k, v in os.environ.items() if k == "PATH"}}
    result = subprocess.run(  # noqa: S603 (our interpreter, our probe)
        [sys.executable, "-c", PROBE, service, operation, json.dumps(params)],
        env={**env, ENV: env[ENV]},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def consumer_schedules(stack: DevStack, role_arn: str) -> dict:
    """The consumer's process creates a schedule in the stack's group with `role_arn`."""
    return probe(
        stack,
        "ConsumerFunction",
        "scheduler",
        "create_schedule",
        Name="fu-probe",
        GroupName=stack.schedule_group,
        ScheduleExpression="at(2030-01-01T09:00:00)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage",
            "RoleArn": role_arn,
            "Input": "{}",
        },
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Any:
    with DevStack(
        env={},
        parameters={"FollowUps": "true"},
        level="quiet",
        log_path=tmp_path_factory.mktemp("iam") / "stack.log",
        warm=False,  # its functions are never invoked: probes run with their guards
    ) as stack:
        yield stack


@pytest.mark.xdist_group("iam-stack")
@pytest.mark.iam_refusals_expected
def test_a_consumer_scanning_the_table_is_refused_as_aws_refuses_it(stack):
    # given the consumer's role (no Scan: a turn reads one person's partition)
    table = stack.resources.table_name
    # when its process scans the memory table
    answer = probe(stack, "ConsumerFunction", "dynamodb", "scan", TableName=table)
    # then DynamoDB's AccessDeniedException, in AWS's words, and the record names the call
    assert answer["ok"] is False and answer["code"] == "AccessDeniedException"
    assert "ConsumerRole/" in answer["message"]
    assert "is not authorized to perform: dynamodb:Scan on resource: " in answer["message"]
    assert answer["message"].endswith(
        "because no identity-based policy allows the dynamodb:Scan action"
    )
    refused = [r for r in stack.iam_refusals() if r["action"] == "dynamodb:Scan"]
    assert refused and refused[-1]["role"] == "ConsumerRole"
    # while the same role may read the person's partition (a Query on the table)
    query = probe(
        stack,
        "ConsumerFunction",
        "dynamodb",
        "query",
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "nobody"}},
    )
    assert query == {"ok": True}


@pytest.mark.xdist_group("iam-stack")
@pytest.mark.iam_refusals_expected
def test_the_admin_querying_another_table_is_refused(stack):
    # given a table of the account that is not the stack's memory
    import boto3

    boto3.client("dynamodb").create_table(
        TableName="someone-elses",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # when the admin function's process queries it
    answer = probe(
        stack,
        "AdminFunction",
        "dynamodb",
        "query",
        TableName="someone-elses",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "x"}},
    )
    # then AccessDenied, naming the other table
    assert answer["ok"] is False and answer["code"] == "AccessDeniedException"
    assert "table/someone-elses" in answer["message"]


@pytest.mark.xdist_group("iam-stack")
@pytest.mark.iam_refusals_expected
def test_passing_a_role_scheduler_may_not_be_given_is_refused(stack):
    # given the consumer passes its own role (not the scheduler's) as a schedule's target role
    consumer_role = stack.iam.roles["ConsumerRole"].arn
    answer = consumer_schedules(stack, consumer_role)
    # then iam:PassRole is refused: the consumer may pass the scheduler's role only
    assert answer["ok"] is False and answer["code"] == "AccessDeniedException"
    assert "iam:PassRole" in answer["message"] and consumer_role in answer["message"]
    assert stack.scheduler.pending() == []


# --------------------------------------------------------------------------- trust


def _template_with_trust(condition: dict[str, Any]) -> dict[str, Any]:
    template = copy.deepcopy(load_template())
    role = template["Resources"]["FollowUpSchedulerRole"]["Properties"]
    role["AssumeRolePolicyDocument"]["Statement"][0]["Condition"] = condition
    return template


@pytest.mark.iam_refusals_expected
def test_a_scheduler_role_trusting_the_wrong_source_is_refused_by_scheduler(tmp_path):
    # given a scheduler role whose trust names schedule ARNs: Scheduler presents the GROUP's ARN
    # ("Confused deputy prevention in EventBridge Scheduler")
    wrong = {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnLike": {
            "aws:SourceArn": {
                "Fn::Sub": "arn:${AWS::Partition}:scheduler:${AWS::Region}:${AWS::AccountId}"
                ":schedule/${FollowUpScheduleGroup}/*"
            }
        },
    }
    with DevStack(
        env={},
        parameters={"FollowUps": "true"},
        template=_template_with_trust(wrong),
        level="quiet",
        log_path=tmp_path / "stack.log",
        warm=False,  # its functions are never invoked: the probe runs with the guard
    ) as stack:
        # when the consumer creates a schedule with it (its own calls allowed)
        answer = consumer_schedules(stack, stack.iam.roles["FollowUpSchedulerRole"].arn)
        # then Scheduler's ValidationException: it cannot assume the role; nothing scheduled
        assert answer == {
            "ok": False,
            "code": "ValidationException",
            "message": "The execution role you provide must allow AWS EventBridge Scheduler to "
            "assume the role.",
        }
        assert stack.scheduler.pending() == []


def test_a_function_role_the_lambda_service_may_not_assume_stops_the_stack(tmp_path):
    # given the consumer's role trusting another service
    template = copy.deepcopy(load_template())
    trust = template["Resources"]["ConsumerRole"]["Properties"]["AssumeRolePolicyDocument"]
    trust["Statement"][0]["Principal"] = {"Service": "ec2.amazonaws.com"}
    # when the stack is created, then it fails as CloudFormation would, naming the role
    with pytest.raises(Exception, match="cannot assume ConsumerRole"):
        DevStack(
            env={}, template=template, level="quiet", log_path=tmp_path / "s.log", warm=False
        ).start()


# --------------------------------------------------------------------------- sufficiency

EVERY_PART = {"FollowUps": "true", "OperatorConsole": "true", "ExampleBookingTool": "true"}
# what the run below must have asked IAM for, so that "nothing refused" means something
MUST_SEE = {
    ("ConsumerRole", "dynamodb:ConditionCheckItem"),
    ("ConsumerRole", "dynamodb:BatchGetItem"),
    ("ConsumerRole", "dynamodb:PutItem"),
    ("ConsumerRole", "scheduler:CreateSchedule"),
    ("ConsumerRole", "iam:PassRole"),
    ("ConsumerRole", "lambda:InvokeFunction"),
    ("ConsumerRole", "s3:PutObject"),
    ("ConsumerRole", "events:PutEvents"),
    ("CompactorRole", "dynamodb:UpdateItem"),
    ("CompactorRole", "s3:PutObject"),
    ("AdminRole", "dynamodb:BatchGetItem"),
    ("AdminRole", "dynamodb:Query"),
    ("WebhookRole", "sqs:SendMessage"),
}


@pytest.mark.slow  # a whole stack through every path (about a minute): make test-slow
@pytest.mark.iam_refusals_expected  # recorded, not refused: asserted below, each named
def test_every_path_on_a_stack_with_every_part_on_is_granted_what_it_calls(tmp_path):
    params = {**EVERY_PART, "ArchiveBucket": f"archive-{os.getpid()}"}
    with (
        SQS_CLOCK.kept(),
        DevStack(
            env={},
            parameters=params,
            extra_env={"COMPACT_THRESHOLD": "6", "COMPACT_KEEP": "2"},
            iam="record",  # every call a role would be refused, not only the first
            level="quiet",
            log_path=tmp_path / "stack.log",
        ) as stack,
    ):
        steps: list[str] = []

        def step(name: str, ok: bool) -> None:
            steps.append(f"{'ok' if ok else 'NOT DONE'}: {name}")

        # a turn, and enough of them to compact (threshold 6)
        for n, text in enumerate(("Hi, I'm Maya", "I start the new job on Monday", "Nervous!")):
            stack.send_message(MAYA, text)
            step(f"turn {n + 1}", stack.wait_for_replies(MAYA, n + 1, timeout=30))
        # media: a photo, downloaded and kept between attempts
        url = stack.whasp.add_media(b"\x89PNG\r\n\x1a\n" + b"0" * 64, "image/png")
        event = stack.message_event(MAYA, "")
        event["data"]["message"] = {
            "id": "msg_photo",
            "type": "image",
            "caption": "my new desk",
            "media": {"url": url, "mime_type": "image/png", "size": 72},
            "timestamp": event["created_at"],
        }
        stack._expect_accepted(stack.post(event))
        step("photo", stack.wait_for_replies(MAYA, 4, timeout=30))
        # a tool: the example booking
        stack.send_message(MAYA, "Can you book me in tomorrow at 10?")
        step("booking", stack.wait_for_replies(MAYA, 5, timeout=30))
        # a follow-up asked, then fired at nine on her clock
        stack.send_message(MAYA, "Remind me tomorrow at 9 to call the dentist")
        step("follow-up asked", stack.wait_for_replies(MAYA, 6, timeout=30))
        pending = stack.scheduler.pending()
        if pending:
            at = datetime.fromisoformat(pending[0]["ScheduleExpression"][3:-1])
            nine = at.replace(tzinfo=ZoneInfo(pending[0]["ScheduleExpressionTimezone"]))
            SQS_CLOCK.advance(nine.astimezone(UTC).timestamp() - SQS_CLOCK.now() + 1)
            step("follow-up fired", stack.wait_for_replies(MAYA, 7, timeout=30))
        else:
            step("follow-up scheduled", False)
        stack.wait_idle(timeout=60)
        # the operator's seat: facts, take over, answer, hand back, the waiting list
        status, _ = stack.admin("POST", f"/people/{MAYA}/facts", {"text": "Has a dog"})
        step("add a fact", status == 200)
        step("take over", stack.admin("POST", f"/people/{MAYA}/handoff")[0] == 200)
        stack.send_message(MAYA, "Is anyone there?")  # stored for the human; operators told
        stack.wait_idle(timeout=60)  # before the hand-back, or the agent would answer it
        status, _ = stack.admin(
            "POST", f"/people/{MAYA}/messages", {"text": "Sam here."}, **{"Idempotency-Key": "k1"}
        )
        step("operator answers", status == 200)
        step("hand back", stack.admin("DELETE", f"/people/{MAYA}/handoff")[0] == 200)
        step("waiting list", stack.admin("GET", "/handoffs")[0] == 200)
        # STOP, and writing again
        stack.send_message(MAYA, "STOP")
        stack.send_message(MAYA, "I'm back")
        stack.wait_idle(timeout=60)
        # export and erasure by an operator
        step("export", stack.admin("GET", f"/people/{MAYA}")[0] == 200)
        step("erase", stack.admin("DELETE", f"/people/{MAYA}")[0] == 200)
        # "forget me" in the chat, confirmed
        other = "+447700900456"
        stack.send_message(other, "Hello there")
        stack.wait_for_replies(other, 1, timeout=30)
        stack.send_message(other, "forget me")
        stack.wait_for_replies(other, 2, timeout=30)
        stack.send_message(other, "yes")
        stack.wait_idle(timeout=60)

        refused = stack.iam_refusals()
        seen = {(d["role"], d["action"]) for d in stack.iam_decisions() if d["allowed"]}

    # then AWS would have refused nothing (named, if it did), every path ran, and the run made
    # the calls that could have been refused
    assert not refused, "\n".join(
        sorted({f"{r['function']}: {r['action']} on {r['resource']}" for r in refused})
    )
    assert all(s.startswith("ok") for s in steps), steps
    assert seen >= MUST_SEE, sorted(MUST_SEE - seen)


@pytest.mark.slow  # a Meta stack with voice replies (about half a minute): make test-slow
@pytest.mark.iam_refusals_expected  # recorded, not refused: asserted below, each named
def test_a_voice_reply_on_meta_is_granted_what_it_calls(tmp_path):
    # given a Meta stack with VoiceReplies=mirror, every call recorded against its role
    # (voice replies need provider meta: the whasp run above cannot reach Polly)
    with DevStack(
        env={},
        provider="meta",
        parameters={"VoiceReplies": "mirror"},
        iam="record",
        level="quiet",
        log_path=tmp_path / "stack.log",
    ) as stack:
        # when Maya sends a voice note
        stack.send_voice_note(MAYA, "How far should I run today?")
        answered = stack.wait_for_replies(MAYA, 1, timeout=60)
        notes = [r for r in stack.replies_to(MAYA) if r.get("audio")]
        refused = stack.iam_refusals()
        seen = {(d["role"], d["action"]) for d in stack.iam_decisions() if d["allowed"]}
    # then she got one voice note, AWS would have refused nothing, and Polly was asked as the
    # consumer's role
    assert answered and len(notes) == 1
    assert not refused, sorted({f"{r['function']}: {r['action']}" for r in refused})
    assert ("ConsumerRole", "polly:SynthesizeSpeech") in seen


@pytest.mark.xdist_group("iam-stack")
def test_an_operator_can_ask_iam_from_outside_what_a_role_may_do(stack):
    # given the template's roles in the local IAM, as CloudFormation creates them
    import boto3

    iam = boto3.client("iam")
    consumer = stack.iam.roles["ConsumerRole"].arn
    table = f"arn:aws:dynamodb:us-east-1:123456789012:table/{stack.resources.table_name}"
    # when the operator simulates the consumer's role (IAM's SimulatePrincipalPolicy)
    answer = iam.simulate_principal_policy(
        PolicySourceArn=consumer,
        ActionNames=["dynamodb:Query", "dynamodb:Scan"],
        ResourceArns=[table],
    )
    # then the answers are the local evaluation's: Query allowed, Scan implicitly denied
    decisions = {e["EvalActionName"]: e["EvalDecision"] for e in answer["EvaluationResults"]}
    assert decisions == {"dynamodb:Query": "allowed", "dynamodb:Scan": "implicitDeny"}
    assert iam.get_role(RoleName=consumer.rsplit("/", 1)[-1])["Role"]["Arn"] == consumer


def test_scheduler_fires_as_its_role_and_a_refused_send_goes_to_the_dead_letter_queue(tmp_path):
    # given a scheduler role that may no longer send to the event queue (only to its DLQ)
    template = copy.deepcopy(load_template())
    role = template["Resources"]["FollowUpSchedulerRole"]["Properties"]
    statements = role["Policies"][0]["PolicyDocument"]["Statement"]
    role["Policies"][0]["PolicyDocument"]["Statement"] = [
        s for s in statements if s.get("Sid") != "DueFollowUps"
    ]
    with (
        SQS_CLOCK.kept(),
        DevStack(
            env={},
            parameters={"FollowUps": "true"},
            template=template,
            level="quiet",
            log_path=tmp_path / "stack.log",
            warm=False,  # its functions are never invoked: Scheduler sends to the queue
        ) as stack,
    ):
        import boto3

        # and a schedule of the stack's, due now, with the stack's role and dead-letter queue
        queues = stack.resources.queue_urls
        send = {
            "QueueUrl": queues["EventQueue"],
            "MessageBody": "{}",
            "MessageGroupId": "g",
            "MessageDeduplicationId": "d",
        }
        boto3.client("scheduler").create_schedule(
            Name="fu-probe",
            GroupName=stack.schedule_group,
            ScheduleExpression="at(2020-01-01T09:00:00)",
            FlexibleTimeWindow={"Mode": "OFF"},
            ActionAfterCompletion="DELETE",
            Target={
                "Arn": "arn:aws:scheduler:::aws-sdk:sqs:sendMessage",
                "RoleArn": stack.iam.roles["FollowUpSchedulerRole"].arn,
                "Input": json.dumps(send),
                "DeadLetterConfig": {"Arn": stack.resources.queue_arns["FollowUpDeadLetterQueue"]},
            },
        )
        # when Scheduler fires it (as the role: IAM refuses the send)
        stack.scheduler.fire_due()
        # then nothing reached the event queue; the dead-letter event says AccessDenied
        assert stack.scheduler.fired == []
        [dead] = stack.scheduler.dead_lettered
        assert dead["ERROR_CODE"] == "AccessDenied" and "sqs:SendMessage" in dead["ERROR_MESSAGE"]
        assert stack.queue_depth("EventQueue") == 0
