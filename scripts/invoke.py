"""`make invoke FUNCTION=consumer EVENT=events/consumer-sqs-batch.json`: one function, one
event, on the local stack (no Docker, no AWS), printed as `sam local invoke` prints it: the
function's log lines on stderr, then its response on stdout.

    python scripts/invoke.py consumer events/consumer-sqs-batch.json
    python scripts/invoke.py WebhookFunction events/webhook-message-received.json

FUNCTION is a logical id of template.yaml (ConsumerFunction) or its short name (consumer,
webhook, compactor, admin). The function runs in its own environment with the environment
template.yaml gives it, against the local stack's stand-ins (moto, the local whasp or Graph API,
the offline model or OPENAI_BASE_URL). A whasp webhook event (events/webhook-*.json) is signed
with a timestamp and refused after five minutes: it is re-signed here, on the fly, with the
documented test-only secret (what `make events` does to the files); a Meta event
(events/meta-*.json) runs the stack with Provider=meta.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from sign_events import TEST_SECRET, resign

from devstack.console import Console
from devstack.lambda_harness import Outcome
from devstack.resources import load_template
from devstack.stack import DevStack

ROOT = Path(__file__).resolve().parent.parent


def logical_id(template: dict[str, Any], name: str) -> str:
    """ConsumerFunction for "consumer", "ConsumerFunction" or "consumerfunction"."""
    functions = [
        key
        for key, resource in (template.get("Resources") or {}).items()
        if resource.get("Type") == "AWS::Serverless::Function"
    ]
    wanted = name.casefold().removesuffix("function")
    for key in functions:
        if key.casefold().removesuffix("function") == wanted:
            return key
    raise SystemExit(f"no function {name!r} in template.yaml; one of: {', '.join(functions)}")


def prepared(path: Path) -> dict[str, Any]:
    """The event, a whasp webhook's signed afresh (its signature expires after 5 minutes)."""
    event = json.loads(path.read_text(encoding="utf-8"))
    headers = event.get("headers") if isinstance(event, dict) else None
    if isinstance(headers, dict) and "webhook-signature" in headers:
        event = resign(event, TEST_SECRET, int(time.time()))
    return event


def show(outcome: Outcome, out: Any, err: Any) -> None:
    """As `sam local invoke` shows it: logs and a REPORT line on stderr, the response on
    stdout (a function error as Lambda reports it: errorType and errorMessage)."""
    for line in outcome.logs:
        print(line, file=err)
    cold = "  Init: cold start" if outcome.cold else ""
    print(f"REPORT Duration: {outcome.duration_ms:.2f} ms{cold}", file=err)
    if outcome.ok:
        response: Any = outcome.result
    else:
        response = {"errorType": outcome.error_type, "errorMessage": outcome.error_message}
    print(json.dumps(response), file=out)


def main(argv: list[str] | None = None, *, out: Any = None, err: Any = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = argparse.ArgumentParser(prog="make invoke", description=__doc__.split("\n\n")[0])
    parser.add_argument("function", help="ConsumerFunction, or consumer, webhook, compactor ...")
    parser.add_argument(
        "event", type=Path, help="a JSON event, e.g. events/consumer-sqs-batch.json"
    )
    parser.add_argument("--log", default=str(ROOT / "local" / "invoke.log"))
    args = parser.parse_args(argv)
    event = prepared(args.event)
    provider = "meta" if args.event.name.startswith("meta-") else "whasp"
    template = load_template()
    function = logical_id(template, args.function)  # a wrong name stops before any stack starts
    console = Console(err, level="quiet")  # the stack's own lines: only its warnings
    with DevStack(
        console=console, log_path=args.log, provider=provider, template=template
    ) as stack:
        outcome = stack.invoke(function, event)
        show(outcome, out, err)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
