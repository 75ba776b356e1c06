"""template.yaml, as CloudFormation will run it: linted, then transformed by the SAM translator
(offline) and checked for the guarantees the design leans on: per-person FIFO ordering with a
parked-event queue, retries that cannot overlap, bounded compaction retries, least-privilege IAM,
logs that expire, a memory table that survives mistakes, and a stream filter that fires the
compactor only when the consumer raised the flag.

Resources are found by their role in the flow (the queue the consumer reads, the table whose
stream the compactor reads), not by logical id, so renaming a resource does not break a test.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from samtranslator.translator.arn_generator import ArnGenerator
from samtranslator.translator.transform import transform

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
STREAM_SAMPLE = ROOT / "events" / "compactor-stream-record.json"
# Parameters without a default that `sam deploy --guided` would ask for.
PARAMETERS = {"WhaspApiUrl": "https://api.whasp.example"}
# The boolean the consumer sets on a person's STATE item when compaction is due
# (memagent.store.memory_store).
COMPACTION_FLAG = "compaction_due"
# Services holding the person's data: wildcards on these would undo least privilege.
DATA_SERVICES = ("dynamodb", "sqs", "s3", "ssm", "secretsmanager", "kms", "logs")
# Actions AWS offers on Resource "*" only, so a policy has no narrower choice (X-Ray's and
# CloudWatch's metric API have no resource-level permissions; neither has Bedrock's bearer-token
# action, which the template narrows by condition to short-term tokens instead).
RESOURCE_STAR_ONLY = frozenset(
    {
        "bedrock:CallWithBearerToken",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "cloudwatch:PutMetricData",
        # its one resource type (a lexicon) is optional: a request naming none is authorised
        # on "*" (the Service Authorization Reference; devstack/iam/actions.py)
        "polly:SynthesizeSpeech",
    }
)
Template = dict[str, Any]


# --------------------------------------------------------------------------- transform, offline


class OfflinePolicyLoader:
    """Stands in for samtranslator's ManagedPolicyLoader, which asks IAM for the ARNs of managed
    policies named in `Policies`. An empty map keeps such names as they are (a later test flags
    any *FullAccess one) and makes no AWS call."""

    def load(self) -> dict[str, str]:
        return {}


def _with_placeholder_code(template: Template) -> Template:
    """Local CodeUri/ContentUri become S3 URIs, as `sam validate` and `sam package` do."""
    template = copy.deepcopy(template)
    for logical_id, resource in template.get("Resources", {}).items():
        properties = resource.get("Properties") or {}
        for key in ("CodeUri", "ContentUri"):
            if isinstance(properties.get(key), str) and not properties[key].startswith("s3://"):
                properties[key] = f"s3://placeholder-bucket/{logical_id}.zip"
    return template


# what sam_transform made, by its template and parameters (the modules of tests/infra ask for
# the same shapes: each transform takes about half a second of CPU)
_TRANSFORMED: dict[str, Template] = {}


def sam_transform(template: Template, parameters: dict[str, str]) -> Template:
    """Turn a SAM template into the CloudFormation template AWS would deploy, without AWS.

    Once per template and parameters in a process; each call gets a copy of its own."""
    key = json.dumps([template, parameters], sort_keys=True, default=str)
    if key not in _TRANSFORMED:
        with pytest.MonkeyPatch.context() as patch:
            # the translator asks boto3 for a region, only to fill AWS::Region and pick the
            # partition
            patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            patch.delenv("AWS_PROFILE", raising=False)
            patch.setattr(ArnGenerator, "BOTO_SESSION_REGION_NAME", "us-east-1")
            _TRANSFORMED[key] = transform(
                _with_placeholder_code(template), parameters, OfflinePolicyLoader()
            )
    return copy.deepcopy(_TRANSFORMED[key])


# --------------------------------------------------------------------------- template reading


def resources(template: Template, type_: str) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in template["Resources"].items() if v["Type"] == type_}


def target(value: Any) -> str | None:
    """The logical id behind a Ref or Fn::GetAtt, else None."""
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        attribute = value["Fn::GetAtt"]
        return attribute[0] if isinstance(attribute, list) else attribute.split(".")[0]
    return None


def references(node: Any) -> set[str]:
    """Every logical id or parameter a template fragment refers to (Ref, GetAtt, Sub, If)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if (name := target(node)) is not None:
            found.add(name)
        if "Fn::Sub" in node:
            text = node["Fn::Sub"][0] if isinstance(node["Fn::Sub"], list) else node["Fn::Sub"]
            found |= {m.split(".")[0] for m in re.findall(r"\$\{([^}!]+)\}", text)}
        for value in node.values():
            found |= references(value)
    elif isinstance(node, list):
        for value in node:
            found |= references(value)
    return found


def evaluate(template: Template, node: Any, parameters: dict[str, Any]) -> Any:
    """Resolve the intrinsics a property may use (Ref to a parameter, Fn::If on conditions)
    with the given parameter values, falling back to the defaults: what a stack gets."""

    def value_of(name: str) -> Any:
        declared = template["Parameters"][name]
        value = parameters[name] if name in parameters else declared.get("Default")
        if declared.get("Type") == "CommaDelimitedList" and isinstance(value, str):
            return value.split(",")  # what a Ref to a list parameter gives
        return value

    def condition(node: Any) -> bool:
        if _is_condition(node):
            return condition(template["Conditions"][node["Condition"]])
        if isinstance(node, dict) and "Fn::Equals" in node:
            left, right = (evaluate(template, v, parameters) for v in node["Fn::Equals"])
            return str(left) == str(right)
        if isinstance(node, dict) and "Fn::Not" in node:
            return not condition(node["Fn::Not"][0])
        if isinstance(node, dict) and "Fn::And" in node:
            return all(condition(c) for c in node["Fn::And"])
        if isinstance(node, dict) and "Fn::Or" in node:
            return any(condition(c) for c in node["Fn::Or"])
        raise AssertionError(f"unsupported condition {node!r}")

    if isinstance(node, dict) and "Ref" in node and node["Ref"] in template.get("Parameters", {}):
        return value_of(node["Ref"])
    if isinstance(node, dict) and "Fn::If" in node:
        name, when_true, when_false = node["Fn::If"]
        chosen = when_true if condition(template["Conditions"][name]) else when_false
        return evaluate(template, chosen, parameters)
    if isinstance(node, dict) and "Fn::Join" in node:
        separator, parts = node["Fn::Join"]
        parts = evaluate(template, parts, parameters)
        return separator.join(str(evaluate(template, part, parameters)) for part in parts)
    if _is_condition(node):
        return condition(node)
    return node


