"""Operating the stack, as AWS will run it (after the SAM transform): a flood of the public
webhook is capped, both APIs keep access logs that expire and hold no phone number, and the
admin function fits API Gateway's 30 s."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.test_template import (
    PARAMETERS,
    TEMPLATE,
    Template,
    evaluate,
    resources,
    sam_transform,
    target,
    yaml_parse,
)


@pytest.fixture(scope="module")
def sam_template() -> Template:
    return yaml_parse(TEMPLATE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def cfn(sam_template: Template) -> Template:
    return sam_transform(sam_template, PARAMETERS)


def api_with_path(cfn: Template, path: str) -> tuple[str, dict[str, Any]]:
    apis = resources(cfn, "AWS::ApiGatewayV2::Api")
    return next((k, a) for k, a in apis.items() if path in a["Properties"]["Body"]["paths"])


def stage_of(cfn: Template, api_id: str) -> dict[str, Any]:
    stages = resources(cfn, "AWS::ApiGatewayV2::Stage").values()
    return next(s["Properties"] for s in stages if target(s["Properties"]["ApiId"]) == api_id)


def function_behind(cfn: Template, path: str) -> dict[str, Any]:
    """The Lambda function whose invoke permission names the API serving `path`."""
    api_id, _ = api_with_path(cfn, path)
    for permission in resources(cfn, "AWS::Lambda::Permission").values():
        if api_id in json.dumps(permission["Properties"].get("SourceArn")):
            return cfn["Resources"][target(permission["Properties"]["FunctionName"])]
    raise AssertionError(f"no function behind {path}")


def test_the_webhook_route_is_throttled_and_its_function_reserved(cfn: Template) -> None:
    api_id, _ = api_with_path(cfn, "/webhook")
    route = stage_of(cfn, api_id)["DefaultRouteSettings"]
    rate = evaluate(cfn, route["ThrottlingRateLimit"], PARAMETERS)
    burst = evaluate(cfn, route["ThrottlingBurstLimit"], PARAMETERS)
    webhook = function_behind(cfn, "/webhook")["Properties"]
    reserved = evaluate(cfn, webhook["ReservedConcurrentExecutions"], PARAMETERS)
    # sized from an expected peak of 100 deliveries a second (README): 2x for redeliveries,
    # and enough instances for that rate at 250 ms each
    assert (rate, burst) == (200, 400)
    assert reserved == rate * 0.25
    # and the consumer's own cap leaves it room in any account of the default 1,000
    consumer_cap = int(evaluate(cfn, {"Ref": "ConsumerMaximumConcurrency"}, PARAMETERS))
    assert reserved + consumer_cap < 1000 - 100  # AWS keeps 100 unreserved


def test_a_reservation_of_zero_means_none_not_a_stopped_webhook(sam_template: Template) -> None:
    parameters = {**PARAMETERS, "WebhookReservedConcurrency": "0"}
    cfn = sam_transform(sam_template, parameters)
    webhook = function_behind(cfn, "/webhook")["Properties"]
    chosen = evaluate(cfn, webhook["ReservedConcurrentExecutions"], parameters)
    assert chosen == {"Ref": "AWS::NoValue"}


@pytest.mark.parametrize("path", ["/webhook", "/people/{phone}"])
def test_both_apis_keep_access_logs_that_expire_and_hold_no_path(cfn: Template, path) -> None:
    api_id, _ = api_with_path(cfn, path)
    settings = stage_of(cfn, api_id)["AccessLogSettings"]
    group = cfn["Resources"][target(settings["DestinationArn"])]
    assert group["Type"] == "AWS::Logs::LogGroup"
    assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    record = json.loads(settings["Format"])
    assert record["requestId"] == "$context.requestId"
    # the admin path carries the phone number: only the route template is logged
    assert record["route"] == "$context.routeKey"
    assert not [v for v in record.values() if "path" in v.lower() or "querystring" in v.lower()]


def test_admin_access_logs_name_the_caller(cfn: Template) -> None:
    api_id, _ = api_with_path(cfn, "/people/{phone}")
    record = json.loads(stage_of(cfn, api_id)["AccessLogSettings"]["Format"])
    assert record["caller"] == "$context.identity.userArn"


def test_the_admin_function_fits_api_gateways_30_seconds(cfn: Template) -> None:
    admin = function_behind(cfn, "/people/{phone}")["Properties"]
    assert admin["Timeout"] < 30
