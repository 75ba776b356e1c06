"""DynamoDB: a human takes the chat (memagent/operator/handoff.py): the handoff on the state
item, the operator's reply, the hand-back, and who is waiting.

The operator's reply takes the next seq with the state's last_seq condition, like a turn, and
is stored with a ledger entry keyed by the request's idempotency key and the person. Before its
parts go out, one request claims the entry (`stored` -> `sending`, until the claimant's deadline):
two concurrent requests with one key send once, even on Meta, which has no idempotency key.

Who is waiting for a human is read from the sparse index HandoffIndex (template.yaml): only the
state items of people handed off carry its keys (`handoff_agent`, `handoff_since`), so the list
is one Query, oldest first, and an erasure or a hand-back removes a person from it. Who wrote
recently, from RecentIndex (OperatorConsole=true), as sparse: memagent/memory/recent.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.memory import PersonState, Turn
from memagent.store.compaction import CompactionWrites
from memagent.store.ledger import ANSWERED, OPTED_OUT, SENDING, SKIPPED, STORED, ledger_sk
from memagent.store.table import HANDOFF_ATTRIBUTES, STATE, TRANSACTION_LIMIT
from memagent.store.table import iso as _iso
from memagent.store.turn import TurnWrites

HANDOFF_INDEX = "HandoffIndex"
RECENT_INDEX = "RecentIndex"  # OperatorConsole=true (memagent.memory.recent)
HANDED_OVER = "handed_to_human"  # why the agent skipped a message: a human took the chat


class HandoffWrites(TurnWrites, CompactionWrites):
    """Written like a turn (TurnWrites); a refused reply is withdrawn as a fold drops turns."""

    def take_over(
        self,
        pk: str,
        *,
        agent: str,
        reason: str,
        at: datetime,
        previous: datetime | None,
        address: str,
        last_seq: int,
        awaiting: Sequence[str] = (),
        ledger_ttl: timedelta,
        by: str | None = None,
    ) -> bool:
        """Hand the person to a human (replacing a timed-out handoff `previous`). The messages
        still `awaiting` a reply are the human's now: their ledger entries end `skipped`
        (reason `handed_to_human`) and the state's list is dropped, in the same transaction,
        so the agent never answers them, during the handoff or after it; they count as
        waiting. `by`: who took it (an operator). `last_seq`: the state's as read with
        `awaiting`; a message stored since refuses the write (it awaits a reply too: read
        again). False: the person is gone, or wrote since, or someone else started a handoff
        meanwhile."""
        condition = "last_seq = :seq AND "
        values: dict[str, Any] = {
            ":seq": last_seq,
            ":address": address,
            ":agent": agent,
            ":since": _iso(at),
            ":reason": reason,
            ":waiting": len(awaiting),
        }
        took = ", handoff_by = :by" if by else ""
        if by:
            values[":by"] = by
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
                    + took
                    + " REMOVE handoff_replied_at, awaiting"
                    + ("" if by else ", handoff_by")
                ),
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
            }
        }
        skipped = [
            self._settle(pk, e, ledger_ttl, status=SKIPPED, reason=HANDED_OVER)
            for e in awaiting[-(TRANSACTION_LIMIT - 1) :]
        ]
        return self._write_once([state, *skipped], "handing the chat over")

    def hand_back(self, pk: str, *, csat_to: str | None = None) -> bool:
        """End a handoff. False: none was in force. `csat_to`: the person is to be asked to
        rate it (memagent/turn/csat.py): the state keeps where the question goes (the
        handoff's address, else `csat_to`) and the handoff's start (the question's id), in
        the same write."""
        if csat_to is None:
            return self._update_if(
                Key={"pk": pk, "sk": STATE},
                UpdateExpression="REMOVE " + ", ".join(HANDOFF_ATTRIBUTES),
                ConditionExpression="attribute_exists(handoff_since)",
            )
        return self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression=(
                "SET csat_address = if_not_exists(handoff_address, :to), csat_for = handoff_since"
                " REMOVE " + ", ".join(HANDOFF_ATTRIBUTES)
            ),
            ConditionExpression="attribute_exists(handoff_since)",
            ExpressionAttributeValues={":to": csat_to},
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

    def recent(self, shards: Sequence[str], limit: int) -> list[dict[str, Any]]:
        """The state items of the people who wrote most recently (RecentIndex, OperatorConsole
        =true): the newest `limit` of each shard, merged, newest first (one Query a shard)."""
        found: list[dict[str, Any]] = []
        for shard in shards:
            found += self.table.query(
                IndexName=RECENT_INDEX,
                KeyConditionExpression=Key("recent_shard").eq(shard),
                ScanIndexForward=False,
                Limit=limit,
            ).get("Items", [])
        return sorted(found, key=lambda item: item["recent_at"], reverse=True)[:limit]

    # ------------------------------------------------------------------ the operator's reply

    def remember_operator_reply(
        self,
        pk: str,
        *,
        previous: PersonState,
        turn: Turn,
        key: str,
        compact: bool,
        ledger_ttl: timedelta,
        template: dict[str, Any] | None = None,
    ) -> bool:
        """Store the operator's reply with its ledger entry (keyed by the request's idempotency
        key) and the handoff's reply time, in one transaction. False: the key was seen before.
        `template`: the approved template (name, language, parameters) the reply is sent as,
        kept on the entry so that a retry sends the same.
        The person's messages still awaiting a reply are answered by it (`answered`, naming
        it): the agent never answers what the human did. Raises ConcurrentUpdate if a turn
        took the seq first (the caller reads again)."""
        kept = {"template": _listed(template)} if template else {}
        replied = {"handoff_replied_at": _iso(turn.at), "handoff_waiting": 0}
        actions = [
            self._ledger_put(pk, key, STORED, ledger_ttl, reply_seq=turn.seq, **kept),
            *self._turn_with_state(
                pk, previous, turn, compact, extra_set=replied, remove=("awaiting",)
            ),
        ]
        actions += [
            self._settle(pk, e, ledger_ttl, status=ANSWERED, answered_by=key, reply_seq=turn.seq)
            for e in previous.awaiting[-90:]
        ]
        return self._write_once(actions, "storing the operator's reply")

    def claim_send(self, pk: str, key: str, *, until: datetime, now: datetime) -> bool:
        """Claim the sending of a stored reply until `until` (the claimant's deadline): only
        the claimant sends. A claim whose deadline passed (its request died after claiming)
        is taken over, by one request only. False: another request holds it, or the reply
        was sent or withdrawn meanwhile (read the entry again). Powertools' idempotency
        utility does the same with its INPROGRESS records (`in_progress_expiry_timestamp`,
        the invocation's remaining time)."""
        return self._send_status(
            pk,
            key,
            "SET #s = :sending, sending_until = :until",
            "#s = :stored OR (#s = :sending AND sending_until < :now)",
            {":until": _millis(until), ":now": _millis(now)},
        )

    def release_send(self, pk: str, key: str, *, until: datetime) -> bool:
        """Give a claim back (`sending` -> `stored`): its request ended without sending every
        part, and a retry may resume at once. Only the claim made with `until` is released."""
        return self._send_status(
            pk,
            key,
            "SET #s = :stored REMOVE sending_until",
            "#s = :sending AND sending_until = :until",
            {":until": _millis(until)},
        )

    def _send_status(
        self, pk: str, key: str, update: str, condition: str, values: dict[str, Any]
    ) -> bool:
        """Move a reply's ledger entry between `stored` and `sending` (conditionally)."""
        return self._update_if(
            Key={"pk": pk, "sk": ledger_sk(key)},
            UpdateExpression=update,
            ConditionExpression=condition,
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":sending": SENDING, ":stored": STORED, **values},
        )

    def withdraw_reply(self, pk: str, key: str, seq: int, **details: Any) -> None:
        """A reply the provider refused before any part went out: out of memory, and its
        ledger entry says why (a retry of the same request answers the same refusal)."""
        self.delete_turns(pk, [seq])
        self.finish_event(
            pk, key, OPTED_OUT if details.pop("opted_out", False) else "refused", **details
        )


def _listed(template: dict[str, Any]) -> dict[str, Any]:
    return {**template, "parameters": list(template["parameters"])}


def claim_holds(entry: dict[str, Any], now: datetime) -> bool:
    """Whether a `sending` entry's claim still holds at `now` (its request may be sending)."""
    return int(entry.get("sending_until", 0)) >= _millis(now)


def _millis(at: datetime) -> int:
    return int(at.timestamp() * 1000)
