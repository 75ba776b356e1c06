"""DynamoDB: outcomes (issue 42, item 4). A conversation is a person's day (UTC, of what they
wrote): whether a human had to take it, whether they came back within 24 hours, what they
rated it, what it cost in tokens.

Two kinds of item, both small:

    pk P#<person>   sk CONV#<day>      at, handed_off?, csat?   the person's conversation
    pk A#<agent>    sk OUTCOMES#<day>  counters (ADD)           the day's figures, no person in them

The person's item lives in their partition, so an erasure or a retention's expiry (which delete
everything of the partition) removes it with the rest; its sort key sorts before FACT#, outside
the turn's one Query. The day's item holds counts only (no identifier, no content): what
`GET /outcomes` reads, one Query for a range of days. Each count moves in the same transaction
as the person's item that justifies it, under a condition on that item, so a redelivered turn
counts nothing twice.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.store.table import Table, iso

CONV = "CONV#"  # < FACT#: outside the turn's Query (memagent.store.memory_store)
OUTCOMES = "OUTCOMES#"
# the day's counters (GET /outcomes; docs/operate.md, "Outcomes")
COUNTERS = ("conversations", "returned", "handed_off", "csat_answers", "csat_total", "tokens")


class OutcomeWrites(Table):
    def _transact_outcome(self, items: list[dict[str, Any]]) -> bool:
        """One transaction; False when a condition failed (nothing written)."""
        try:
            self._client.transact_write_items(TransactItems=items)
        except self._client.exceptions.TransactionCanceledException as error:
            reasons = [r.get("Code") for r in error.response.get("CancellationReasons", [])]
            if "ConditionalCheckFailed" in reasons:
                return False
            raise
        return True

    def _counted(self, agent_pk: str, day: str, **counts: int) -> dict[str, Any]:
        names = {f"#{n}": n for n in counts}
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": agent_pk, "sk": f"{OUTCOMES}{day}"},
                "UpdateExpression": "ADD " + ", ".join(f"#{n} :{n}" for n in counts),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {f":{n}": v for n, v in counts.items()},
            }
        }

    def open_conversation(
        self, pk: str, agent_pk: str, day: str, *, returned: bool, at: datetime
    ) -> bool:
        """The person's first message of `day` opens their conversation, counted once
        (`returned`: within 24 hours of their previous message). False: already open."""
        put = {
            "Put": {
                "TableName": self.table_name,
                "Item": {"pk": pk, "sk": f"{CONV}{day}", "at": iso(at), "returned": returned},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }
        counts = {"conversations": 1, "returned": int(returned)}
        return self._transact_outcome([put, self._counted(agent_pk, day, **counts)])

    def conversation_handed_off(self, pk: str, agent_pk: str, day: str) -> bool:
        """A human took the day's conversation (the person, the model or an operator asked):
        counted once a conversation. False: no such conversation, or counted before."""
        return self._mark_conversation(pk, agent_pk, day, "handed_off", True, handed_off=1)

    def record_csat(self, pk: str, agent_pk: str, day: str, score: int) -> bool:
        """The person's one-tap rating of the day's conversation (1 to 3), kept with it; the
        first answer counts. False: no such conversation, or rated before."""
        return self._mark_conversation(
            pk, agent_pk, day, "csat", score, csat_answers=1, csat_total=score
        )

    def _mark_conversation(
        self, pk: str, agent_pk: str, day: str, name: str, value: Any, **counts: int
    ) -> bool:
        update = {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": f"{CONV}{day}"},
                "UpdateExpression": "SET #m = :m",
                "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(#m)",
                "ExpressionAttributeNames": {"#m": name},
                "ExpressionAttributeValues": {":m": value},
            }
        }
        return self._transact_outcome([update, self._counted(agent_pk, day, **counts)])

    def add_tokens(self, agent_pk: str, day: str, tokens: int) -> None:
        """A model reply's tokens, on the day's figures (cost per conversation)."""
        self._client.update_item(**self._counted(agent_pk, day, tokens=tokens)["Update"])

    def conversation(self, pk: str, day: str) -> dict[str, Any] | None:
        return self.table.get_item(Key={"pk": pk, "sk": f"{CONV}{day}"}).get("Item")

    def outcomes(self, agent_pk: str, first: str, last: str) -> list[dict[str, Any]]:
        """The figures of the days `first` to `last` (ISO dates, both included) that have any."""
        condition = Key("sk").between(f"{OUTCOMES}{first}", f"{OUTCOMES}{last}")
        return list(self._query(agent_pk, condition))
