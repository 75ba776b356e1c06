"""An example tool function: a tiny appointment calendar the agent can read and book in.

Deployed with ExampleBookingTool=true (template.yaml: BookingToolFunction) and declared for the
model in functions/consumer/tools.example.json. The consumer invokes it synchronously with
{"tool": name, "arguments": {...}, "idempotency_key": key}; a repeat of a key returns the first
answer and books nothing more, which is what makes a redelivered turn safe. The calendar lives
in the function's memory, so it is per execution environment: a real tool keeps it (and the keys)
in a database.
"""

from __future__ import annotations

from typing import Any

SLOTS = ("09:00", "10:00", "11:00", "14:00", "15:00", "16:00")
booked: dict[tuple[str, str], str] = {}  # (day, time) -> who
answers: dict[str, dict[str, Any]] = {}  # idempotency key -> the first answer


def list_free_slots(day: str) -> dict[str, Any]:
    free = [slot for slot in SLOTS if (day, slot) not in booked]
    return {"output": {"day": day, "free": free}, "summary": f"{len(free)} free slots on {day}"}


def book_appointment(day: str, time: str, name: str) -> dict[str, Any]:
    if time not in SLOTS:
        return {"error": f"{time} is not a slot; slots are {', '.join(SLOTS)}"}
    if (day, time) in booked:
        return {"error": f"{day} {time} is already taken"}
    booked[(day, time)] = name
    return {"output": {"booked": f"{day} {time}", "for": name}, "summary": f"booked {day} {time}"}


TOOLS = {"list_free_slots": list_free_slots, "book_appointment": book_appointment}


def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    key = str(event.get("idempotency_key") or "")
    if key and key in answers:
        return answers[key]
    tool = TOOLS.get(str(event.get("tool")))
    if tool is None:
        return {"error": f"unknown tool {event.get('tool')!r}"}
    answer = tool(**event.get("arguments", {}))
    if key:
        answers[key] = answer
    return answer
