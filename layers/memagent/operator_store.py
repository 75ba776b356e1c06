"""DynamoDB: the operator's writes to the memory table (memagent.operator), beside the turn's.

Every write is conditional, so an operator and a running turn or compaction never overwrite
each other's work without knowing:
- facts: adding needs the fact absent, correcting and deleting need it present (a compaction
  that dropped it meanwhile makes the edit a 404/409, not a silent resurrection);
- the summary: replaced only if it is still the one the operator read (its `at`); compaction's
  own commit is conditional on the summary it read (MemoryStore.commit_compaction), so an
  operator's summary is never folded over by a fold that started before it;
- the operator's reply takes the next seq with the state's last_seq condition, like a turn.

Who is waiting for a human is read from the sparse index HandoffIndex (template.yaml): only the
state items of people handed off carry its keys (`handoff_agent`, `handoff_since`), so the list
is one Query, oldest first, and an erasure or a hand-back removes a person from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.errors import ConcurrentUpdate
from memagent.memory import PersonState, Turn
from memagent.store import MemoryStore
from memagent.store_compaction import summary_unchanged
from memagent.store_ledger import ANSWERED, OPTED_OUT, SKIPPED, STORED, ledger_sk
from memagent.store_table import FACT, HANDOFF_ATTRIBUTES, STATE, SUMMARY, TRANSACTION_LIMIT
from memagent.store_table import iso as _iso

HANDOFF_INDEX = "HandoffIndex"
OPERATOR = "operator"
HANDED_OVER = "handed_to_human"  # why the agent skipped a message: a human took the chat


class OperatorStore(MemoryStore):
    # ------------------------------------------------------------------ facts and summary

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

    # ------------------------------------------------------------------ handoff

    def take_over(
        self,
        pk: str,
        *,
        agent: str,
        reason: str,
        at: datetime,
        previous: datetime | None,
        address: str,
        awaiting: Sequence[str] = (),
        ledger_ttl: timedelta,
    ) -> bool:
        """Hand the person to a human (replacing a timed-out handoff `previous`). The messages
        still `awaiting` a reply are the human's now: their ledger entries end `skipped`
        (reason `handed_to_human`) and the state's list is dropped, in the same transaction,
        so the agent never answers them, during the handoff or after it; they count as
        waiting. False: the person is gone, or someone else started a handoff meanwhile."""
        condition = "attribute_exists(last_seq) AND "
        values: dict[str, Any] = {
            ":address": address,
            ":agent": agent,
            ":since": _iso(at),
            ":reason": reason,
            ":waiting": len(awaiting),
        }
        if previous is None:
            condition += "attribute_not_exists(handoff_since)"
        else:
            condition += "handoff_since = :previous"
            values[":previous"] = _iso(previous)
        state = {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                "UpdateExpression": (
                    "SET handoff_agent = :agent, handoff_since = :since, handoff_reason = :reason,"
                    " handoff_waiting = :waiting, handoff_address = :address"
                    " REMOVE handoff_replied_at, awaiting"
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
            }
        }
        skipped = [
            self._settle(pk, e, ledger_ttl, status=SKIPPED, reason=HANDED_OVER)
            for e in awaiting[-(TRANSACTION_LIMIT - 1) :]
        ]
        reasons = self._transact([state, *skipped])
        if reasons is None:
            return True
        if reasons[0] == "ConditionalCheckFailed":
            return False
        raise ConcurrentUpdate("memory changed while handing the chat over; retry")

    def hand_back(self, pk: str) -> bool:
        """End a handoff. False: none was in force."""
        return self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="REMOVE " + ", ".join(HANDOFF_ATTRIBUTES),
            ConditionExpression="attribute_exists(handoff_since)",
        )

    def handoffs(self, agent: str) -> list[dict[str, Any]]:
        """The people handed to a human, oldest handoff first (HandoffIndex, one Query)."""
        kwargs: dict[str, Any] = {
            "IndexName": HANDOFF_INDEX,
            "KeyConditionExpression": Key("handoff_agent").eq(agent),
        }
        found: list[dict[str, Any]] = []
        while True:
            page = self.table.query(**kwargs)
            found.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return found
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # ------------------------------------------------------------------ the operator's reply

    def current_number(self, agent_pk: str, last: str | None) -> str | None:
        """The business number to answer from: the one the person last wrote to, or the
        number that replaced it (number.replaced: the old one is retired)."""
        item = self.table.get_item(Key={"pk": agent_pk, "sk": "NUMBER"}).get("Item") or {}
        return item["current"] if last and item.get("previous") == last else last

    def remember_operator_reply(
        self,
        pk: str,
        *,
        previous: PersonState,
        turn: Turn,
        key: str,
        compact: bool,
        ledger_ttl: timedelta,
    ) -> bool:
        """Store the operator's reply with its ledger entry (keyed by the request's idempotency
        key) and the handoff's reply time, in one transaction. False: the key was seen before.
        The person's messages still awaiting a reply are answered by it (`answered`, naming
        it): the agent never answers what the human did. Raises ConcurrentUpdate if a turn
        took the seq first (the caller reads again)."""
        now = datetime.now(UTC)
        actions = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": {
                        "pk": pk,
                        "sk": ledger_sk(key),
                        "event_id": key,
                        "status": STORED,
                        "reply_seq": turn.seq,
                        "created_at": _iso(now),
                        "expires_at": int((now + ledger_ttl).timestamp()),
                    },
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
            self._new_turn(pk, turn),
            self._state_update(
                pk,
                previous=previous,
                seq=turn.seq,
                compact=compact,
                extra_set={"handoff_replied_at": _iso(turn.at), "handoff_waiting": 0},
                remove=("awaiting",),
            ),
        ]
        actions += [
            self._settle(pk, e, ledger_ttl, status=ANSWERED, answered_by=key, reply_seq=turn.seq)
            for e in previous.awaiting[-90:]
        ]
        reasons = self._transact(actions)
        if reasons is None:
            return True
        if reasons[:1] == ["ConditionalCheckFailed"]:
            return False
        raise ConcurrentUpdate("memory changed while storing the operator's reply; retry")

    def withdraw_reply(self, pk: str, key: str, seq: int, **details: Any) -> None:
        """A reply the provider refused before any part went out: out of memory, and its
        ledger entry says why (a retry of the same request answers the same refusal)."""
        self.delete_turns(pk, [seq])
        self.finish_event(
            pk, key, OPTED_OUT if details.pop("opted_out", False) else "refused", **details
        )