def _is_condition(node: Any) -> bool:
    """{"Condition": "Name"}: a reference to one of the template's conditions (not an IAM
    statement's Condition block)."""
    return (
        isinstance(node, dict)
        and list(node) == ["Condition"]
        and isinstance(node["Condition"], str)
    )


def deployed(template: Template, resource: dict[str, Any], parameters: dict[str, Any]) -> bool:
    """Whether a resource is in the stack: its Condition, if any, holds for these parameters."""
    name = resource.get("Condition")
    return name is None or bool(evaluate(template, {"Condition": name}, parameters))


def driving_parameters(template: Template, node: Any) -> set[str]:
    """The parameters a property depends on, directly or through the conditions it uses."""
    names: set[str] = set()
    pending = [node]
    while pending:
        current = pending.pop()
        names |= references(current) & set(template.get("Parameters", {}))
        if isinstance(current, dict):
            if "Fn::If" in current:
                pending.append(template["Conditions"][current["Fn::If"][0]])
            if "Condition" in current and isinstance(current["Condition"], str):
                pending.append(template["Conditions"][current["Condition"]])
            pending.extend(current.values())
        elif isinstance(current, list):
            pending.extend(current)
    return names


def event_source_mapping(
    template: Template, source_type: str, *, fifo: bool | None = None
) -> dict[str, Any]:
    """The one event source mapping whose source is a resource of `source_type` (and, for a
    queue, FIFO or not, when `fifo` says)."""
    found = []
    for esm in resources(template, "AWS::Lambda::EventSourceMapping").values():
        source = template["Resources"][target(esm["Properties"]["EventSourceArn"])]
        is_fifo = bool(source.get("Properties", {}).get("FifoQueue"))
        if source["Type"] == source_type and fifo in (None, is_fifo):
            found.append(esm["Properties"])
    assert len(found) == 1, f"expected one event source mapping from a {source_type}"
    return found[0]


