"""Real-shaped Lambda events, built the way AWS delivers them: for the tests, the benchmarks and
anything else that invokes a handler directly (as `sam local invoke -e` would).

    http_event(body, headers)       API Gateway HTTP API, payload format 2.0
    signed_headers(body, event_id)  whasp's Standard Webhooks headers
                                    (memagent.providers.whasp.sign)
    whasp_message(text, ...)        a whasp `message.received` event
    sqs_record(event) / sqs_batch   SQS FIFO records from the per-person queue
    meta_notification(...)          a Meta Cloud API webhook body (meta_message, meta_status,
                                    meta_contact), meta_body/meta_headers to sign it,
                                    meta_challenge_event for the GET subscription check
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from typing import Any

from devstack.apigw import http_api_event
from devstack.resources import parameter_default
from memagent.aws.queue import deduplication_id
from memagent.memory.person import agent_key, person_key
from memagent.providers.whasp import sign

AGENT = parameter_default("AgentId")  # the template's (coach)
BUSINESS = "+14155550100"
EVENT_QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:whasp-agent-EventQueue.fifo"
# the API, whasp's address
WHASP_SIDE: dict[str, Any] = {"api_id": "api1234567", "source_ip": "203.0.113.10"}


def http_event(
    body: bytes | str,
    headers: dict[str, str],
    *,
    base64_encoded: bool = False,
    path: str = "/webhook",
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload v2.0) event, as Lambda receives it (devstack.apigw's,
    from whasp's address), with the headers exactly as given (a test may send names in any case)
    and the body encoded as told (`raw.decode` raises on bytes that are not UTF-8)."""
    raw = body.encode() if isinstance(body, str) else body
    event = http_api_event(method="POST", path=path, headers={}, body=b"", **WHASP_SIDE)
    event["headers"] = {"content-type": "application/json", **headers}
    event["requestContext"]["http"]["userAgent"] = "whasp-webhooks/1.0"
    event["body"] = base64.b64encode(raw).decode() if base64_encoded else raw.decode("utf-8")
    event["isBase64Encoded"] = base64_encoded
    return event


def signed_headers(
    body: bytes, event_id: str, *, secret: str, timestamp: int | None = None
) -> dict[str, str]:
    """The headers whasp sends with a webhook, signed with `secret` (now, unless told)."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    return {
        "webhook-id": event_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, event_id, timestamp, body),
    }


def whasp_message(
    text: str,
    *,
    chat: str,
    created_at: str,
    event_id: str | None = None,
    number: str = BUSINESS,
    message: dict[str, Any] | None = None,
    label: str = "Coach",
) -> dict[str, Any]:
    """A whasp `message.received` event; a text message unless `message` says otherwise."""
    event_id = event_id or f"evt_{uuid.uuid4().hex[:12]}"
    return {
        "id": event_id,
        "type": "message.received",
        "created_at": created_at,
        "data": {
            "number": number,
            "chat": chat,
            "label": label,
            "message": message
            or {"id": f"msg_{event_id[4:]}", "type": "text", "text": text, "timestamp": created_at},
        },
    }


def sqs_record(event: dict[str, Any], *, agent: str = AGENT, receive_count: int = 1) -> dict:
    """One SQS FIFO record as Lambda's event source mapping delivers it."""
    from devstack.lambda_harness import sqs_message_record

    chat = (event.get("data") or {}).get("chat")
    now_ms = str(int(time.time() * 1000))
    received = {  # as ReceiveMessage returns it
        "MessageId": str(uuid.uuid4()),
        "ReceiptHandle": base64.b64encode(uuid.uuid4().bytes).decode(),
        "Body": json.dumps(event),
        "Attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": now_ms,
            "SequenceNumber": str(uuid.uuid4().int)[:20],
            "MessageGroupId": person_key(agent, chat) if chat else agent_key(agent),
            "SenderId": "AROAEXAMPLE:webhook",
            "MessageDeduplicationId": deduplication_id(event["id"]),
            "ApproximateFirstReceiveTimestamp": now_ms,
        },
    }
    return sqs_message_record(received, EVENT_QUEUE_ARN)


def sqs_batch(*events: dict[str, Any], receive_count: int = 1) -> dict[str, Any]:
    return {"Records": [sqs_record(e, receive_count=receive_count) for e in events]}


# --------------------------------------------------------------------------- Meta (Cloud API)
# Shapes from Meta's webhook reference and the `pywa` library's fixtures (tests/data/updates).

# TEST-ONLY Meta app secret and verify token: public on purpose, for the local stack, the tests and
# the signed samples in events/meta-webhook-*.json. Never configure them on a deployed stack.
META_TEST_APP_SECRET = "memagent-test-only-meta-app-secret"  # noqa: S105
META_TEST_VERIFY_TOKEN = "memagent-test-only-verify-token"  # noqa: S105
META_WABA_ID = "1234567890987654321"
META_NUMBER_ID = "1122334455667"  # the business number's phone_number_id
META_DISPLAY_NUMBER = "14155550100"


def _person(phone: str | None, bsuid: str | None, phone_field: str, bsuid_field: str) -> dict:
    """Meta names a person by phone (without "+") and/or BSUID, under fields that differ from one
    part of a notification to another."""
    named = {phone_field: phone.removeprefix("+")} if phone else {}
    return named | ({bsuid_field: bsuid} if bsuid else {})


