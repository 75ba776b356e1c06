"""The audit trail of what operators do: who exported, erased, read or edited whom, when, and
how it ended. One log line per request, in the function's log group (kept LogRetentionDays),
findable with CloudWatch Logs Insights: `filter audit = "erase"`.

The line holds the caller's IAM ARN and the person's hashed key: never the phone number (it
is in the request path, so the HTTP API's access log leaves the path out too), never content.
"""

from __future__ import annotations

from datetime import UTC, datetime

from memagent.observability import logger

EXPORT = "export"
ERASE = "erase"
READ = "read"  # the conversation, summary and facts
FACT_ADD = "fact_add"
FACT_CORRECT = "fact_correct"
FACT_DELETE = "fact_delete"
SUMMARY_REPLACE = "summary_replace"
HANDOFF_START = "handoff_start"
HANDOFF_END = "handoff_end"
REPLY = "operator_reply"
LIST_HANDOFFS = "list_handoffs"
FOLLOW_UP_ADD = "follow_up_add"
FOLLOW_UP_CANCEL = "follow_up_cancel"


def audit(action: str, *, caller: str | None, person: str | None, outcome: str) -> None:
    """Write the one audit line of an admin request. `outcome`: done, refused or failed."""
    logger.info(
        "audit",
        extra={
            "audit": action,
            "caller": caller or "unknown",
            "person": person,
            "at": datetime.now(UTC).isoformat(),
            "outcome": outcome,
        },
    )
