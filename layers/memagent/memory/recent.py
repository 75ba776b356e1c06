"""Who wrote recently (OperatorConsole=true): the keys a person's state item carries for the
sparse RecentIndex (template.yaml), which the console lists, most recent first.

`recent_shard` is the agent and one of SHARDS shards, chosen by the person's key, so the writes
spread over SHARDS partitions of the index; `recent_at` is the hour (UTC) the person last wrote:
it changes at most once an hour, and an index is written only when its keys or projected
attributes change, so the index costs at most one write per person-hour, not one per message.
`recent_address` is where to open their conversation (their phone or BSUID), as a handoff keeps
its address; an erasure removes all three (Kind.CONTENT), and so the person from the list.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

SHARDS = 16


def shard_of(agent: str, pk: str) -> str:
    """The person's shard of the agent's part of the index."""
    number = int(hashlib.sha256(pk.encode()).hexdigest()[:8], 16) % SHARDS
    return f"{agent}#{number:02d}"


def shards(agent: str) -> list[str]:
    """Every shard of the agent's part of the index: a listing reads them all and merges."""
    return [f"{agent}#{number:02d}" for number in range(SHARDS)]


def hour_of(at: datetime) -> str:
    """The hour `at` falls in, UTC, as the index sorts it: 2026-12-04T09."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H")


def recent_keys(agent: str, pk: str, at: datetime, address: str) -> dict[str, str]:
    """The state attributes that list the person as having written at `at`."""
    return {
        "recent_shard": shard_of(agent, pk),
        "recent_at": hour_of(at),
        "recent_address": address,
    }
