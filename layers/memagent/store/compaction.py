"""The store's side of compaction (memagent/compaction/fold.py folds): the commit point (summary,
marker, facts in one transaction) and the idempotent clean-up after it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from memagent.errors import ConcurrentUpdate
from memagent.memory import Fact
from memagent.store.table import FACT, STATE, SUMMARY, TRANSACTION_LIMIT, Table, iso, msg_sk


def summary_unchanged(seen_at: datetime | None) -> dict[str, Any]:
    """The condition that the SUMMARY item is still the one read at `seen_at` (None: there was
    none, or it had no time). A summary kept on the state item by an older version has no
    SUMMARY item: that counts as unchanged too."""
    names = {"ExpressionAttributeNames": {"#at": "at"}}
    if seen_at is None:
        return {"ConditionExpression": "attribute_not_exists(#at)", **names}
    return {
        "ConditionExpression": "attribute_not_exists(#at) OR #at = :seen_at",
        "ExpressionAttributeValues": {":seen_at": iso(seen_at)},
        **names,
    }


class CompactionWrites(Table):
    def commit_compaction(
        self,
        pk: str,
        *,
        old_marker: int,
        new_marker: int,
        summary: str,
        new_facts: Iterable[tuple[str, Fact]],
        dropped_fact_keys: Iterable[str] = (),
        erased_at: datetime | None = None,
        summary_at: datetime | None = None,
        fold_tokens: int = 0,
    ) -> None:
        """The commit point of a compaction: summary, new marker and facts, all or nothing, and
        only if nobody moved the marker since we read it, nobody erased the person meanwhile
        (an erasure strips last_seq and moves erased_at) and the summary is still the one we
        read (`summary_at`: an operator may have replaced it by hand; the folded turns stay
        raw for the next run, which folds them into the operator's summary). Raises
        ConcurrentUpdate otherwise.
        The summary goes in its own item (the state, written by every turn, stays small); the
        marker stays on the state, where every turn's condition reads it. `fold_tokens`: what
        the fold cost, added to the state's running total for the person's day's count."""
        now = iso(datetime.now(UTC))
        actions = [
            self._marker_moved(pk, old_marker, new_marker, erased_at, now, fold_tokens),
            self._summary_put(pk, summary, new_marker, summary_at, now),
            *(self._fact_put(pk, key, fact) for key, fact in new_facts),
            *(self._fact_delete(pk, key) for key in dropped_fact_keys),
        ]
        if len(actions) > TRANSACTION_LIMIT:
            raise ValueError(f"compaction commit needs {len(actions)} actions")
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("the summary marker moved; another compaction won")

    def _marker_moved(
        self,
        pk: str,
        old_marker: int,
        new_marker: int,
        erased_at: datetime | None,
        now: str | None,
        fold_tokens: int = 0,
    ) -> dict[str, Any]:
        """The state's new marker, if it is still `old_marker`, the turns up to `new_marker`
        are still there, and the erasure mark is still the one read."""
        condition = (
            "marker = :old" if old_marker else "(attribute_not_exists(marker) OR marker = :old)"
        )
        condition += " AND attribute_exists(last_seq) AND last_seq >= :new"
        values: dict[str, Any] = {}
        if erased_at is None:
            condition += " AND attribute_not_exists(erased_at)"
        else:
            condition += " AND erased_at = :erased"
            values[":erased"] = iso(erased_at)
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                # REMOVE: a summary an older version kept on the state item
                # ADD: the turns' counters read it against their own mark (memagent.memory.budget)
                "UpdateExpression": (
                    "SET marker = :new, compaction_due = :false, updated_at = :now "
                    "REMOVE summary, summary_at ADD fold_tokens :tokens"
                ),
                "ConditionExpression": f"attribute_exists(pk) AND {condition}",
                "ExpressionAttributeValues": {
                    **values,
                    ":now": now,
                    ":new": new_marker,
                    ":old": old_marker,
                    ":false": False,
                    ":tokens": fold_tokens,
                },
            }
        }

    def _summary_put(
        self, pk: str, summary: str, marker: int, seen_at: datetime | None, now: str | None
    ) -> dict[str, Any]:
        """The new summary, if the one there is still the one read (summary_unchanged)."""
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": {"pk": pk, "sk": SUMMARY, "text": summary, "marker": marker, "at": now},
                **summary_unchanged(seen_at),
            }
        }

    def _fact_put(self, pk: str, key: str, fact: Fact) -> dict[str, Any]:
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": {
                    "pk": pk,
                    "sk": f"{FACT}{key}",
                    "text": fact.text,
                    "at": iso(fact.at),
                    **({"confirmed": iso(fact.confirmed_at)} if fact.confirmed_at else {}),
                },
            }
        }

    def _fact_delete(self, pk: str, key: str) -> dict[str, Any]:
        return {"Delete": {"TableName": self.table_name, "Key": {"pk": pk, "sk": f"{FACT}{key}"}}}

    def delete_turns(self, pk: str, seqs: Iterable[int]) -> int:
        """Delete folded turns. Idempotent (deleting a missing item is a no-op); batches of 25,
        which boto3's batch writer retries until none is left unprocessed."""
        count = 0
        with self.table.batch_writer() as batch:
            for seq in seqs:
                batch.delete_item(Key={"pk": pk, "sk": msg_sk(seq)})
                count += 1
        return count

    def clear_compaction_flag(self, pk: str, *, seen_last_seq: int) -> None:
        """Lower the flag when there is nothing to fold, unless a new turn arrived meanwhile."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="SET compaction_due = :false",
            ConditionExpression="last_seq = :seen AND compaction_due = :true",
            ExpressionAttributeValues={":false": False, ":true": True, ":seen": seen_last_seq},
        )
