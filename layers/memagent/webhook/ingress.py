"""The webhook's domain logic: verify, parse, enqueue. No model code on this path.

The configured provider's module checks the signature and cuts the body into queued events;
only that module is imported (the cold path stays light)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from memagent.aws import EventQueue
from memagent.errors import InvalidSignature
from memagent.providers import check_size
from memagent.webhook.settings import WebhookSettings


@dataclass(frozen=True)
class Receipt:
    event_id: str
    event_type: str
    queued: bool
    count: int = 1  # events queued (Meta: one per message or status that matters)
    ignored: int = 0  # parts acknowledged without queueing
    failed_codes: list[int] = field(default_factory=list)  # Meta: codes of `failed` statuses
    preferences: list[str] = field(default_factory=list)  # Meta: marketing stop/resume
    groups: int = 0  # Meta: group messages, acknowledged and counted, never queued
    synced: int = 0  # Meta Coexistence's history and app-state syncs: acknowledged, counted


def receive(
    settings: WebhookSettings,
    queue: EventQueue,
    headers: Mapping[str, str] | None,
    body: bytes,
) -> Receipt:
    """Accept one provider delivery. Raises InvalidSignature, BadRequest, SecretUnavailable or
    QueueUnavailable; returns only once the events are safely queued (or deliberately ignored)."""
    check_size(body, max_bytes=settings.max_body_bytes)  # before any HMAC is computed
    if settings.provider == "meta":
        return _receive_meta(settings, queue, headers, body)
    from memagent.providers.whasp import check_signature_headers, parse_envelope, verify_signed

    # headers present and fresh before the secret is read: a flood of junk costs no SSM call
    signed = check_signature_headers(headers, tolerance_seconds=settings.tolerance_seconds)
    assert settings.webhook_secret  # WebhookSettings.from_env reads the provider's secrets
    verify_signed(settings.webhook_secret.get().split(), signed, body)
    envelope = parse_envelope(body, max_bytes=settings.max_body_bytes)
    if envelope.id != signed.event_id:
        # the signed id is what we dedupe on; a body under another id is not what was signed for
        raise InvalidSignature("webhook-id does not match the body's id")
    if not envelope.queued:
        return Receipt(envelope.id, envelope.type, queued=False)
    queue.enqueue(settings.agent_id, envelope)
    return Receipt(envelope.id, envelope.type, queued=True)


def _receive_meta(
    settings: WebhookSettings, queue: EventQueue, headers: Mapping[str, str] | None, body: bytes
) -> Receipt:
    from memagent.providers.meta import check_signature_header, parse_notification, verify_signature

    check_signature_header(headers)  # before the secret is read: junk costs no SSM call
    assert settings.meta_app_secret  # as webhook_secret
    verify_signature(settings.meta_app_secret.get(), headers, body)
    notification = parse_notification(body, max_bytes=settings.max_body_bytes)
    # 10 per call, each deduplicated by its wamid: a failure half-way answers 503, Meta
    # retries the whole POST, and the events already queued are dropped as duplicates
    queue.enqueue_all(settings.agent_id, notification.envelopes)
    first = notification.envelopes[0].id if notification.envelopes else "none"
    return Receipt(
        first,
        "notification",
        queued=bool(notification.envelopes),
        count=len(notification.envelopes),
        ignored=notification.ignored,
        failed_codes=notification.failed_codes,
        preferences=notification.preferences,
        groups=notification.groups,
        synced=notification.synced,
    )


def challenge(settings: WebhookSettings, params: Mapping[str, str] | None) -> str:
    """Meta's subscription check (GET): the challenge to echo; InvalidSignature otherwise."""
    from memagent.providers.meta import answer_challenge

    if settings.provider != "meta":
        from memagent.errors import InvalidSignature

        raise InvalidSignature("this stack's provider has no subscription check")
    assert settings.meta_verify_token  # as webhook_secret
    return answer_challenge(settings.meta_verify_token.get(), params)
