"""The store's side of erasure (memagent/lifecycle/rights.py forgets): the erasure mark first, then
deletes, then the state stripped down to the mark."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from memagent.memory import Kind, PersonState, classed
from memagent.store.table import HANDOFF_ATTRIBUTES, STATE, Table, from_iso, iso

# on the state item only in versions before the SUMMARY item: a past that no longer grows
_LEGACY_STATE = ("summary", "summary_at")


def state_attributes(state_type: type = PersonState, *, erased: bool) -> tuple[str, ...]:
    """The state item's attributes an erasure strips (`erased`) or keeps, derived from the
    state's fields and their Kind (memagent.memory.types.classed): a new field is one or the
    other."""
    names: list[str] = []
    for each, kind in classed(state_type):
        if kind.erased == erased:
            names.extend(HANDOFF_ATTRIBUTES if each.name == "handoff" else (each.name,))
    return tuple(names) + (_LEGACY_STATE if erased else ())


# what forget() strips from the state item, and what it leaves (the erasure mark, and where
# the partition's own key now leads)
_STATE_CONTENT = state_attributes(erased=True)
KEPT_ON_ERASURE = frozenset({"pk", "sk", *state_attributes(erased=False)})
# the day's budget counters (memagent.memory.budget), which an erasure keeps
BUDGET_COUNTERS = tuple(each.name for each, kind in classed(PersonState) if kind is Kind.COUNTER)


class ErasureWrites(Table):
    def everything(self, pk: str) -> list[dict[str, Any]]:
        """Every item held for a person, for export and erasure."""
        return list(self._query(pk, None))

    def mark_erased(self, pk: str, at: datetime) -> datetime:
        """Record the erasure mark first: from now on no event older than it is stored. The mark
        only moves forward; returns the mark in force (`at`, or a later one already there)."""
        if not self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="SET erased_at = :at",
            ConditionExpression="attribute_not_exists(erased_at) OR erased_at < :at",
            ExpressionAttributeValues={":at": iso(at)},
        ):
            state = self.table.get_item(Key={"pk": pk, "sk": STATE}, ConsistentRead=True)
            return from_iso(state["Item"]["erased_at"]) or at
        return at

    def erasure_mark(self, pk: str) -> datetime | None:
        """The person's erasure mark as it stands now (a consistent read of one attribute)."""
        item = self.table.get_item(
            Key={"pk": pk, "sk": STATE}, ConsistentRead=True, ProjectionExpression="erased_at"
        ).get("Item")
        return from_iso(item.get("erased_at")) if item else None

    def delete_items(self, pk: str, sort_keys: Iterable[str]) -> int:
        """Delete items by sort key, idempotently, in batches of 25 (boto3's batch writer)."""
        count = 0
        with self.table.batch_writer() as batch:
            for sk in sort_keys:
                batch.delete_item(Key={"pk": pk, "sk": sk})
                count += 1
        return count

    def delete_items_as_read(self, pk: str, items: Iterable[dict[str, Any]]) -> int:
        """Delete each item only if it is still the one that was read (its `at` unchanged): a
        retention expiry's deletes, while the person's new conversation may be writing the same
        keys (it restarts at seq 1 when nothing was folded). One request per item, rarely many:
        an expiry is once per person. Returns how many were deleted."""
        deleted = 0
        for item in items:
            delete: dict[str, Any] = {"Key": {"pk": pk, "sk": item["sk"]}}
            if "at" in item:  # turns, facts, the summary; a link (ALIAS#) has no time
                delete["ConditionExpression"] = "#at = :at"
                delete["ExpressionAttributeNames"] = {"#at": "at"}
                delete["ExpressionAttributeValues"] = {":at": item["at"]}
            # False when written anew (or gone) since the read: not the expired memory's
            deleted += self._delete_if(**delete)
        return deleted

    def reduce_state_to_mark(self, pk: str, at: datetime) -> None:
        """Strip the state item down to the content-free erasure mark (pk, sk, erased_at) and
        the day's budget counters, unless a newer erasure or a genuinely new message has taken
        over meanwhile."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="REMOVE " + ", ".join(_STATE_CONTENT),
            ConditionExpression="erased_at = :at",
            ExpressionAttributeValues={":at": iso(at)},
        )
