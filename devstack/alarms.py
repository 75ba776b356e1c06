"""The stack's alarms as CloudFormation creates them, in moto: the alarm topic (AlarmTopic, unless
AlarmTopicArn names a topic of yours), its email subscription (AlarmEmail: pending until its
owner confirms it, as SNS keeps it, devstack.moto_fixes), every AWS::CloudWatch::Alarm whose
Condition holds, with its metric, threshold and actions resolved from template.yaml, and the
dashboard. Nothing evaluates an alarm here (moto does not): they are there to be checked (`make
smoke`: each alarm has actions, and the topic it notifies a confirmed subscriber).

Names: CloudFormation names an alarm `<stack>-<LogicalId>-<suffix>` when the template gives none;
here `<prefix>-<LogicalId>`, the local stack's rule for every name it makes.
"""

from __future__ import annotations

from typing import Any

from devstack import cfn

ALARM = "AWS::CloudWatch::Alarm"
# PutMetricAlarm's parameters are CloudFormation's property names; these are numbers there
WHOLE_NUMBERS = ("Period", "EvaluationPeriods", "DatapointsToAlarm")


def create_alarms(template: dict[str, Any], resolver: cfn.Resolver, prefix: str) -> dict[str, str]:
    """Create the template's topics, subscriptions, dashboards and alarms (in that order: an
    alarm's actions name a topic, a subscription its topic); return each alarm's name by logical
    id. The topics' and dashboards' Refs are set on `resolver` (the stack's outputs name them)."""
    import boto3

    sns, cloudwatch = boto3.client("sns"), boto3.client("cloudwatch")
    resources = {
        logical_id: resource
        for logical_id, resource in (template.get("Resources") or {}).items()
        if "Condition" not in resource or resolver.condition(resource["Condition"])
    }

    def of_type(kind: str) -> list[tuple[str, dict[str, Any]]]:
        return [
            (logical_id, resolver.resolve(resource.get("Properties") or {}))
            for logical_id, resource in resources.items()
            if resource.get("Type") == kind
        ]

    for logical_id, _ in of_type("AWS::SNS::Topic"):
        # a topic's Ref is its ARN
        arn = sns.create_topic(Name=f"{prefix}-{logical_id}")["TopicArn"]
        resolver.refs[logical_id] = arn
        resolver.attributes[(logical_id, "TopicArn")] = arn
    for _, props in of_type("AWS::SNS::Subscription"):
        sns.subscribe(
            TopicArn=props["TopicArn"], Protocol=props["Protocol"], Endpoint=props["Endpoint"]
        )
    for logical_id, props in of_type("AWS::CloudWatch::Dashboard"):
        name = str(props.get("DashboardName") or f"{prefix}-{logical_id}")
        cloudwatch.put_dashboard(DashboardName=name, DashboardBody=str(props["DashboardBody"]))
        resolver.refs[logical_id] = name
    names = {}
    for logical_id, props in of_type(ALARM):
        name = str(props.pop("AlarmName", f"{prefix}-{logical_id}"))
        cloudwatch.put_metric_alarm(AlarmName=name, **_alarm_arguments(props))
        names[logical_id] = name
    return names


def _alarm_arguments(props: dict[str, Any]) -> dict[str, Any]:
    """An alarm's resolved properties as PutMetricAlarm takes them (numbers as numbers: a Ref to
    a parameter resolves to text)."""
    arguments = dict(props)
    for name in WHOLE_NUMBERS:
        if name in arguments:
            arguments[name] = int(arguments[name])
    if "Threshold" in arguments:
        arguments["Threshold"] = float(arguments["Threshold"])
    for query in arguments.get("Metrics") or []:
        stat = query.get("MetricStat")
        if stat is not None and "Period" in stat:
            stat["Period"] = int(stat["Period"])
    return arguments