def mapped_function(cfn: Template, mapping: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The function an event source mapping invokes, through the alias it names."""
    alias = cfn["Resources"][target(mapping["FunctionName"])]
    assert alias["Type"] == "AWS::Lambda::Alias", "the mapping must invoke the alias"
    version = cfn["Resources"][target(alias["Properties"]["FunctionVersion"])]
    assert version["Type"] == "AWS::Lambda::Version"
    function_id = target(version["Properties"]["FunctionName"])
    assert target(alias["Properties"]["FunctionName"]) == function_id
    return function_id, cfn["Resources"][function_id]


def consumer_mapping(cfn: Template) -> dict[str, Any]:
    return event_source_mapping(cfn, "AWS::SQS::Queue", fifo=True)


def compaction_retry_mapping(cfn: Template) -> dict[str, Any]:
    """The mapping of the compactor's failure queue (a standard queue) to the compactor."""
    return event_source_mapping(cfn, "AWS::SQS::Queue", fifo=False)


def compactor_mapping(cfn: Template) -> dict[str, Any]:
    return event_source_mapping(cfn, "AWS::DynamoDB::Table")


def event_queue_id(cfn: Template) -> str:
    return target(consumer_mapping(cfn)["EventSourceArn"])


def dead_letter_queue_id(cfn: Template) -> str:
    redrive = cfn["Resources"][event_queue_id(cfn)]["Properties"]["RedrivePolicy"]
    return target(redrive["deadLetterTargetArn"])


def compaction_failure_queue_id(cfn: Template) -> str:
    return target(compactor_mapping(cfn)["DestinationConfig"]["OnFailure"]["Destination"])


def queue_alarms(cfn: Template, queue_id: str) -> list[str]:
    return [
        alarm_id
        for alarm_id, alarm in resources(cfn, "AWS::CloudWatch::Alarm").items()
        if alarm["Properties"].get("Namespace") == "AWS/SQS"
        and any(
            dimension["Name"] == "QueueName" and target(dimension["Value"]) == queue_id
            for dimension in alarm["Properties"].get("Dimensions", [])
        )
    ]


def policy_statements(node: Any) -> Iterator[dict[str, Any]]:
    """Every IAM statement in a fragment, including those inside Fn::If branches."""
    if isinstance(node, dict):
        if isinstance(node.get("Statement"), list):
            yield from (s for s in node["Statement"] if isinstance(s, dict))
        for value in node.values():
            yield from policy_statements(value)
    elif isinstance(node, list):
        for value in node:
            yield from policy_statements(value)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


# --------------------------------------------------------------------------- the stream filter


def stream_filter_admits(patterns: list[str], record: dict[str, Any]) -> bool:
    """Would Lambda hand this DynamoDB stream record to the function? Lambda ORs the filters of
    an event source mapping and matches each pattern against the record as it would deliver it
    (devstack.lambda_harness.passes_filters: moto's EventPattern, the same pattern language,
    and only the dynamodb key, as Lambda's guide says DynamoDB mappings filter on)."""
    from devstack.lambda_harness import passes_filters

    return passes_filters(record, patterns)


def filter_patterns(cfn: Template) -> list[str]:
    return [f["Pattern"] for f in compactor_mapping(cfn)["FilterCriteria"]["Filters"]]


@pytest.fixture
def flagged_record() -> dict[str, Any]:
    """The sample record from events/ (a STATE item whose flag the consumer just raised)."""
    return json.loads(STREAM_SAMPLE.read_text(encoding="utf-8"))["Records"][0]


# =========================================================================== tests


@pytest.fixture(scope="module")
def lint_errors(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """cfn-lint's errors (every rule, including SAM's) for the template as written ("as written")
    and with the SnapStart parameter on ("snapstart on", what `sam validate --lint` lints then),
    from one cfn-lint run: its rules load once. cfn-lint is imported here, not at collection:
    only the worker running these tests pays for it."""
    from cfnlint.api import ManualArgs, lint_by_config

    text = TEMPLATE.read_text(encoding="utf-8")
    switched = re.sub(
        r'(\n  SnapStart:\n    Type: String\n    Default: )"false"', r'\1"true"', text, count=1
    )
    assert switched != text, "the SnapStart parameter's default moved; update this test"
    on = tmp_path_factory.mktemp("snapstart-on") / "template.yaml"
    on.write_text(switched, encoding="utf-8")
    shapes = {str(TEMPLATE): "as written", str(on): "snapstart on"}
    matches = lint_by_config(ManualArgs(templates=list(shapes), regions=["us-east-1", "eu-west-1"]))
    errors: dict[str, list[str]] = {shape: [] for shape in shapes.values()}
    for match in matches:
        if match.rule.severity == "error":
            # an error cfn-lint cannot place in either file (a bad option) fails both tests
            errors.setdefault(shapes.get(match.filename or ""), []).append(str(match))
    unplaced = errors.pop(None, [])
    return {shape: found + unplaced for shape, found in errors.items()}


@pytest.mark.xdist_group("cfn-lint")  # one lint run for both tests: one worker
def test_cfn_lint_reports_no_errors(lint_errors: dict[str, list[str]]) -> None:
    # given the template as written
    # when cfn-lint checks it (every rule, including SAM's), then it reports no error
    errors = lint_errors["as written"]
    assert not errors, "\n".join(errors)


def test_sam_translator_transforms_the_template_offline(cfn: Template) -> None:
    # given the SAM template, when transformed without AWS, then plain CloudFormation comes out
    assert "Transform" not in cfn
    assert not any(r["Type"].startswith("AWS::Serverless::") for r in cfn["Resources"].values())
    assert len(resources(cfn, "AWS::Lambda::Function")) >= 3


def test_a_stack_its_rules_refuse_is_refused_before_deploying(cfn: Template) -> None:
    def accepted(parameters: dict[str, str]) -> bool:
        """Whether CloudFormation's Rules let these parameters through."""

        def holds(expression: Any) -> bool:
            scratch = {**cfn, "Conditions": {**cfn.get("Conditions", {}), "_": expression}}
            return bool(evaluate(scratch, {"Condition": "_"}, parameters))

        return all(
            all(holds(a["Assert"]) for a in rule["Assertions"])
            for rule in cfn.get("Rules", {}).values()
            if "RuleCondition" not in rule or holds(rule["RuleCondition"])
        )

    assert not accepted({"Provider": "whasp", "WhaspApiUrl": ""})
    assert accepted({"Provider": "whasp", "WhaspApiUrl": "https://api.whasp.example"})
    assert accepted({"Provider": "meta", "WhaspApiUrl": ""})
    # and OpenAI's speech with the model on Bedrock (no speech endpoint there) is refused too
    meta = {"Provider": "meta", "WhaspApiUrl": ""}
    assert not accepted({**meta, "VoiceSpeech": "openai", "ModelProvider": "bedrock"})
    assert accepted({**meta, "VoiceSpeech": "openai", "ModelProvider": "openai"})
    assert accepted({**meta, "VoiceSpeech": "polly", "ModelProvider": "bedrock"})


def test_event_queue_is_fifo_per_person_with_a_fifo_dead_letter_queue(cfn: Template) -> None:
    # given the queue the consumer reads
    queue = cfn["Resources"][event_queue_id(cfn)]["Properties"]
    dead_letter = cfn["Resources"][dead_letter_queue_id(cfn)]["Properties"]
    # then it is FIFO, deduplicates and throttles per message group (per person), is encrypted
    assert queue.get("FifoQueue") is True
    assert queue["DeduplicationScope"] == "messageGroup"
    assert queue["FifoThroughputLimit"] == "perMessageGroupId"
    assert queue.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in queue
    # and an event that keeps failing is parked in a FIFO queue kept for 14 days
    assert int(queue["RedrivePolicy"]["maxReceiveCount"]) >= 5
    assert dead_letter.get("FifoQueue") is True
    assert int(dead_letter["MessageRetentionPeriod"]) == 14 * 24 * 3600
    assert dead_letter.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in dead_letter


def test_a_retry_never_overlaps_a_running_attempt(cfn: Template) -> None:
    # given the queue and the consumer that reads it
    mapping = consumer_mapping(cfn)
    queue = cfn["Resources"][target(mapping["EventSourceArn"])]["Properties"]
    consumer = mapped_function(cfn, mapping)[1]["Properties"]
    # then the message stays invisible for at least 6 times the function's timeout (AWS advice)
    assert int(queue["VisibilityTimeout"]) >= 6 * int(consumer["Timeout"])


def consumer_setting(env: dict[str, Any], name: str, field: str) -> Any:
    """A consumer setting as it runs: the template's value, else the code's default (the
    template leaves out what equals it: Lambda allows 4 KB for all the variables together)."""
    from memagent.turn import ConsumerSettings

    return env[name] if name in env else getattr(ConsumerSettings, field)


def test_a_twelve_hour_outage_reaches_no_dead_letter_queue(cfn: Template) -> None:
    from memagent.aws.backoff import RetrySchedule, outage_survived_seconds

    # given the consumer's retry schedule and the queue's redrive policy and retention
    mapping = consumer_mapping(cfn)
    queue = cfn["Resources"][target(mapping["EventSourceArn"])]["Properties"]
    consumer = mapped_function(cfn, mapping)[1]["Properties"]
    env = consumer["Environment"]["Variables"]
    schedule = RetrySchedule(
        base_seconds=float(consumer_setting(env, "RETRY_BASE_SECONDS", "retry_base_seconds")),
        cap_seconds=float(consumer_setting(env, "RETRY_MAX_SECONDS", "retry_max_seconds")),
        jitter=float(consumer_setting(env, "RETRY_JITTER", "retry_jitter")),
    )
    receives = int(queue["RedrivePolicy"]["maxReceiveCount"])
    # then a record failing on every attempt, at the shortest jittered delays, stays out of the
    # dead-letter queue for 12 hours, and the queue keeps it at least that long
    survived = outage_survived_seconds(schedule, receives)
    assert survived >= 12 * 3600
    assert int(queue["MessageRetentionPeriod"]) >= survived
    # and the first retry comes within seconds, far sooner than the crash ceiling
    assert schedule.nominal(1) <= 30 < int(queue["VisibilityTimeout"])
    # and the consumer may set the visibility of that queue's messages, and only that queue's
    assert env["QUEUE_URL"] == {"Ref": target(mapping["EventSourceArn"])}
    role = cfn["Resources"][target(consumer["Role"])]["Properties"]
    grants = [
        statement
        for statement in policy_statements(role)
        if "sqs:ChangeMessageVisibility" in as_list(statement.get("Action", []))
    ]
    assert grants
    assert all(
        as_list(g["Resource"]) == [{"Fn::GetAtt": [target(mapping["EventSourceArn"]), "Arn"]}]
        for g in grants
    )


# What one model call may take at worst: the openai client honours a Retry-After of up to 60 s
OPENAI_RETRY_AFTER_SECONDS = 60
ORDINARY_TEXT_TURN_SECONDS = 12  # the model's reply in a few seconds, the send, 3 DynamoDB calls


def test_a_batch_of_ordinary_text_turns_never_defers_a_record(cfn: Template) -> None:
    # given the consumer, its batch size and its per-record time budget
    mapping = consumer_mapping(cfn)
    consumer = mapped_function(cfn, mapping)[1]["Properties"]
    env = consumer["Environment"]["Variables"]
    budget = float(env["RECORD_TIME_BUDGET_SECONDS"])
    # then a record starts only with time for its worst case (a voice note: download, two
    # model calls with their retries, the send), and a whole batch of ordinary turns starts
    # before the budget is reached
    call = (int(env["OPENAI_MAX_RETRIES"]) + 1) * float(env["OPENAI_TIMEOUT_SECONDS"])
    assert budget >= 2 * (call + OPENAI_RETRY_AFTER_SECONDS)
    batch = int(mapping.get("BatchSize", 10))
    assert int(consumer["Timeout"]) - budget >= batch * ORDINARY_TEXT_TURN_SECONDS
    # and a deferred record is back within seconds
    assert 0 < int(consumer_setting(env, "DEFER_SECONDS", "defer_seconds")) <= 10


def test_the_compactor_fits_its_worst_fold_in_its_timeout(cfn: Template) -> None:
    from memagent.compaction.fold import FOLD_MAX_PARTS

    # given the compactor, its stream batch size and its model settings
    mapping = compactor_mapping(cfn)
    compactor = mapped_function(cfn, mapping)[1]["Properties"]
    env = compactor["Environment"]["Variables"]
    call = (int(env["OPENAI_MAX_RETRIES"]) + 1) * float(env["OPENAI_TIMEOUT_SECONDS"])
    call += OPENAI_RETRY_AFTER_SECONDS
    # then a batch of people, each with the most fold calls a run makes (every part asked
    # again once, shortened), fits the function's timeout
    per_person = 2 * FOLD_MAX_PARTS * call
    assert int(mapping["BatchSize"]) * per_person < int(compactor["Timeout"])


def test_an_outage_alarms_on_the_age_of_the_oldest_message(cfn: Template) -> None:
    queue_id = event_queue_id(cfn)
    alarms = [
        cfn["Resources"][a]["Properties"]
        for a in queue_alarms(cfn, queue_id)
        if cfn["Resources"][a]["Properties"]["MetricName"] == "ApproximateAgeOfOldestMessage"
    ]
    assert alarms
    # long before anything could reach the dead-letter queue
    assert float(alarms[0]["Threshold"]) <= 3600


def test_consumer_reads_small_batches_reports_partial_failures_and_caps_concurrency(
    cfn: Template,
) -> None:
    # given the consumer's event source mapping
    mapping = consumer_mapping(cfn)
    # then batches fit a FIFO receive, one failed person does not fail the batch,
    # and the model quota is protected by a concurrency ceiling
    assert 1 <= int(mapping.get("BatchSize", 10)) <= 10
    assert "ReportBatchItemFailures" in mapping["FunctionResponseTypes"]
    assert mapping["ScalingConfig"]["MaximumConcurrency"]
    maximum = evaluate(cfn, mapping["ScalingConfig"]["MaximumConcurrency"], PARAMETERS)
    assert 2 <= int(maximum) <= 1000


def test_compactor_retries_a_bounded_number_of_times_then_parks_under_an_alarm(
    cfn: Template,
) -> None:
    # given the compactor's event source mapping on the table's stream
    mapping = compactor_mapping(cfn)
    # then a failing batch is split to find the bad record, retried a finite number of times
    assert mapping["BisectBatchOnFunctionError"] is True
    assert 0 <= int(mapping["MaximumRetryAttempts"]) <= 10
    assert "ReportBatchItemFailures" in mapping.get("FunctionResponseTypes", [])
    # and then sent to an SQS queue, retried from there, whose dead-letter queue is alarmed
    failure_queue = compaction_failure_queue_id(cfn)
    assert cfn["Resources"][failure_queue]["Type"] == "AWS::SQS::Queue"
    assert target(compaction_retry_mapping(cfn)["EventSourceArn"]) == failure_queue
    given_up = compaction_dead_letter_queue_id(cfn)
    assert queue_alarms(cfn, given_up), f"no CloudWatch alarm watches {given_up}"


def compaction_dead_letter_queue_id(cfn: Template) -> str:
    queue = cfn["Resources"][compaction_failure_queue_id(cfn)]["Properties"]
    return target(queue["RedrivePolicy"]["deadLetterTargetArn"])


def test_a_failed_compaction_is_retried_later_from_its_queue_through_a_long_outage(
    cfn: Template,
) -> None:
    from memagent.aws.backoff import RetrySchedule, outage_survived_seconds

    # given the compactor's mapping of its failure queue, its retry schedule and the redrive
    mapping = compaction_retry_mapping(cfn)
    function_id, function = mapped_function(cfn, mapping)
    assert function_id == mapped_function(cfn, compactor_mapping(cfn))[0]
    properties = function["Properties"]
    env = properties["Environment"]["Variables"]
    queue = cfn["Resources"][target(mapping["EventSourceArn"])]["Properties"]
    schedule = RetrySchedule(
        base_seconds=float(env["RETRY_BASE_SECONDS"]),
        cap_seconds=float(env["RETRY_MAX_SECONDS"]),
    )
    receives = int(queue["RedrivePolicy"]["maxReceiveCount"])
    # then it retries the queue it reads, one job at a time, reporting failures one by one,
    # a few at once so that the retries after an outage do not crowd the model out
    assert env["FAILURE_QUEUE_URL"] == {"Ref": target(mapping["EventSourceArn"])}
    assert int(mapping["BatchSize"]) == 1
    assert "ReportBatchItemFailures" in mapping["FunctionResponseTypes"]
    assert 2 <= int(mapping["ScalingConfig"]["MaximumConcurrency"]) <= 10
    # and "later": the first retry a while after the failure, within what SQS can delay
    assert 300 <= schedule.nominal(1) <= 900
    # and a job failing on every attempt stays out of the dead-letter queue for 12 hours and
    # more, and the queue keeps it that long; a crashed attempt comes back after its timeout
    survived = outage_survived_seconds(schedule, receives) + schedule.nominal(1)
    assert survived >= 12 * 3600
    assert int(queue["MessageRetentionPeriod"]) >= survived
    assert int(queue["VisibilityTimeout"]) >= int(properties["Timeout"])
    # and SQS takes the longest delay: set at the end of an attempt that ran for the whole
    # timeout, it must end within 12 hours of the receive (ChangeMessageVisibility's limit)
    assert schedule.cap_seconds + int(properties["Timeout"]) <= 12 * 3600


def test_both_parking_queues_are_alarmed(cfn: Template) -> None:
    # given the queue parked inbound events go to and the one failed compactions end in
    for queue_id in (dead_letter_queue_id(cfn), compaction_dead_letter_queue_id(cfn)):
        # then a CloudWatch alarm fires as soon as one message is visible there
        alarms = queue_alarms(cfn, queue_id)
        assert alarms, f"no CloudWatch alarm watches {queue_id}"
        alarm = cfn["Resources"][alarms[0]]["Properties"]
        assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
        assert float(alarm["Threshold"]) == 0


def test_a_follow_up_scheduler_cannot_deliver_waits_in_an_alarmed_standard_queue(
    sam_template: Template,
) -> None:
    from memagent.aws.scheduler import RETRY_POLICY

    # given the stack with follow-ups on, and off
    on = {**PARAMETERS, "FollowUps": "true"}
    cfn = sam_transform(sam_template, on)
    queue_id = "FollowUpDeadLetterQueue"
    queue = cfn["Resources"][queue_id]
    # then a due follow-up Scheduler could not send waits in a queue that only follow-ups
    # deploy: standard (Scheduler takes no FIFO queue as a dead-letter queue), encrypted, kept
    # 4 days (docs/privacy.md), its depth alarmed from the first message
    assert not deployed(cfn, queue, PARAMETERS) and deployed(cfn, queue, on)
    properties = queue["Properties"]
    assert "FifoQueue" not in properties
    assert properties.get("SqsManagedSseEnabled") is True or "KmsMasterKeyId" in properties
    assert int(properties["MessageRetentionPeriod"]) == 4 * 24 * 3600
    [alarm_id] = queue_alarms(cfn, queue_id)
    alarm = cfn["Resources"][alarm_id]["Properties"]
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert (alarm["ComparisonOperator"], float(alarm["Threshold"])) == ("GreaterThanThreshold", 0)
    # and Scheduler may send there with the schedules' role, and nowhere but the event queue
    role = resolve_all(cfn, cfn["Resources"]["FollowUpSchedulerRole"]["Properties"], on)
    sends = [
        (action, target(resource))
        for statement in policy_statements(role["Policies"])
        for action in as_list(statement["Action"])
        for resource in as_list(statement["Resource"])
    ]
    assert sorted(sends) == [
        ("sqs:SendMessage", "EventQueue"),
        ("sqs:SendMessage", queue_id),
    ]
    # and the functions that create schedules name it, only where follow-ups are on
    for function_id in ("ConsumerFunction", "AdminFunction"):
        variables = cfn["Resources"][function_id]["Properties"]["Environment"]["Variables"]
        assert target(resolve_all(cfn, variables, on)["FOLLOW_UP_DEAD_LETTER_ARN"]) == queue_id
        assert resolve_all(cfn, variables, PARAMETERS).get("FOLLOW_UP_DEAD_LETTER_ARN") is None
    # and each schedule is retried long enough that a 12-hour outage reaches no dead-letter
    # queue, within the bounds Scheduler's API takes (RetryPolicy: 60 to 86400 s, 0 to 185)
    assert 12 * 3600 <= RETRY_POLICY["MaximumEventAgeInSeconds"] <= 86400
    assert 0 <= RETRY_POLICY["MaximumRetryAttempts"] <= 185


def test_every_function_runs_python313_on_arm64_with_an_expiring_log_group(cfn: Template) -> None:
    log_groups = resources(cfn, "AWS::Logs::LogGroup")
    functions = resources(cfn, "AWS::Lambda::Function")
    for function_id, function in functions.items():
        # given each function: it runs the supported runtime on Graviton
        properties = function["Properties"]
        assert properties["Runtime"] == "python3.13", function_id
        assert properties["Architectures"] == ["arm64"], function_id
        # and logs to /aws/lambda/<function> in a log group whose retention is set
        expected_name = {"Fn::Sub": f"/aws/lambda/${{{function_id}}}"}
        own = [
            group["Properties"]
            for group_id, group in log_groups.items()
            if group["Properties"].get("LogGroupName") == expected_name
            or target(properties.get("LoggingConfig", {}).get("LogGroup")) == group_id
        ]
        assert len(own) == 1, f"{function_id} has no log group named /aws/lambda/<function>"
        assert own[0].get("RetentionInDays"), f"{function_id}'s logs never expire"


def test_no_policy_grants_full_access_or_wildcard_actions(cfn: Template) -> None:
    problems = []
    for policy_id, policy in cfn["Resources"].items():
        if policy["Type"] not in ("AWS::IAM::Role", "AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        properties = policy["Properties"]
        # given every role and policy: no AWS managed *FullAccess policy is attached
        for arn in properties.get("ManagedPolicyArns", []):
            if "FullAccess" in json.dumps(arn):
                problems.append(f"{policy_id} attaches {arn}")
        documents = {k: v for k, v in properties.items() if k != "AssumeRolePolicyDocument"}
        for statement in policy_statements(documents):
            if statement.get("Effect") != "Allow":
                continue
            if "NotAction" in statement:
                problems.append(f"{policy_id} allows NotAction {statement['NotAction']}")
            actions = [a for a in as_list(statement.get("Action", [])) if isinstance(a, str)]
            # and no statement allows every action, or every action of a data service
            for action in actions:
                service = action.split(":")[0].lower()
                if action == "*" or (action.endswith(":*") and service in DATA_SERVICES):
                    problems.append(f"{policy_id} allows {action}")
            # and data-service actions name their resources, unless AWS allows only "*"
            if "*" in as_list(statement.get("Resource")):
                for action in actions:
                    service = action.split(":")[0].lower()
                    if service in DATA_SERVICES and action not in RESOURCE_STAR_ONLY:
                        problems.append(f"{policy_id} allows {action} on every resource")
    assert not problems, "\n".join(problems)


def test_memory_table_is_on_demand_streams_expires_and_is_protected_by_parameters(
    sam_template: Template, cfn: Template
) -> None:
    # given the memory table (the one whose stream the compactor reads)
    table_id = target(compactor_mapping(cfn)["EventSourceArn"])
    table = cfn["Resources"][table_id]["Properties"]
    # then it is billed per request, streams changes and expires items by a TTL attribute
    assert table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["StreamSpecification"]["StreamViewType"] in ("NEW_IMAGE", "NEW_AND_OLD_IMAGES")
    assert table["TimeToLiveSpecification"]["Enabled"] is True
    assert table["TimeToLiveSpecification"]["AttributeName"]
    # and point-in-time recovery and deletion protection are operator parameters, on by default
    pitr = table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]
    protection = table["DeletionProtectionEnabled"]
    assert driving_parameters(cfn, pitr), "PITR is not driven by a parameter"
    assert driving_parameters(cfn, protection), "deletion protection is not a parameter"
    assert str(evaluate(cfn, pitr, PARAMETERS)).lower() == "true"
    assert str(evaluate(cfn, protection, PARAMETERS)).lower() == "true"
    # and an operator can turn them off (a throwaway test stack)
    off = {**PARAMETERS, **{name: "false" for name in driving_parameters(cfn, pitr)}}
    assert str(evaluate(cfn, pitr, off)).lower() == "false"
    off = {**PARAMETERS, **{name: "false" for name in driving_parameters(cfn, protection)}}
    assert str(evaluate(cfn, protection, off)).lower() == "false"
    # and deleting the stack keeps the table
    assert sam_template["Resources"][table_id].get("DeletionPolicy") == "Retain"


def test_outputs_give_the_webhook_url_the_queue_and_the_table(cfn: Template) -> None:
    outputs = cfn["Outputs"]
    apis = set(resources(cfn, "AWS::ApiGatewayV2::Api"))
    table_id = target(compactor_mapping(cfn)["EventSourceArn"])
    # then one output is the https URL of the webhook route on the HTTP API
    webhook_urls = [
        name
        for name, output in outputs.items()
        if references(output["Value"]) & apis and json.dumps(output["Value"]).endswith('/webhook"}')
    ]
    assert webhook_urls, "no output gives the webhook URL"
    # and others name the event queue and the memory table
    assert any(target(o["Value"]) == event_queue_id(cfn) for o in outputs.values())
    assert any(target(o["Value"]) == table_id for o in outputs.values())


# --------------------------------------------------------------------------- stream filter


def test_stream_filter_admits_a_flagged_state_record(cfn: Template, flagged_record) -> None:
    # given a STATE record whose flag the consumer has just raised (the sample event)
    assert flagged_record["dynamodb"]["NewImage"][COMPACTION_FLAG] == {"BOOL": True}
    # when Lambda applies the compactor's filter, then the record reaches the compactor
    assert stream_filter_admits(filter_patterns(cfn), flagged_record)


def test_stream_filter_drops_an_unflagged_state_record(cfn: Template, flagged_record) -> None:
    # given a STATE record whose flag is down (a turn below the threshold, or compaction done)
    record = copy.deepcopy(flagged_record)
    record["dynamodb"]["NewImage"][COMPACTION_FLAG] = {"BOOL": False}
    record["dynamodb"]["NewImage"]["last_seq"] = {"N": "41"}
    # then the compactor never sees it
    assert not stream_filter_admits(filter_patterns(cfn), record)


def test_stream_filter_drops_a_message_record(cfn: Template, flagged_record) -> None:
    # given the INSERT of a message item, which carries no flag
    record = copy.deepcopy(flagged_record)
    pk = record["dynamodb"]["Keys"]["pk"]
    record["eventName"] = "INSERT"
    record["dynamodb"]["Keys"] = {"pk": pk, "sk": {"S": "MSG#000000000040"}}
    record["dynamodb"]["NewImage"] = {
        "pk": pk,
        "sk": {"S": "MSG#000000000040"},
        "seq": {"N": "40"},
        "role": {"S": "user"},
        "text": {"S": "I start the new job on Monday!"},
        "at": {"S": "2026-11-29T09:29:58+00:00"},
    }
    # then the compactor never sees it
    assert not stream_filter_admits(filter_patterns(cfn), record)


def test_stream_filter_admits_a_state_items_removal_drops_a_ledger_entrys(
    cfn: Template, flagged_record
) -> None:
    # given the deletion of a STATE item (a NEW_IMAGE stream carries no image for it), and of
    # a ledger entry (its own TTL, every 30 days)
    record = copy.deepcopy(flagged_record)
    record["eventName"] = "REMOVE"
    del record["dynamodb"]["NewImage"]
    ledger = copy.deepcopy(record)
    ledger["dynamodb"]["Keys"]["sk"] = {"S": "EVT#0a1b"}
    # then the compactor sees the state's, whoever deleted it (a filter on a DynamoDB stream
    # can name only the dynamodb key: the compactor checks userIdentity), never the ledger's
    assert stream_filter_admits(filter_patterns(cfn), record)
    assert not stream_filter_admits(filter_patterns(cfn), ledger)


def test_stream_filter_drops_a_flag_written_as_a_string(cfn: Template, flagged_record) -> None:
    # given a flag stored as the string "true" (stream values are typed: this is not a BOOL)
    record = copy.deepcopy(flagged_record)
    record["dynamodb"]["NewImage"][COMPACTION_FLAG] = {"S": "true"}
    # then it does not fire the compactor: the consumer must write a real boolean
    assert not stream_filter_admits(filter_patterns(cfn), record)


ADMIN_APP = ROOT / "functions" / "admin" / "app.py"
# the CLI's export and forget go through boto3, not the admin API (scripts/people.py)
EXPORT_AND_FORGET = {("GET", "/people/{id}"), ("DELETE", "/people/{id}")}


def admin_routes(cfn: Template) -> dict[tuple[str, str], dict[str, Any]]:
    """Every route of the admin API as AWS will see it: (METHOD, path) -> its operation in the
    OpenAPI body SAM writes for the HTTP API."""
    body = cfn["Resources"]["AdminApi"]["Properties"]["Body"]
    return {
        (method.upper(), path): operation
        for path, operations in body["paths"].items()
        for method, operation in operations.items()
    }


def without_iam(routes: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str]]:
    """The routes a caller reaches without a SigV4 signature (no AWS_IAM authorization)."""
    return sorted(r for r, op in routes.items() if op.get("security") != [{"AWS_IAM": []}])


def test_the_admin_api_has_one_route_every_request_to_it_signed(cfn: Template) -> None:
    # given the transformed template: SAM writes HTTP API routes into the API's OpenAPI body
    routes = admin_routes(cfn)
    # then every path reaches the admin function, whose resolver serves the table's rows
    # (memagent/operator/routes.py) and answers 404 for the rest: a new route needs no event
    assert set(routes) == {("X-AMAZON-APIGATEWAY-ANY-METHOD", "/{proxy+}")}
    # and it demands a SigV4-signed caller (IAM authorization)
    assert without_iam(routes) == []
    body = cfn["Resources"]["AdminApi"]["Properties"]["Body"]
    scheme = body["components"]["securitySchemes"]["AWS_IAM"]
    assert scheme["x-amazon-apigateway-authtype"] == "awsSigv4"
    # and the public webhook stays open to whasp (its own signature check guards it)
    apis = resources(cfn, "AWS::ApiGatewayV2::Api")
    webhook = next(a for a in apis.values() if "/webhook" in a["Properties"]["Body"]["paths"])
    assert "security" not in webhook["Properties"]["Body"]["paths"]["/webhook"]["post"]


def test_the_admin_route_opened_to_anyone_is_caught(sam_template: Template) -> None:
    # given the admin route opting out of the API's default authorizer
    template = copy.deepcopy(sam_template)
    events = template["Resources"]["AdminFunction"]["Properties"]["Events"]
    events["Admin"]["Properties"]["Auth"] = {"Authorizer": "NONE"}
    # then the check above names it
    opened = without_iam(admin_routes(sam_transform(template, PARAMETERS)))
    assert opened == [("X-AMAZON-APIGATEWAY-ANY-METHOD", "/{proxy+}")]


def test_the_cli_verbs_are_admin_routes() -> None:
    from memagent.operator.routes import ROUTES as TABLE
    from scripts.people import ROUTES

    routes = {(route.method, route.path) for route in TABLE}
    # every verb of scripts/people.py calls a route the admin function serves
    assert {verb: route for verb, route in ROUTES.items() if route not in routes} == {}
    # and every route has its verb, but export and forget, which the CLI does with boto3, and
    # the console's list of recent conversations
    assert routes - set(ROUTES.values()) == EXPORT_AND_FORGET | {("GET", "/conversations")}


def resolve_all(template: Template, node: Any, parameters: dict[str, Any]) -> Any:
    """`evaluate` applied all the way down: every Fn::If chosen, AWS::NoValue dropped."""
    node = evaluate(template, node, parameters)
    if isinstance(node, dict):
        if node == {"Ref": "AWS::NoValue"}:
            return None
        return {k: resolve_all(template, v, parameters) for k, v in node.items()}
    if isinstance(node, list):
        items = [resolve_all(template, v, parameters) for v in node]
        return [v for v in items if v is not None]
    return node


def _secrets_read_by(cfn: Template, function_id: str, parameters: dict[str, str]) -> set[str]:
    """The SSM parameter names a function's role may read, once the Provider is chosen."""
    role_id = target(cfn["Resources"][function_id]["Properties"]["Role"])
    policies = resolve_all(cfn, cfn["Resources"][role_id]["Properties"]["Policies"], parameters)
    names = set()
    for chosen in policies:
        if not isinstance(chosen, dict) or "PolicyDocument" not in chosen:
            continue
        for statement in policy_statements(chosen["PolicyDocument"]):
            if any(str(a).startswith("ssm:") for a in as_list(statement.get("Action"))):
                for resource in as_list(statement.get("Resource")):
                    text = json.dumps(resource)
                    found = re.search(r"\$\{SecretsPrefix\}/([a-z-]+)", text)
                    if found:
                        names.add(found.group(1))
    return names


@pytest.mark.parametrize(
    ("provider", "model_provider", "webhook_reads", "consumer_reads", "compactor_reads"),
    [
        ("whasp", "openai", {"webhook-secret"}, {"whasp-api-key", "openai-api-key"}, None),
        (
            "meta",
            "openai",
            {"meta-app-secret", "meta-verify-token"},
            {"meta-access-token", "openai-api-key"},
            {"openai-api-key"},
        ),
        # on Bedrock no OpenAI key exists: nothing to read, no parameter named
        ("whasp", "bedrock", {"webhook-secret"}, {"whasp-api-key"}, set()),
    ],
)
def test_each_provider_reads_only_its_own_secrets(
    sam_template: Template,
    provider: str,
    model_provider: str,
    webhook_reads: set[str],
    consumer_reads: set[str],
    compactor_reads: set[str] | None,
) -> None:
    parameters = {**PARAMETERS, "Provider": provider, "ModelProvider": model_provider}
    cfn = sam_transform(sam_template, parameters)
    functions = resources(cfn, "AWS::Lambda::Function")
    webhook = next(k for k in functions if k.startswith("WebhookFunction"))
    consumer = next(k for k in functions if k.startswith("ConsumerFunction"))
    compactor = next(k for k in functions if k.startswith("CompactorFunction"))
    assert _secrets_read_by(cfn, webhook, parameters) == webhook_reads
    assert _secrets_read_by(cfn, consumer, parameters) == consumer_reads
    if compactor_reads is not None:
        assert _secrets_read_by(cfn, compactor, parameters) == compactor_reads
    environment = functions[webhook]["Properties"]["Environment"]["Variables"]
    assert evaluate(cfn, environment["PROVIDER"], parameters) == provider
    for function in (consumer, compactor):
        env = resolve_all(cfn, functions[function]["Properties"]["Environment"], parameters)
        assert env["Variables"]["MODEL_PROVIDER"] == model_provider
        named = {k for k, v in env["Variables"].items() if v is not None}
        has_key = {"OPENAI_API_KEY", "OPENAI_API_KEY_PARAM"} & named
        assert bool(has_key) == (model_provider == "openai"), function


def test_the_webhook_answers_meta_subscription_checks_on_the_same_url(cfn: Template) -> None:
    apis = resources(cfn, "AWS::ApiGatewayV2::Api")
    webhook = next(a for a in apis.values() if "/webhook" in a["Properties"]["Body"]["paths"])
    operations = webhook["Properties"]["Body"]["paths"]["/webhook"]
    # one URL: POST for notifications (whasp or Meta), GET for Meta's hub.challenge
    assert set(operations) == {"post", "get"}
    assert all("security" not in op for op in operations.values())


def test_a_refused_meta_token_is_alarmed(cfn: Template) -> None:
    alarms = resources(cfn, "AWS::CloudWatch::Alarm").values()
    assert any(a["Properties"].get("MetricName") == "ProviderAuthFailed" for a in alarms)


def test_a_refused_model_key_or_bedrock_access_is_alarmed(cfn: Template) -> None:
    # memagent.model.client counts ModelAuthFailed when a key or token is refused after a fresh read
    alarms = [a["Properties"] for a in resources(cfn, "AWS::CloudWatch::Alarm").values()]
    (alarm,) = [a for a in alarms if a.get("MetricName") == "ModelAuthFailed"]
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_an_optional_field_the_model_refuses_is_alarmed(cfn: Template) -> None:
    # memagent.model.client counts ModelFieldRefused when a 400 names an optional field it then
    # drops
    alarms = [a["Properties"] for a in resources(cfn, "AWS::CloudWatch::Alarm").values()]
    (alarm,) = [a for a in alarms if a.get("MetricName") == "ModelFieldRefused"]
    assert alarm["Threshold"] == 0 and alarm["ComparisonOperator"] == "GreaterThanThreshold"


# --------------------------------------------------------------------------- SnapStart


@pytest.mark.parametrize("snapstart", ["false", "true"])
def test_the_queue_and_the_stream_invoke_a_published_version_through_the_alias(
    sam_template: Template, snapstart: str
) -> None:
    # given the template with SnapStart off (the default) or on
    parameters = {**PARAMETERS, "SnapStart": snapstart}
    cfn = sam_transform(sam_template, parameters)
    for mapping in (consumer_mapping(cfn), compactor_mapping(cfn)):
        # when the event source mappings are followed to the code they run
        function_id, function = mapped_function(cfn, mapping)
        # then each reaches the function through its alias and a published version, and the
        # version is snapshotted exactly when the parameter says so
        apply_on = evaluate(cfn, function["Properties"]["SnapStart"]["ApplyOn"], parameters)
        expected = "PublishedVersions" if snapstart == "true" else "None"
        assert apply_on == expected, function_id
        assert function["Properties"]["Runtime"] == "python3.13"  # SnapStart: Python 3.12+


def test_snapstart_is_offered_for_the_consumer_and_the_compactor_only(cfn: Template) -> None:
    snapshotting = {
        logical_id
        for logical_id, function in resources(cfn, "AWS::Lambda::Function").items()
        if "SnapStart" in function["Properties"]
    }
    expected = {mapped_function(cfn, m)[0] for m in (consumer_mapping(cfn), compactor_mapping(cfn))}
    assert snapshotting == expected
    for logical_id in snapshotting:
        apply_on = cfn["Resources"][logical_id]["Properties"]["SnapStart"]["ApplyOn"]
        assert driving_parameters(cfn, apply_on) == {"SnapStart"}


@pytest.mark.xdist_group("cfn-lint")
def test_cfn_lint_reports_no_errors_with_snapstart_on(lint_errors: dict[str, list[str]]) -> None:
    # given the template with the SnapStart parameter on (what `sam validate --lint` lints)
    # when cfn-lint checks it, then it reports no error
    errors = lint_errors["snapstart on"]
    assert not errors, "\n".join(errors)


# ------------------------------------------------------------------ the console's door


def _resolver(**parameters: str) -> Any:
    from devstack import cfn
    from devstack.resources import load_template

    template = load_template()
    return template, cfn.Resolver(template, cfn.parameter_values(template, parameters), {}, {})


def test_operator_console_off_deploys_no_part_of_it() -> None:
    # given the default parameters (OperatorConsole=false)
    template, resolver = _resolver()
    console = {
        lid for lid, r in template["Resources"].items() if r.get("Condition") == "OperatorConsoleOn"
    }
    # then every console resource is conditional on it, and it does not hold
    assert {"OperatorUserPool", "ConsoleApi", "ConsoleAuthorizer", "ConsoleAdminRoute"} <= console
    assert not resolver.condition("OperatorConsoleOn")
    kinds = {template["Resources"][lid]["Type"] for lid in console}
    unconditional = {
        lid
        for lid, r in template["Resources"].items()
        if r["Type"] in kinds and lid not in console and r["Type"] != "AWS::Logs::LogGroup"
    }
    assert unconditional == set(), "a Cognito or ApiGatewayV2 resource outside the condition"
    # and the admin function's environment is today's: no console setting in it
    env = template["Resources"]["AdminFunction"]["Properties"]["Environment"]["Variables"]
    for name in ("CONSOLE_CLIENT_ID", "CONSOLE_LOGIN_URL"):
        assert env[name]["Fn::If"][0] == "OperatorConsoleOn"
        assert env[name]["Fn::If"][2] == {"Ref": "AWS::NoValue"}
    assert template["Outputs"]["ConsoleUrl"]["Condition"] == "OperatorConsoleOn"


def test_the_console_door_takes_only_the_pools_tokens_and_its_page_is_the_one_open_route() -> None:
    from memagent.operator.doors import ADMINS, OPERATORS

    template, resolver = _resolver(OperatorConsole="true")
    assert resolver.condition("OperatorConsoleOn")
    res = template["Resources"]
    routes = {
        r["Properties"]["RouteKey"]: r["Properties"]
        for r in res.values()
        if r["Type"] == "AWS::ApiGatewayV2::Route"
    }
    # the page, open; everything else behind the JWT authorizer, to the admin function
    assert routes["GET /"]["AuthorizationType"] == "NONE"
    assert routes["ANY /{proxy+}"]["AuthorizationType"] == "JWT"
    assert routes["ANY /{proxy+}"]["AuthorizerId"] == {"Ref": "ConsoleAuthorizer"}
    assert set(routes) == {"GET /", "ANY /{proxy+}"}
    integration = res["ConsoleIntegration"]["Properties"]
    assert integration["IntegrationUri"] == {"Fn::GetAtt": ["AdminFunction", "Arn"]}
    assert integration["PayloadFormatVersion"] == "2.0"
    # the authorizer: this pool as issuer, this client as audience, the header as source
    jwt = res["ConsoleAuthorizer"]["Properties"]
    assert jwt["IdentitySource"] == ["$request.header.Authorization"]
    assert "${OperatorUserPool}" in jwt["JwtConfiguration"]["Issuer"]["Fn::Sub"]
    assert jwt["JwtConfiguration"]["Audience"] == [{"Ref": "OperatorUserPoolClient"}]
    # the client: public (no secret), the code flow only, back to the console only
    client = res["OperatorUserPoolClient"]["Properties"]
    assert (client["GenerateSecret"], client["AllowedOAuthFlows"]) == (False, ["code"])
    assert client["ExplicitAuthFlows"] == ["ALLOW_REFRESH_TOKEN_AUTH"]  # no password via the API
    assert client["CallbackURLs"] == client["LogoutURLs"]
    assert "${ConsoleApi}" in client["CallbackURLs"][0]["Fn::Sub"]
    assert client["PreventUserExistenceErrors"] == "ENABLED"
    # the pool: invited operators only, optional TOTP; the groups the admin function checks
    pool = res["OperatorUserPool"]["Properties"]
    assert pool["AdminCreateUserConfig"]["AllowAdminCreateUserOnly"] is True
    assert pool["EnabledMfas"] == ["SOFTWARE_TOKEN_MFA"]
    groups = {
        r["Properties"]["GroupName"]
        for r in res.values()
        if r["Type"] == "AWS::Cognito::UserPoolGroup"
    }
    assert groups == {OPERATORS, ADMINS}
    # API Gateway may invoke the admin function from this API only
    arn = res["ConsoleInvokePermission"]["Properties"]["SourceArn"]["Fn::Sub"]
    assert arn.endswith(":${ConsoleApi}/*")
