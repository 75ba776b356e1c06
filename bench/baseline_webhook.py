"""The webhook benchmark's baseline: the least a webhook Lambda can do.

Check the HMAC, parse the JSON, make one SQS `send_message`, answer. No Powertools, no typed
settings, no secret rotation, no size or E.164 checks, no metrics or logs. Loaded and invoked
exactly as functions/webhook/app.py is, against the same queue.
"""

import base64
import hashlib
import hmac
import json
import os

import boto3

QUEUE_URL = os.environ["QUEUE_URL"]
KEY = base64.b64decode(os.environ["WEBHOOK_SECRET"].removeprefix("whsec_"))
sqs = boto3.client("sqs")


def handler(event, context):
    headers = event.get("headers") or {}
    body = event.get("body") or ""
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode()
    event_id = headers.get("webhook-id", "")
    signed = f"{event_id}.{headers.get('webhook-timestamp', '')}.".encode() + raw
    expected = base64.b64encode(hmac.new(KEY, signed, hashlib.sha256).digest()).decode()
    given = [entry.partition(",")[2] for entry in headers.get("webhook-signature", "").split()]
    if not any(hmac.compare_digest(candidate, expected) for candidate in given):
        return {"statusCode": 401, "body": ""}
    payload = json.loads(raw)
    sqs.send_message(
        QueueUrl=QUEUE_URL,
        MessageBody=raw.decode(),
        MessageGroupId=payload["data"]["chat"],
        MessageDeduplicationId=hashlib.sha256(event_id.encode()).hexdigest(),
    )
    return {"statusCode": 200, "body": '{"ok":true}'}
