"""Real-shaped Lambda events, built the way AWS delivers them: for the tests, the benchmarks and
anything else that invokes a handler directly (as `sam local invoke -e` would).

    http_event(body, headers)       API Gateway HTTP API, payload format 2.0
    signed_headers(body, event_id)  whasp's Standard Webhooks headers (memagent.whasp.sign)
    whasp_message(text, ...)        a whasp `message.received` event
    sqs_record(event) / sqs_batch   SQS FIFO records from the per-person queue
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from memagent.person import agent_key, person_key
from memagent.queue import deduplication_id
from memagent.whasp import sign

AGENT = "coach"
BUSINESS = "+14155550100"


def http_event(
    body: bytes | str,
    headers: dict[str, str],
    *,
    base64_encoded: bool = False,
    path: str = "/webhook",
) -> dict[str, Any]:
    """An API Gateway HTTP API (payload v2.0) event, as Lambda receives it."""
    raw = body.encode() if isinstance(body, str) else body
    return {
        "version": "2.0",
        "routeKey": f"POST {path}",
        "rawPath": path,
        "rawQueryString": "",
        "headers": {"content-type": "application/json", **headers},
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "api1234567",
            "domainName": "api1234567.execute-api.us-east-1.amazonaws.com",
            "domainPrefix": "api1234567",
            "http": {
                "method": "POST",
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": "203.0.113.10",
                "userAgent": "whasp-webhooks/1.0",
            },
            "requestId": uuid.uuid4().hex,
            "routeKey": f"POST {path}",
            "stage": "$default",
            "time": datetime.now(UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(time.time() * 1000),
        },
        "body": base64.b64encode(raw).decode() if base64_encoded else raw.decode("utf-8"),
        "isBase64Encoded": base64_encoded,
    }


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
            "label": "Coach",
            "message": message
            or {"id": f"msg_{event_id[4:]}", "type": "text", "text": text, "timestamp": created_at},
        },
    }


def sqs_record(event: dict[str, Any], *, agent: str = AGENT, receive_count: int = 1) -> dict:
    """One SQS FIFO record as Lambda's event source mapping delivers it."""
    body = json.dumps(event)
    chat = (event.get("data") or {}).get("chat")
    group = person_key(agent, chat) if chat else agent_key(agent)
    now_ms = str(int(time.time() * 1000))
    return {
        "messageId": str(uuid.uuid4()),
        "receiptHandle": base64.b64encode(uuid.uuid4().bytes).decode(),
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": now_ms,
            "SequenceNumber": str(uuid.uuid4().int)[:20],
            "MessageGroupId": group,
            "SenderId": "AROAEXAMPLE:webhook",
            "MessageDeduplicationId": deduplication_id(event["id"]),
            "ApproximateFirstReceiveTimestamp": now_ms,
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(body.encode()).hexdigest(),  # noqa: S324 (SQS's own checksum)
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:whasp-agent-EventQueue.fifo",
        "awsRegion": "us-east-1",
    }


def sqs_batch(*events: dict[str, Any], receive_count: int = 1) -> dict[str, Any]:
    return {"Records": [sqs_record(e, receive_count=receive_count) for e in events]}
