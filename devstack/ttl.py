"""DynamoDB's Time to Live process, for the tables of this process's moto server (moto 5.2 keeps
a table's TTL setting, UpdateTimeToLive, but deletes nothing by it).

What AWS documents, and this stand-in does:
- "If the epoch time value stored in the attribute is less than the current time, the item is
  marked as expired and subsequently deleted"; only a top-level Number attribute counts.
- "DynamoDB typically deletes expired items within two days of expiration ... Items that have
  expired and not been deleted will still show up in reads, queries, and scans"
  (UpdateTimeToLive, API reference): an expired item stays readable, and writable, until `lag`
  seconds past its expiry (a test chooses; hours by default), then `sweep` deletes it.
- The deletion's stream record is a REMOVE whose `userIdentity` names the service: "Items that
  are deleted by the Time to Live process after expiration have the following fields:
  Records[].userIdentity.type "Service", Records[].userIdentity.principalId
  "dynamodb.amazonaws.com"" (Streams API reference, Record). GetRecords spells the Identity
  shape's members PrincipalId and Type (botocore's model); Lambda's records, principalId and
  type (devstack.lambda_harness.stream_record, memagent.aws.stream). Dated at the deletion.

Time is AWS's time on this machine, devstack.clock (no sleeping: advance it, then sweep):

    ttl = TimeToLive(lag=2 * 86400)
    SQS_CLOCK.advance(3 * 86400)
    ttl.sweep()                   # what the TTL has deleted by now, with its stream records
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from devstack.clock import SQS_CLOCK, ScaledClock

DEFAULT_LAG_SECONDS = 6 * 3600
TTL_IDENTITY = {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"}  # as GetRecords has it


class TimeToLive:
    """`table`: one table's TTL (a test's), else every table's with TTL enabled."""

    def __init__(
        self,
        *,
        lag: float = DEFAULT_LAG_SECONDS,
        clock: ScaledClock = SQS_CLOCK,
        table: str | None = None,
    ):
        if lag < 0:
            raise ValueError("the TTL's lag cannot be negative")
        self.lag = lag
        self.clock = clock
        self.table = table

    def sweep(self) -> int:
        """Delete every item whose TTL attribute is `lag` seconds or more in the past by the
        clock; how many were deleted."""
        from moto.dynamodb.models import dynamodb_backends

        from devstack.moto_fixes import locked

        now = self.clock.now()
        deleted = 0
        with locked():
            for regions in dynamodb_backends.values():
                for backend in regions.values():
                    for name, table in backend.tables.items():
                        if self.table in (None, name):
                            deleted += self._sweep_table(table, now)
        return deleted

    def _sweep_table(self, table: Any, now: float) -> int:
        if table.ttl.get("TimeToLiveStatus") != "ENABLED":
            return 0
        name = table.ttl["AttributeName"]
        due = [
            (item.hash_key, item.range_key)
            for item in table.all_items()
            if (expires := _epoch(item.attrs.get(name))) is not None and expires + self.lag <= now
        ]
        for hash_key, range_key in due:
            table.delete_item(hash_key, range_key)
            if table.stream_shard is not None:
                record = table.stream_shard.items[-1].record
                record["userIdentity"] = dict(TTL_IDENTITY)
                deleted = datetime.fromtimestamp(now, UTC).replace(tzinfo=None)  # moto's utcnow
                record["dynamodb"]["ApproximateCreationDateTime"] = deleted
        return len(due)


def _epoch(value: Any) -> float | None:
    """A TTL attribute's time: a Number; any other type is no expiry (DynamoDB ignores it)."""
    if value is None or value.type != "N":
        return None
    try:
        return float(value.value)
    except ValueError:
        return None
