"""DynamoDB: the operator's writes to the memory table (memagent.operator.reading), beside the
turn's. Here: memory by hand; a human taking the chat (take over, the operator's reply, hand back,
who is waiting) is memagent/store/handoff.py.

Every write is conditional, so an operator and a running turn or compaction never overwrite
each other's work without knowing:
- facts: adding needs the fact absent, correcting and deleting need it present (a compaction
  that dropped it meanwhile makes the edit a 404/409, not a silent resurrection);
- the summary: replaced only if it is still the one the operator read (its `at`); compaction's
  own commit is conditional on the summary it read (MemoryStore.commit_compaction), so an
  operator's summary is never folded over by a fold that started before it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.store.compaction import summary_unchanged
from memagent.store.handoff import HandoffWrites
from memagent.store.memory_store import MemoryStore
from memagent.store.table import FACT, STATE, SUMMARY
from memagent.store.table import iso as _iso

OPERATOR = "operator"


class OperatorStore(HandoffWrites, MemoryStore):
    """The memory table as the admin API writes it. Here: facts and summary by hand; the
    handoff's writes are memagent/store/handoff.py."""

    def facts(self, pk: str) -> list[dict[str, Any]]:
        """The person's facts with their ids (the key after FACT#), oldest first."""
        items = self._query(pk, Key("sk").begins_with(FACT))
        facts = [
            {
                "id": i["sk"].removeprefix(FACT),
                "text": i["text"],
                "at": i.get("at"),
                "by": i.get("by"),
            }
            for i in items
        ]
        return sorted(facts, key=lambda fact: str(fact["at"] or ""))

    def summary_item(self, pk: str) -> dict[str, Any] | None:
        item = self.table.get_item(Key={"pk": pk, "sk": SUMMARY}, ConsistentRead=True)
        return item.get("Item")

    def _fact_item(self, pk: str, key: str, text: str, at: datetime) -> dict[str, Any]:
        return {"pk": pk, "sk": f"{FACT}{key}", "text": text, "at": _iso(at), "by": OPERATOR}

    def add_fact(self, pk: str, key: str, text: str, at: datetime) -> bool:
        """False: a fact that normalises the same is there already."""
        return (
            self._transact(
                [
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": self._fact_item(pk, key, text, at),
                            "ConditionExpression": "attribute_not_exists(pk)",
                        }
                    },
                    self._person_exists(pk),
                ]
            )
            is None
        )

    def correct_fact(
        self, pk: str, old: str, new: str, text: str, at: datetime
    ) -> list[str] | None:
        """Replace fact `old` by `text` (key `new`) in one transaction. None when done, else the
        cancellation reasons: [old's, new's]."""
        put = {
            "Put": {
                "TableName": self.table_name,
                "Item": self._fact_item(pk, new, text, at),
                "ConditionExpression": (
                    "attribute_exists(pk)" if new == old else "attribute_not_exists(pk)"
                ),
            }
        }
        if new == old:  # the same fact respelt: one conditional put
            return self._transact([put])
        delete = {
            "Delete": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": f"{FACT}{old}"},
                "ConditionExpression": "attribute_exists(pk)",
            }
        }
        return self._transact([delete, put])

    def delete_fact(self, pk: str, key: str) -> bool:
        """False: no such fact (already deleted, or dropped by a compaction)."""
        try:
            self.table.delete_item(
                Key={"pk": pk, "sk": f"{FACT}{key}"},
                ConditionExpression="attribute_exists(pk)",
            )
        except self._client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def replace_summary(
        self, pk: str, text: str, *, seen_at: datetime | None, at: datetime
    ) -> bool:
        """Replace the summary if it is still the one read at `seen_at`. False otherwise."""
        condition = summary_unchanged(seen_at)
        return self._update_if(
            Key={"pk": pk, "sk": SUMMARY},
            UpdateExpression="SET #text = :text, #at = :at, #by = :by",
            ConditionExpression=condition["ConditionExpression"],
            ExpressionAttributeNames={
                **condition["ExpressionAttributeNames"],
                "#text": "text",
                "#by": "by",
            },
            ExpressionAttributeValues={
                **condition.get("ExpressionAttributeValues", {}),
                ":text": text,
                ":at": _iso(at),
                ":by": OPERATOR,
            },
        )

    def _person_exists(self, pk: str) -> dict[str, Any]:
        """A transaction's check that the person has a memory (and was not erased meanwhile)."""
        return {
            "ConditionCheck": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                "ConditionExpression": "attribute_exists(last_seq)",
            }
        }
