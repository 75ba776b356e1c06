"""The audit trail of what operators do: who exported, erased, read or edited whom, when, and
how it ended. One log line per request, in the function's log group (kept LogRetentionDays),
findable with CloudWatch Logs Insights: `filter audit = "erase"`.

The line holds the caller (the IAM ARN, or the operator's user pool username and `sub`, with
the door each came through) and the person's hashed key: never the phone number (it
is in the request path, so the HTTP API's access log leaves the path out too), never content.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

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
LIST_RECENT = "list_recent"
LIST_OUTCOMES = "list_outcomes"
TEMPLATE_SEND = "operator_template"  # an approved template sent by an operator (Meta)
LIST_TEMPLATES = "list_templates"
FOLLOW_UP_ADD = "follow_up_add"
FOLLOW_UP_CANCEL = "follow_up_cancel"


def audit(
    action: str, *, caller: Any, person: str | None, outcome: str, reason: str | None = None
) -> None:
    """Write the one audit line of an admin request. `caller`: a memagent.operator Caller (its
    door, name and sub), an ARN, or None; `outcome`: done, refused or failed; `reason`: why it
    failed, as an error code (AccessDeniedException), never a message."""
    who: dict[str, Any] = {"caller": "unknown"}
    if isinstance(caller, str):
        who = {"caller": caller, "door": "iam"}
    elif caller is not None:
        who = {"caller": caller.name, "door": caller.door}
        if caller.sub:
            who["caller_sub"] = caller.sub
    logger.info(
        "audit",
        extra={
            "audit": action,
            **who,
            "person": person,
            "at": datetime.now(UTC).isoformat(),
            "outcome": outcome,
            **({"reason": reason} if reason else {}),
        },
    )