def meta_contact(*, phone: str | None = None, bsuid: str | None = None, name: str = "Maya"):
    """A `contacts[]` entry: `wa_id` (phone, no "+") and/or `user_id` (BSUID)."""
    return {"profile": {"name": name}} | _person(phone, bsuid, "wa_id", "user_id")


def meta_message(
    text: str | None = None,
    *,
    phone: str | None = None,
    bsuid: str | None = None,
    wamid: str | None = None,
    timestamp: int | None = None,
    kind: str = "text",
    body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A `messages[]` entry from a person: `from` (phone) and/or `from_user_id` (BSUID)."""
    message: dict[str, Any] = {
        "id": wamid or f"wamid.HBgM{uuid.uuid4().hex.upper()}",
        "timestamp": str(timestamp or int(time.time())),
        "type": kind,
        kind: body if body is not None else {"body": text or ""},
    }
    return message | _person(phone, bsuid, "from", "from_user_id")


def meta_tap(
    sent: dict[str, Any],
    option: str,
    *,
    phone: str | None = None,
    bsuid: str | None = None,
    wamid: str | None = None,
    timestamp: int | None = None,
) -> dict[str, Any]:
    """The person taps `option` (a title) on the interactive message `sent` (the Graph
    stand-in's record of it): an `interactive` message with the `button_reply` or
    `list_reply` Meta delivers, quoting the message tapped (`context`)."""
    shown = sent["interactive"]
    if shown["type"] == "button":
        buttons = [b["reply"] for b in shown["action"]["buttons"]]
        found = next(b for b in buttons if option in (b["title"], b["id"]))
        body = {
            "type": "button_reply",
            "button_reply": {"id": found["id"], "title": found["title"]},
        }
    else:
        rows = [row for section in shown["action"]["sections"] for row in section["rows"]]
        found = next(r for r in rows if option in (r["title"], r["id"], r.get("description")))
        body = {"type": "list_reply", "list_reply": dict(found)}
    message = meta_message(
        phone=phone, bsuid=bsuid, wamid=wamid, timestamp=timestamp, kind="interactive", body=body
    )
    return message | {"context": {"from": sent["from"], "id": sent["id"]}}


def meta_status(
    wamid: str,
    status: str = "sent",
    *,
    phone: str | None = None,
    bsuid: str | None = None,
    callback: str | None = None,
    timestamp: int | None = None,
    error_code: int | None = None,
) -> dict[str, Any]:
    """A `statuses[]` entry for a message we sent."""
    entry: dict[str, Any] = {
        "id": wamid,
        "status": status,
        "timestamp": str(timestamp or int(time.time())),
        **_person(phone, bsuid, "recipient_id", "recipient_user_id"),
    }
    if callback:
        entry["biz_opaque_callback_data"] = callback
    if status != "failed":
        entry["conversation"] = {"id": uuid.uuid4().hex, "origin": {"type": "service"}}
        entry["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "service"}
    if error_code is not None:
        entry["errors"] = [{"code": error_code, "title": "error", "message": "error"}]
    return entry


def meta_notification(
    *,
    messages: list[dict[str, Any]] = (),  # type: ignore[assignment]
    contacts: list[dict[str, Any]] = (),  # type: ignore[assignment]
    statuses: list[dict[str, Any]] = (),  # type: ignore[assignment]
    message_echoes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    number_id: str = META_NUMBER_ID,
    field: str = "messages",
) -> dict[str, Any]:
    """One webhook POST body: one entry, one change, holding any messages/statuses (or, with
    `field` smb_message_echoes, what staff sent from the WhatsApp Business app)."""
    value: dict[str, Any] = {
        "messaging_product": "whatsapp",
        "metadata": {"display_phone_number": META_DISPLAY_NUMBER, "phone_number_id": number_id},
    }
    for name, items in (
        ("contacts", contacts),
        ("messages", messages),
        ("statuses", statuses),
        ("message_echoes", message_echoes),
    ):
        if items:
            value[name] = list(items)
    return {
        "object": "whatsapp_business_account",
        "entry": [{"id": META_WABA_ID, "changes": [{"value": value, "field": field}]}],
    }


def meta_body(notification: dict[str, Any]) -> bytes:
    """The bytes as Meta sends them: compact, non-ASCII escaped (\\uXXXX); what it signs."""
    return json.dumps(notification, ensure_ascii=True, separators=(",", ":")).encode()


def meta_headers(body: bytes, *, app_secret: str) -> dict[str, str]:
    """The header Meta signs a webhook POST with (API Gateway v2 lower-cases header names)."""
    from memagent.providers.meta import sign as meta_sign

    return {"x-hub-signature-256": meta_sign(app_secret, body), "user-agent": "facebookexternalua"}


def meta_challenge_event(params: dict[str, str], *, path: str = "/webhook") -> dict[str, Any]:
    """Meta's GET subscription check, as an HTTP API v2.0 event."""
    from urllib.parse import urlencode

    headers, query = {"content-type": "application/json"}, urlencode(params)
    return http_api_event(
        method="GET", path=path, headers=headers, body=b"", query=query, **WHASP_SIDE
    )
