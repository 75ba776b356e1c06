"""EventBridge: tells operators that a chat needs a human, without saying what was said.

One event per handoff (started, ended) and per message a person writes while a human has the
chat, on the stack's OperatorEventBus, source `memagent`. The detail holds the agent, the
person's key, counts and times, never text or phone numbers: the operator reads the
conversation through the admin API (GET /people/{id}/conversation).

EventBridge rather than SNS: a rule routes the events anywhere without changing this stack
(SNS and email, a Slack or ticketing API destination, a Lambda, Step Functions), several
consumers can filter on detail-type or reason, and the bus archives and replays if asked. SNS
would fix one fan-out shape here; a rule on this bus can still target an SNS topic.

Notifications are best effort: a failed PutEvents is counted (OperatorNotificationsFailed) and
logged, and never fails the turn or the operator's request (the memory is what matters, and the
GET /handoffs list shows everyone waiting whatever happened to the events).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.observability import logger, metrics

SOURCE = "memagent"
HANDOFF_STARTED = "Handoff started"
HANDOFF_MESSAGE = "Handoff message waiting"
HANDOFF_ENDED = "Handoff ended"


class OperatorEvents:
    def __init__(self, bus: str | None, agent: str, *, client: Any | None = None):
        self.bus = bus
        self.agent = agent
        self._client = client

    def _events(self) -> Any:
        if self._client is None:
            import boto3

            self._client = boto3.client("events")
        return self._client

    def emit(self, detail_type: str, person: str, **counts: Any) -> bool:
        """Put one event (no-op without a bus). Returns whether EventBridge took it."""
        if not self.bus:
            return False
        detail = {"agent": self.agent, "person": person, **counts}
        try:
            answer = self._events().put_events(
                Entries=[
                    {
                        "Source": SOURCE,
                        "DetailType": detail_type,
                        "Detail": json.dumps(detail, default=_plain),
                        "EventBusName": self.bus,
                    }
                ]
            )
            failed = answer.get("FailedEntryCount", 0)
        except Exception as error:  # best effort: see the module docstring
            failed = 1
            logger.warning("operator event not sent", extra={"error": type(error).__name__})
        if failed:
            metrics.add_metric(name="OperatorNotificationsFailed", unit=MetricUnit.Count, value=1)
            return False
        logger.info("operator notified", extra={"event": detail_type, "person": person})
        return True


def _plain(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return str(value)
