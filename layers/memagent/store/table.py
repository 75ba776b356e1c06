"""The memory table's keys, the shape of a turn's item, and the conditional writes every part
of the store is built on (memagent/store/memory_store.py has the key schema)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from memagent.errors import ConcurrentUpdate
from memagent.memory import Turn

STATE = "STATE"
SUMMARY = "SUMMARY"
MSG = "MSG#"
FACT = "FACT#"
EVT = "EVT#"
ALIAS = "ALIAS#"
TURN_READ_FROM = FACT  # FACT# < MSG# < STATE < SUMMARY: one range holds what a turn needs

# a human has the chat (memagent.operator.reading): on the state item; HandoffIndex's keys are the
# first two. `handoff_address` is where the operator's replies go (the person's phone or BSUID):
# held only while the handoff lasts (a hand-back, a timeout or an erasure removes it)
HANDOFF_ATTRIBUTES = (
    "handoff_agent",
    "handoff_since",
    "handoff_reason",
    "handoff_replied_at",
    "handoff_waiting",
    "handoff_address",
    "handoff_by",
)
TRANSACTION_LIMIT = 100  # DynamoDB's cap on actions per TransactWriteItems


def msg_sk(seq: int) -> str:
    return f"{MSG}{seq:012d}"


def iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def from_iso(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _held(write: Any, request: dict[str, Any]) -> bool:
    """`write(**request)`; False, and nothing written, when its condition does not hold."""
    try:
        write(**request)
    except ClientError as error:
        if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
            raise
        return False
    return True


def _cancel_codes(error: ClientError) -> list[str]:
    return [reason.get("Code", "None") for reason in error.response.get("CancellationReasons", [])]


class Table:
    """The memory table, read and written through boto3's resource (which speaks Python types)."""

    def __init__(
        self, table_name: str, *, resource: Any | None = None, retention: timedelta | None = None
    ):
        """`retention`: a person who writes nothing for this long is forgotten (DynamoDB's TTL
        deletes their state item, whose stream record erases the rest: memagent.lifecycle.rights
        .expire); None keeps them until erased."""
        self.retention = retention
        self._dynamodb = resource or boto3.resource("dynamodb")
        self.table = self._dynamodb.Table(table_name)
        self.table_name = table_name
        self._client = self._dynamodb.meta.client  # speaks Python types, like the Table API

    def _query(self, pk: str, sk_condition: Any, projection: str | None = None) -> Iterator[dict]:
        condition = Key("pk").eq(pk)
        if sk_condition is not None:
            condition = condition & sk_condition
        kwargs: dict[str, Any] = {"KeyConditionExpression": condition, "ConsistentRead": True}
        if projection:
            kwargs["ProjectionExpression"] = projection
        while True:
            response = self.table.query(**kwargs)
            yield from response.get("Items", [])
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _set_state(
        self, pk: str, values: dict[str, Any], expression: str, condition: str | None = None
    ) -> dict[str, Any]:
        """A transaction's update of a person's state item (`condition`: its guard, if any)."""
        update = {
            "TableName": self.table_name,
            "Key": {"pk": pk, "sk": STATE},
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values,
        }
        if condition is not None:
            update["ConditionExpression"] = condition
        return {"Update": update}

    def _update_if(self, **update: Any) -> bool:
        """update_item guarded by its ConditionExpression: False, and nothing written, when the
        condition does not hold (the usual outcome of a lost race or a repeat, not an error)."""
        return _held(self.table.update_item, update)

    def _put_if(self, **put: Any) -> bool:
        """put_item guarded by its ConditionExpression, as `_update_if`."""
        return _held(self.table.put_item, put)

    def _delete_if(self, **delete: Any) -> bool:
        """delete_item guarded by its ConditionExpression (if any), as `_update_if`."""
        return _held(self.table.delete_item, delete)

    def _transact(self, actions: list[dict[str, Any]]) -> list[str] | None:
        """Write `actions` in one transaction. None when it committed; when DynamoDB cancelled
        it (a condition failed, or another transaction touched the same items), the reason of
        each action, in order ("None" for the actions that were fine)."""
        try:
            self._client.transact_write_items(TransactItems=actions)
        except ClientError as error:
            if error.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            return _cancel_codes(error)
        return None

    def _write_once(self, actions: list[dict[str, Any]], doing: str) -> bool:
        """Write `actions` in one transaction: True when it committed, False when the first
        action's condition failed (what it guards was there already: a repeat, mostly), and
        ConcurrentUpdate when another failed or a concurrent transaction won (a write since
        the caller's read: it reads again and retries)."""
        reasons = self._transact(actions)
        if reasons is None:
            return True
        if reasons[:1] == ["ConditionalCheckFailed"]:
            return False
        raise ConcurrentUpdate(f"memory changed while {doing}; retry")

    def _new_turn(self, pk: str, turn: Turn) -> dict[str, Any]:
        """The transaction action that stores a turn; its seq must be new (one writer per
        person, guarded again by the state's last_seq condition in the same transaction)."""
        return {
            "Put": {
                "TableName": self.table_name,
                "Item": self._turn_item(pk, turn),
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        }

    @staticmethod
    def _turn_item(pk: str, turn: Turn) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": pk,
            "sk": msg_sk(turn.seq),
            "seq": turn.seq,
            "role": turn.role,
            "text": turn.text,
            "at": iso(turn.at),
        }
        if turn.number:
            item["number"] = turn.number
        if turn.event_id:
            item["event_id"] = turn.event_id
        if turn.author:
            item["author"] = turn.author
        if turn.tools:
            item["tools"] = list(turn.tools)
        if turn.tokens:
            item["tokens"] = turn.tokens
        if turn.voice:
            item["voice"] = True
        if turn.choices:
            item["choices"] = {"options": list(turn.choices.options)}
            if turn.choices.button:
                item["choices"]["button"] = turn.choices.button
        return item
