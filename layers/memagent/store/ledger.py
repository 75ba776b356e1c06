"""The dedupe ledger: one item per provider event (EVT#<digest>), with the turn's progress and
a TTL. Its statuses, and what a repeat of each resumes: memagent/turn/redelivery.py."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.memory import Turn
from memagent.store.table import EVT, Table, iso

PART = "part_"  # ledger attribute part_<n>: the provider's id of reply part n, once sent

# ledger statuses
STORED, REPLIED, SENT = "stored", "replied", "sent"
OPTED_OUT, PARKED, SKIPPED = "opted_out", "parked", "skipped"
ANSWERED = "answered"  # covered by the reply stored under the entry `answered_by` names
FOR_HUMAN = "for_human"  # stored while a human had the chat: never answered by the agent
SENDING = "sending"  # an operator's reply claimed by the request sending it (store/handoff.py)
STAFF_ECHO = "staff_echo"  # what staff sent from the WhatsApp Business app, stored (turn/echoes.py)


class Standing(Enum):
    """What a person's message is to the agent, decided once (memagent.turn.remember.standing_of)
    and passed to the store: the ledger status its entry starts with, and whether it awaits a
    reply (joins the state's `awaiting` list, its reply's seq reserved)."""

    ANSWER = (STORED, True)  # the agent answers it (alone, or with the rest of its burst)
    STOP = (OPTED_OUT, False)  # an opt-out: stored, and what awaited a reply is dropped
    HELD = (OPTED_OUT, False)  # written before a standing opt-out: kept, never answered
    FOR_HUMAN = (FOR_HUMAN, False)  # a human has the chat: kept for them

    def __new__(cls, status: str, awaits_reply: bool) -> Standing:
        standing = object.__new__(cls)
        standing._value_ = len(cls.__members__)  # STOP and HELD share a status: not aliases
        standing.status = status
        standing.awaits_reply = awaits_reply
        return standing

    status: str
    awaits_reply: bool


def ledger_sk(event_id: str) -> str:
    return f"{EVT}{hashlib.sha256(event_id.encode()).hexdigest()[:32]}"


def sent_parts(entry: dict[str, Any]) -> dict[int, str]:
    """The reply parts a ledger entry records as sent: {part: provider message id}."""
    return {
        int(name.removeprefix(PART)): str(value)
        for name, value in entry.items()
        if name.startswith(PART) and name.removeprefix(PART).isdigit()
    }


class LedgerWrites(Table):
    def ledger(self, pk: str, event_id: str) -> dict[str, Any] | None:
        response = self.table.get_item(
            Key={"pk": pk, "sk": ledger_sk(event_id)}, ConsistentRead=True
        )
        return response.get("Item")

    def finish_event(self, pk: str, event_id: str, status: str, **details: Any) -> bool:
        """Record the end of an event's turn (sent, parked, opted out, skipped). The reply text
        copy (older versions) is dropped from the ledger; a forgotten person's ledger is never
        recreated. False if the event has no ledger entry (the person was forgotten)."""
        names = {"#s": "status"}
        values: dict[str, Any] = {":status": status, ":now": iso(datetime.now(UTC))}
        sets = ["#s = :status", "finished_at = :now"]
        for index, (name, value) in enumerate(details.items()):
            sets.append(f"{name} = :d{index}")
            values[f":d{index}"] = value
        return self._update_if(
            Key={"pk": pk, "sk": ledger_sk(event_id)},
            UpdateExpression="SET " + ", ".join(sets) + " REMOVE reply",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames=names,
            ExpressionAttributeValues=values,
        )

    def record_part(self, pk: str, event_id: str, part: int, message_id: str) -> bool:
        """Record that part `part` of an event's reply reached the provider (its message id), so
        a redelivery does not send it again. False if the event has no ledger entry."""
        return self._update_if(
            Key={"pk": pk, "sk": ledger_sk(event_id)},
            UpdateExpression="SET #p = :id",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#p": f"{PART}{part}"},
            ExpressionAttributeValues={":id": message_id or "sent"},
        )

    def record_voice(self, pk: str, event_id: str, media_id: str) -> bool:
        """Record the provider's media id of a reply's uploaded voice note (memagent.turn.voice),
        so a redelivery after a crash sends that note, never a second one. False if the event
        has no ledger entry."""
        return self._update_if(
            Key={"pk": pk, "sk": ledger_sk(event_id)},
            UpdateExpression="SET voice_media = :id",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":id": media_id},
        )

    def _new_entry(
        self, pk: str, turn: Turn, status: str, ttl: timedelta, *, stop: bool
    ) -> dict[str, Any]:
        """The transaction action that creates a message's ledger entry; it fails if the
        entry exists (the event was seen before: a duplicate)."""
        assert turn.event_id is not None
        extra: dict[str, Any] = {"stop": True} if stop else {}
        return self._ledger_put(pk, turn.event_id, status, ttl, user_seq=turn.seq, **extra)

    def _ledger_put(
        self, pk: str, event_id: str, status: str, ttl: timedelta, **fields: Any
    ) -> dict[str, Any]:
        """The transaction action that creates an event's ledger entry (a message's, a reply's
        or an echo's, with `fields`), expiring with the ledger; it fails if the entry exists:
        the event was seen before."""
        now = datetime.now(UTC)
        entry = {
            "pk": pk,
            "sk": ledger_sk(event_id),
            "event_id": event_id,
            "status": status,
            **fields,
            "created_at": iso(now),
            "expires_at": int((now + ttl).timestamp()),
        }
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": entry,
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    def sent_by_us(self, pk: str, message_id: str) -> bool:
        """Whether a provider message id is one of the parts we sent this person (the agent's
        replies, an operator's, a follow-up): on a ledger entry still kept, as its sends
        recorded it. One Query of the person's entries (the ledger's TTL bounds them)."""
        entries = self._query(pk, Key("sk").begins_with(EVT))
        return any(message_id in sent_parts(entry).values() for entry in entries)

    def record_tool(self, pk: str, event_id: str, name: str, value: Any) -> bool:
        """Record a tool round's items or a call's result on the event's entry (tool_<r>,
        tool_<r>_<i>: memagent/turn/tool_loop.py), before the turn's next step, so a redelivery
        replays it instead of asking the model or calling the tool again."""
        return self._update_if(
            Key={"pk": pk, "sk": ledger_sk(event_id)},
            UpdateExpression="SET #t = :v",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeNames={"#t": name},
            ExpressionAttributeValues={":v": value},
        )

    def _settle(self, pk: str, event_id: str, ttl: timedelta, **values: Any) -> dict[str, Any]:
        """The transaction action that records how an awaiting message ended (answered by a
        burst's reply, or dropped by a STOP). Unconditional: the state's last_seq guard in the
        same transaction already makes the writer unique. An entry the ledger's TTL removed
        meanwhile comes back only as a short-lived stub that expires again."""
        names = {f"#a{i}": name for i, name in enumerate(values)}
        sets = [f"#a{i} = :a{i}" for i in range(len(values))]
        sets.append("expires_at = if_not_exists(expires_at, :expires)")
        attribute_values = {f":a{i}": value for i, value in enumerate(values.values())}
        attribute_values[":expires"] = int((datetime.now(UTC) + ttl).timestamp())
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": ledger_sk(event_id)},
                "UpdateExpression": "SET " + ", ".join(sets),
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": attribute_values,
            }
        }
