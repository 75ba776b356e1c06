"""A person's pending follow-ups (memagent.turn.follow_ups), kept in their partition: listed,
counted for the limit, erased with them. `DUE#<schedule name>` sorts before `FACT#`, so the
turn's one Query (from FACT#) never reads them: a person's follow-ups cost a turn nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.memory import PersonState, Turn
from memagent.store.ledger import STORED, LedgerWrites
from memagent.store.turn import TurnWrites, _no_handoff_since

DUE = "DUE#"
# what an operator, the export and the API see of a follow-up (not the address it goes to)
VIEWED = ("name", "at", "local", "zone", "about", "created_at", "status")
# its time came while a human had the chat: kept, for the operator to handle
FOLLOW_UP_FOR_HUMAN = "for_human"


def follow_up_view(item: dict[str, Any]) -> dict[str, Any]:
    view = {"id": item["name"], **{k: item.get(k) for k in VIEWED if k != "name"}}
    view["status"] = view["status"] or "pending"
    return view


class FollowUpWrites(TurnWrites, LedgerWrites):
    def follow_ups(self, pk: str) -> list[dict[str, Any]]:
        """The person's pending follow-ups, soonest first (without those an operator was left
        whose time to handle them has passed: DynamoDB's TTL deletes them days late)."""
        now = datetime.now(UTC).timestamp()
        items = [
            item
            for item in self._query(pk, Key("sk").begins_with(DUE))
            if item.get("expires_at") is None or int(item["expires_at"]) > now
        ]
        return sorted(items, key=lambda item: item.get("at", ""))

    def follow_up(self, pk: str, name: str) -> dict[str, Any] | None:
        response = self.table.get_item(Key={"pk": pk, "sk": DUE + name}, ConsistentRead=True)
        return response.get("Item")

    def add_follow_up(self, pk: str, name: str, values: dict[str, Any]) -> bool:
        """Keep a follow-up; False when it is kept already (a repeat of the same request)."""
        return self._put_if(
            Item={"pk": pk, "sk": DUE + name, "name": name, **values},
            ConditionExpression="attribute_not_exists(pk)",
        )

    def hand_follow_up_over(self, pk: str, name: str, until: datetime) -> bool:
        """Its time came while a human had the chat: kept, marked, for the operator, until
        `until` (then DynamoDB's TTL deletes it: never kept for ever)."""
        return self._update_if(
            Key={"pk": pk, "sk": DUE + name},
            UpdateExpression="SET #s = :s, expires_at = :e",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":s": FOLLOW_UP_FOR_HUMAN,
                ":e": int(until.timestamp()),
            },
        )

    def drop_follow_up(self, pk: str, name: str) -> bool:
        """Forget a follow-up (sent, skipped, cancelled); False when it was gone already."""
        return self._delete_if(
            Key={"pk": pk, "sk": DUE + name}, ConditionExpression="attribute_exists(pk)"
        )

    def remember_follow_up(
        self,
        pk: str,
        *,
        previous: PersonState,
        event_id: str,
        turn: Turn,
        compact: bool,
        ledger_ttl: timedelta,
        template: tuple[str, str] | None = None,
        extra_set: dict[str, Any] | None = None,
        remove: tuple[str, ...] = (),
    ) -> bool:
        """Store the follow-up's message as the agent's turn, with its ledger entry (the reply's
        words: a repeat sends the same), in one write; False when the entry exists (a repeat).
        Guarded like a reply: the person's last_seq as read, no erasure since, no human.
        `extra_set`, `remove`: state attributes the same write sets and removes (the CSAT
        question's, memagent/turn/csat.py, which is stored the same way)."""
        # a template's (name, language) kept on the entry: a repeat sends it the same way
        kept = {"template": list(template)} if template is not None else {}
        actions = [
            self._ledger_put(pk, event_id, STORED, ledger_ttl, reply_seq=turn.seq, **kept),
            *self._turn_with_state(pk, previous, turn, compact, extra_set=extra_set, remove=remove),
        ]
        # no human took the chat since the turn read it (a timed-out handoff read stays allowed)
        since = previous.handoff.since if previous.handoff else None
        unchanged, values = _no_handoff_since(since)
        update = actions[-1]["Update"]
        update["ConditionExpression"] += f" AND ({unchanged})"
        update["ExpressionAttributeValues"].update(values)
        return self._write_once(actions, "storing the follow-up")
