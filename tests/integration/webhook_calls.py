"""The webhook function as whasp reaches it: its settings, whasp's signed POST, and the answer
through the handler (the status and the JSON body)."""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import AGENT, TEST_SECRET, http_event, signed_headers, to_bytes


def webhook_env(resources: Any, *, secret: str | None = TEST_SECRET, **settings: str) -> dict:
    """The webhook's settings as the template gives them, whasp's signing secret included
    unless `secret=None` (then `settings` name where it is read from: WEBHOOK_SECRET_PARAM)."""
    env = {"QUEUE_URL": resources.queue_urls["EventQueue"], "AGENT_ID": AGENT, **settings}
    if secret is not None:
        env["WEBHOOK_SECRET"] = secret
    return env


def call(webhook: Any, request: dict[str, Any], lambda_context: Any) -> tuple[int, dict]:
    response = webhook.handler(request, lambda_context)
    return response["statusCode"], json.loads(response["body"] or "{}")


def signed_request(
    event: dict[str, Any], *, webhook_id: str | None = None, **signing: Any
) -> dict[str, Any]:
    """whasp's POST of `event`, signed now with TEST_SECRET unless `signing` says otherwise,
    under the event's own id as webhook-id unless `webhook_id` names another."""
    body = to_bytes(event)
    return http_event(body, signed_headers(body, webhook_id or event["id"], **signing))


def post_signed(
    webhook: Any, event: dict[str, Any], lambda_context: Any, **signing: Any
) -> tuple[int, dict]:
    return call(webhook, signed_request(event, **signing), lambda_context)
