"""Re-sign the sample webhook events in events/ so `sam local invoke -e` accepts them: whasp's
(`events/webhook-*.json`) and Meta's (`events/meta-webhook-*.json`).

whasp signs its webhooks the Standard Webhooks way and the webhook refuses a signature older than
five minutes, so a committed sample event goes stale. This script gives every
`events/webhook-*.json` a fresh `webhook-timestamp` and a matching `webhook-signature` (and keeps
the request's time fields in step), in place, with the JSON layout unchanged (indent 2).
The default secret is a TEST-ONLY secret, public on purpose, for local runs and tests:

    TEST_SECRET = "whsec_" + base64("memagent-test-only-secret-do-not-use")
                = "whsec_bWVtYWdlbnQtdGVzdC1vbmx5LXNlY3JldC1kby1ub3QtdXNl"

Meta signs with `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body>`, keyed with the
app secret, with no timestamp: a Meta sample stays valid until its body changes. The default is
the TEST-ONLY app secret "memagent-test-only-meta-app-secret" (devstack.events); the GET sample
(meta-webhook-verify.json) carries the TEST-ONLY verify token "memagent-test-only-verify-token".

Never configure any of them on a deployed stack. Usage:

    python scripts/sign_events.py                      # sign with the test-only secrets
    python scripts/sign_events.py --secret whsec_...   # whasp samples with another secret
    python scripts/sign_events.py --meta-app-secret S  # Meta samples with another app secret
    sam local invoke WebhookFunction -e events/webhook-message-received.json \
        --env-vars local-env.json   # {"WebhookFunction": {"WEBHOOK_SECRET": "whsec_bWVt..."}}
    sam local invoke WebhookFunction -e events/meta-webhook-messages.json \
        --env-vars local-env.json   # {"WebhookFunction": {"PROVIDER": "meta",
                                    #   "META_APP_SECRET": "...", "META_VERIFY_TOKEN": "..."}}

(`sam local` passes a function only the variables template.yaml declares for it, so
WEBHOOK_SECRET and the META_* names must be declared there, empty, for the override to reach
the function.)
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from devstack.events import META_TEST_APP_SECRET
from memagent.providers.meta import HEADER_SIGNATURE as META_HEADER_SIGNATURE
from memagent.providers.meta import sign as meta_sign
from memagent.providers.whasp import (
    HEADER_ID,
    HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
    SECRET_PREFIX,
    sign,
)

TEST_SECRET = SECRET_PREFIX + base64.b64encode(b"memagent-test-only-secret-do-not-use").decode()
EVENTS_DIR = Path(__file__).resolve().parent.parent / "events"


def resign(event: dict, secret: str, now: int) -> dict:
    """Sign an API Gateway HTTP API (payload 2.0) event's body as whasp would at `now`."""
    body = event["body"]
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode("utf-8")
    event_id = json.loads(raw)["id"]
    headers = event["headers"]
    headers[HEADER_ID] = event_id
    headers[HEADER_TIMESTAMP] = str(now)
    headers[HEADER_SIGNATURE] = sign(secret, event_id, now, raw)
    headers["content-length"] = str(len(raw))
    context = event.get("requestContext", {})
    if "timeEpoch" in context:
        context["timeEpoch"] = now * 1000
    if "time" in context:
        context["time"] = datetime.fromtimestamp(now, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000")
    return event


def resign_meta(event: dict, app_secret: str) -> dict:
    """Sign an HTTP API event's body as Meta would: over the exact bytes, no timestamp."""
    body = event["body"]
    raw = base64.b64decode(body) if event.get("isBase64Encoded") else body.encode("utf-8")
    event["headers"][META_HEADER_SIGNATURE] = meta_sign(app_secret, raw)
    event["headers"]["content-length"] = str(len(raw))
    return event


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--secret", default=TEST_SECRET, help="whsec_... (default: TEST_SECRET)")
    parser.add_argument(
        "--meta-app-secret",
        default=META_TEST_APP_SECRET,
        help="Meta app secret for meta-webhook-*.json (default: the test-only one)",
    )
    parser.add_argument("--events-dir", type=Path, default=EVENTS_DIR)
    args = parser.parse_args(argv)
    if not args.secret.startswith(SECRET_PREFIX):
        parser.error(f"--secret must look like {SECRET_PREFIX}<base64 key>")
    try:
        base64.b64decode(args.secret.removeprefix(SECRET_PREFIX), validate=True)
    except ValueError:
        parser.error("--secret: the part after whsec_ is not valid base64")

    paths = sorted(args.events_dir.glob("webhook-*.json"))
    meta_paths = sorted(args.events_dir.glob("meta-webhook-*.json"))
    if not paths and not meta_paths:
        print(f"no webhook-*.json or meta-webhook-*.json in {args.events_dir}", file=sys.stderr)
        return 1
    now = int(time.time())
    for path in paths:
        event = resign(json.loads(path.read_text(encoding="utf-8")), args.secret, now)
        path.write_text(json.dumps(event, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"signed {path.relative_to(args.events_dir.parent)} (valid for 5 minutes)")
    for path in meta_paths:
        event = json.loads(path.read_text(encoding="utf-8"))
        if event.get("body") is None:
            continue  # the GET subscription check carries no body and no signature
        event = resign_meta(event, args.meta_app_secret)
        path.write_text(json.dumps(event, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"signed {path.relative_to(args.events_dir.parent)} (Meta: no expiry)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
