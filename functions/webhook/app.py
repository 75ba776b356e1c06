"""Webhook Lambda: API Gateway (HTTP API) -> verify the provider's signature -> SQS FIFO -> 2xx.

GET /webhook answers Meta's subscription check (provider `meta`)."""

import base64

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.errors import BadRequest, InvalidSignature, QueueUnavailable, SecretUnavailable
from memagent.observability import logger, metrics, tracer
from memagent.queue import EventQueue
from memagent.settings import WebhookSettings
from memagent.webhook import challenge, receive

settings = WebhookSettings.from_env()
queue = EventQueue(settings.queue_url)
app = APIGatewayHttpResolver()


def _json(status: int, body: dict) -> Response:
    return Response(status_code=status, content_type=content_types.APPLICATION_JSON, body=body)


def _rejected(reason: str, status: int, message: str) -> Response:
    with single_metric(name="WebhookRejected", unit=MetricUnit.Count, value=1) as metric:
        metric.add_dimension(name="reason", value=reason)
    logger.warning("webhook rejected", extra={"reason": reason, "status": status})
    return _json(status, {"error": message})


@app.exception_handler(InvalidSignature)
def _invalid_signature(error: InvalidSignature) -> Response:
    return _rejected("signature", 401, "invalid signature")


@app.exception_handler(BadRequest)
def _bad_request(error: BadRequest) -> Response:
    return _rejected("bad_request", 400, str(error))


@app.exception_handler(SecretUnavailable)
def _secret_unavailable(error: SecretUnavailable) -> Response:
    # the reason names the setting (e.g. a stored secret too short), never its value
    logger.error("webhook secret unavailable; failing closed", extra={"reason": str(error)})
    return _rejected("secret_unavailable", 503, "temporarily unavailable")


@app.exception_handler(QueueUnavailable)
def _queue_unavailable(error: QueueUnavailable) -> Response:
    logger.error("queue unavailable", extra={"error": str(error)})
    return _rejected("queue_unavailable", 503, "temporarily unavailable")


def _raw_body(body: str | None, is_base64: bool) -> bytes:
    """The exact bytes whasp signed; a body we cannot turn back into bytes cannot be verified."""
    try:
        if is_base64:
            return base64.b64decode(body or "", validate=True)
        return (body or "").encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        raise InvalidSignature("body cannot be decoded") from None


@app.post("/webhook")
def webhook() -> Response:
    event = app.current_event
    receipt = receive(
        settings, queue, event.headers, _raw_body(event.body, event.is_base64_encoded)
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
    for value in receipt.preferences:  # Meta's marketing stop/resume: recorded, not acted on
        with single_metric(name="MarketingPreference", unit=MetricUnit.Count, value=1) as m:
            m.add_dimension(name="value", value=value[:32])
    return _json(200, {"ok": True})


@app.get("/webhook")
def subscription_check() -> Response:
    answer = challenge(settings, app.current_event.query_string_parameters)
    logger.info("subscription check answered")
    return Response(status_code=200, content_type=content_types.TEXT_PLAIN, body=answer)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
