"""Webhook Lambda: API Gateway (HTTP API) -> verify the provider's signature -> SQS FIFO -> 2xx.

GET /webhook answers Meta's subscription check (provider `meta`).

Two routes, so no router: Powertools' event handler package loads every resolver it has (AppSync,
Bedrock, VPC Lattice...), about a third of this function's cold start, to dispatch them.
"""

import base64
import json
from collections.abc import Callable

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.aws import EventQueue
from memagent.errors import (
    BadRequest,
    BodyTooLarge,
    InvalidSignature,
    QueueUnavailable,
    SecretUnavailable,
)
from memagent.observability import logger, metrics
from memagent.webhook import WebhookSettings, challenge, receive

PATH = "/webhook"

settings = WebhookSettings.from_env()
queue = EventQueue(settings.queue_url)


def _response(status: int, body: str, content_type: str) -> dict:
    """An HTTP API (payload v2.0) response."""
    return {
        "statusCode": status,
        "headers": {"Content-Type": content_type},
        "body": body,
        "isBase64Encoded": False,
    }


def _json(status: int, body: dict) -> dict:
    return _response(status, json.dumps(body, separators=(",", ":")), "application/json")


def _rejected(reason: str, status: int, message: str) -> dict:
    with single_metric(name="WebhookRejected", unit=MetricUnit.Count, value=1) as metric:
        metric.add_dimension(name="reason", value=reason)
    logger.warning("webhook rejected", extra={"reason": reason, "status": status})
    return _json(status, {"error": message})


def _raw_body(body: str | None, is_base64: bool, max_bytes: int) -> bytes:
    """The exact bytes the provider signed; a body we cannot turn back into bytes cannot be
    verified. One too long to be under the cap is refused before it is even decoded."""
    if len(body or "") > (max_bytes * 4 // 3 + 4 if is_base64 else max_bytes):
        raise BodyTooLarge("body too large")
    try:
        if is_base64:
            return base64.b64decode(body or "", validate=True)
        return (body or "").encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        raise InvalidSignature("body cannot be decoded") from None


def webhook(event: dict) -> dict:
    receipt = receive(
        settings,
        queue,
        event.get("headers") or {},
        _raw_body(event.get("body"), bool(event.get("isBase64Encoded")), settings.max_body_bytes),
    )
    logger.info(
        "webhook accepted",
        extra={
            "event_id": receipt.event_id,
            "type": receipt.event_type,
            "queued": receipt.queued,
            "count": receipt.count,
            "ignored": receipt.ignored,
        },
    )
    metrics.add_metric(
        name="WebhookAccepted" if receipt.queued else "WebhookIgnored",
        unit=MetricUnit.Count,
        value=1,
    )
    if receipt.count > 1:
        metrics.add_metric(name="EventsQueued", unit=MetricUnit.Count, value=receipt.count)
    for code in receipt.failed_codes:  # e.g. 131047: a reply sent outside the 24-hour window
        with single_metric(name="ProviderDeliveryFailed", unit=MetricUnit.Count, value=1) as m:
            m.add_dimension(name="code", value=str(code))
    if receipt.groups:  # Meta group messages: acknowledged, counted, never answered or stored
        metrics.add_metric(name="GroupMessagesIgnored", unit=MetricUnit.Count, value=receipt.groups)
    if receipt.synced:  # Coexistence's history and contact syncs: acknowledged, nothing queued
        metrics.add_metric(name="AppSyncsAcknowledged", unit=MetricUnit.Count, value=receipt.synced)
    for value in receipt.preferences:  # Meta's marketing stop/resume: recorded, not acted on
        with single_metric(name="MarketingPreference", unit=MetricUnit.Count, value=1) as m:
            m.add_dimension(name="value", value=value[:32])
    return _json(200, {"ok": True})


def subscription_check(event: dict) -> dict:
    answer = challenge(settings, event.get("queryStringParameters") or {})
    logger.info("subscription check answered")
    return _response(200, answer, "text/plain")


# (method, path): a request may lack either
ROUTES: dict[tuple[str | None, str | None], Callable[[dict], dict]] = {
    ("POST", PATH): webhook,
    ("GET", PATH): subscription_check,
}


def respond(event: dict) -> dict:
    """Route, then map typed errors to HTTP answers, here and only here."""
    http = (event.get("requestContext") or {}).get("http") or {}
    route = ROUTES.get((http.get("method"), event.get("rawPath")))
    if route is None:
        return _json(404, {"error": "not found"})  # the HTTP API sends only ROUTES here
    try:
        return route(event)
    except InvalidSignature:
        return _rejected("signature", 401, "invalid signature")
    except BodyTooLarge:
        return _rejected("too_large", 413, "body too large")
    except BadRequest as error:
        return _rejected("bad_request", 400, str(error))
    except SecretUnavailable as error:
        # the reason names the setting (e.g. a stored secret too short), never its value
        logger.error("webhook secret unavailable; failing closed", extra={"reason": str(error)})
        return _rejected("secret_unavailable", 503, "temporarily unavailable")
    except QueueUnavailable as error:
        logger.error("queue unavailable", extra={"error": str(error)})
        return _rejected("queue_unavailable", 503, "temporarily unavailable")


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return respond(event)
