"""The webhook's domain logic: verify, parse, enqueue. No model code on this path."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memagent.queue import EventQueue
from memagent.settings import WebhookSettings
from memagent.whasp import parse_envelope, verify_signature


@dataclass(frozen=True)
class Receipt:
    event_id: str
    event_type: str
    queued: bool


def receive(
    settings: WebhookSettings,
    queue: EventQueue,
    headers: Mapping[str, str] | None,
    body: bytes,
) -> Receipt:
    """Accept one whasp delivery. Raises InvalidSignature, BadRequest, SecretUnavailable or
    QueueUnavailable; returns only once the event is safely queued (or deliberately ignored)."""
    secrets = settings.webhook_secret.get().split()
    verify_signature(secrets, headers, body, tolerance_seconds=settings.tolerance_seconds)
    envelope = parse_envelope(body, max_bytes=settings.max_body_bytes)
    if not envelope.queued:
        return Receipt(envelope.id, envelope.type, queued=False)
    queue.enqueue(settings.agent_id, envelope)
    return Receipt(envelope.id, envelope.type, queued=True)
