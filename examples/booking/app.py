"""An example tool function: a small appointment calendar the agent can read and book in.

Deployed with ExampleBookingTool=true (template.yaml: BookingToolFunction, BookingTable) and
declared for the model in functions/consumer/tools.example.json. The consumer invokes it
synchronously with {"tool": name, "arguments": {...}, "idempotency_key": key, "caller": {...}}
(docs/tools.md).

What makes a repeat safe is the table, not the function's memory: a booking is one DynamoDB
transaction of two conditional puts, the slot (only if free) and the idempotency key with the
answer it got (only if new). Two invocations with one key, in two execution environments at the
same moment (our queue's retry after a lost answer, say), make one booking, and the second gets
the first one's answer. The booking keeps who made it by the caller key the consumer gives
(`"caller": "key"` in the declaration), never by a name the model wrote.

    pk DAY#<day>   sk <time>   who, by       a booked slot
    pk KEY#<key>   sk -        answer        the first answer to an idempotency key
"""

from __future__ import annotations

import json
import os
from typing import Any

SLOTS = ("09:00", "10:00", "11:00", "14:00", "15:00", "16:00")
_tables: dict[str, Any] = {}


def _table() -> Any:
    """BOOKING_TABLE, one boto3 resource per name (created on first use, then reused)."""
    name = os.environ["BOOKING_TABLE"]
    if name not in _tables:
        import boto3

        _tables[name] = boto3.resource("dynamodb").Table(name)
    return _tables[name]


def list_free_slots(day: str) -> dict[str, Any]:
    from boto3.dynamodb.conditions import Key

    items = _table().query(KeyConditionExpression=Key("pk").eq(f"DAY#{day}"), ConsistentRead=True)
    taken = {item["sk"] for item in items["Items"]}
    free = [slot for slot in SLOTS if slot not in taken]
    return {"output": {"day": day, "free": free}, "summary": f"{len(free)} free slots on {day}"}


def book_appointment(day: str, time: str, name: str, key: str = "", by: str = "") -> dict[str, Any]:
    if time not in SLOTS:
        return {"error": f"{time} is not a slot; slots are {', '.join(SLOTS)}"}
    answer = {"output": {"booked": f"{day} {time}", "for": name}, "summary": f"booked {day} {time}"}
    table = _table()
    client = table.meta.client
    slot = {"pk": f"DAY#{day}", "sk": time, "who": name, "by": by}
    writes = [_put(table.name, slot)]
    if key:
        first = {"pk": f"KEY#{key}", "sk": "-", "answer": json.dumps(answer)}
        writes.append(_put(table.name, first))
    try:
        client.transact_write_items(TransactItems=writes)
    except client.exceptions.TransactionCanceledException as error:
        first = _first_answer(key)
        if first is not None:  # this key booked already: the same answer, nothing more
            return first
        reasons = [r.get("Code") for r in error.response.get("CancellationReasons", [])]
        if reasons and reasons[0] == "ConditionalCheckFailed":
            return {"error": f"{day} {time} is already taken"}
        raise  # a conflict with a write still in flight: fail, and the caller retries the key
    return answer


def _put(table: str, item: dict[str, Any]) -> dict[str, Any]:
    return {
        "Put": {
            "TableName": table,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def _first_answer(key: str) -> dict[str, Any] | None:
    if not key:
        return None
    item = _table().get_item(Key={"pk": f"KEY#{key}", "sk": "-"}, ConsistentRead=True).get("Item")
    return json.loads(item["answer"]) if item else None


def bookings() -> list[dict[str, Any]]:
    """Every booked slot (the tests' and the benchmark's view of the calendar)."""
    items = _table().scan(ConsistentRead=True)["Items"]
    return [item for item in items if str(item["pk"]).startswith("DAY#")]


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    tool = str(event.get("tool"))
    arguments = event.get("arguments") or {}
    if tool == "list_free_slots":
        return list_free_slots(str(arguments["day"]))
    if tool == "book_appointment":
        key = str(event.get("idempotency_key") or "")
        by = str((event.get("caller") or {}).get("key") or "")
        day, time, name = (str(arguments[a]) for a in ("day", "time", "name"))
        return book_appointment(day, time, name, key=key, by=by)
    return {"error": f"unknown tool {tool!r}"}
