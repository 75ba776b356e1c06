"""The operator's seat: a hand on one person's memory, and on their chat when a human takes it.

Used by the admin API (functions/admin/app.py), and so by scripts/people.py and the console.
In parts: reading (here: the conversation, its summary and the facts, with their ids and dates;
who waits for a human), memory by hand (memagent/operator/edits.py: a fact added, corrected or
deleted, the summary replaced), a human taking the chat (memagent/operator/handoff.py: take
over, reply exactly once per idempotency key, hand back); memagent/operator/seat.py holds what
they share (the person a request is about, the checks on what an operator types), and
memagent/store/operator.py and memagent/store/handoff.py their writes.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

from memagent.aws import schedule_name
from memagent.errors import InvalidEdit, UnknownPerson
from memagent.lifecycle import FollowUpRefused, Target, ask
from memagent.memory import Memory, agent_key, person_key, person_zone, shards
from memagent.operator.edits import MemoryEdits
from memagent.operator.handoff import SERVICE_WINDOW, ChatHandoff, handoff_view
from memagent.store import COUNTERS, FOLLOW_UP_FOR_HUMAN, follow_up_view, handoff_of, iso

RECENT_LIMIT = 50  # the console's recent conversations: the newest fifty
MAX_OUTCOME_DAYS = 366  # GET /outcomes: a year of days at most (one Query, a few KB)


def _day(value: str, name: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise InvalidEdit(f"{name} must be a date, YYYY-MM-DD") from None


class Operator(MemoryEdits, ChatHandoff):
    """What an operator can do to one person's memory and chat. Here: reading; memory by hand
    and the handoff are in memagent/operator/edits.py and memagent/operator/handoff.py."""

    def conversation(self, who: str) -> dict[str, Any]:
        pk, memory = self.person(who)
        return self._view(pk, memory)

    def _view(self, pk: str, memory: Memory) -> dict[str, Any]:
        state, summary = memory.state, memory.summary
        now = datetime.now(UTC)
        return {
            "person": pk,
            "name": state.profile_name,
            "handoff": handoff_view(state.handoff, self.timeout, now),
            "opted_out": state.opted_out,
            "last_inbound_at": iso(state.last_inbound_at),
            "reply_window": self._window(state.last_inbound_at, now),
            "summary": (
                {"text": summary.text, "at": iso(summary.at), "covers_up_to": summary.marker}
                if summary
                else None
            ),
            "facts": self.store.facts(pk),
            "messages": [
                {
                    "seq": turn.seq,
                    "by": "person" if turn.role == "user" else (turn.author or "agent"),
                    "text": turn.text,
                    "at": iso(turn.at),
                }
                for turn in memory.turns
            ],
        }

    def _window(self, last_inbound_at: datetime | None, now: datetime) -> dict[str, Any] | None:
        """Meta's customer-service window: free text only until 24 hours after the person last
        wrote, a template after (the reply route refuses free text then). None: no window."""
        if not self.meta:
            return None
        closes = last_inbound_at + SERVICE_WINDOW if last_inbound_at else None
        return {"open": closes is not None and now < closes, "closes_at": iso(closes)}

    def facts(self, who: str) -> dict[str, Any]:
        pk, _memory = self.person(who)
        return {"person": pk, "facts": self.store.facts(pk)}

    def follow_ups(self, who: str) -> dict[str, Any]:
        """The person's pending follow-ups, soonest first (docs/follow-ups.md)."""
        pk, _memory = self.person(who)
        return {"person": pk, "follow_ups": [follow_up_view(i) for i in self.store.follow_ups(pk)]}

    def schedule_follow_up(self, who: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        """An operator asks for a follow-up as the model would: `{"when": "YYYY-MM-DDTHH:MM"
        (the person's clock), "about": ...}` under an Idempotency-Key (a retry schedules
        nothing new). At its time the agent writes it, seeing the memory as it is then."""
        if self.schedules is None or not self.schedules.role_arn:
            raise InvalidEdit("follow-ups are off on this stack (FollowUps=false)")
        if not key:
            raise InvalidEdit("an Idempotency-Key header is required (the same for every retry)")
        pk, memory = self.person(who)
        state, agent = memory.state, self.settings.agent_id
        if state.opted_out:
            raise InvalidEdit("the person opted out: nothing may be sent to them")
        number = self.store.current_number(agent_key(agent), state.last_number)
        if not number:
            raise InvalidEdit("the person has not written yet: no business number to write from")
        target = Target(
            address=who,
            number=number,
            zone=person_zone(who, self.settings.time_zone),
            # the person's FIFO group: their phone's where we know it (the webhook groups Meta's
            # messages by the phone), whichever identifier the operator named
            group=state.phone_key or person_key(agent, who),
        )
        name = schedule_name(f"operator:{pk}:{key}")
        try:
            said = ask(
                self.store,
                self.schedules,
                pk,
                name=name,
                when=body.get("when"),
                about=body.get("about"),
                target=target,
                max_pending=getattr(self.settings, "follow_up_max_pending", 3),
                held=FOLLOW_UP_FOR_HUMAN,
            )
        except FollowUpRefused as error:
            raise InvalidEdit(str(error)) from None
        return {"person": pk, "id": name, "scheduled": said}

    def cancel_follow_up(self, who: str, name: str) -> dict[str, Any]:
        """Cancel one: its schedule deleted, and dropped from memory (so a schedule whose delete
        was lost still sends nothing: the turn checks it is pending at its time)."""
        pk, _memory = self.person(who)
        if self.store.follow_up(pk, name) is None:
            raise UnknownPerson("no such follow-up (sent, cancelled, or never asked for)")
        if self.schedules is not None:
            self.schedules.cancel(name)
        self.store.drop_follow_up(pk, name)
        return {"person": pk, "cancelled": name}

    def recent(self, limit: int = RECENT_LIMIT) -> dict[str, Any]:
        """Who wrote most recently, newest first (RecentIndex): where to open each chat and
        the hour they last wrote (UTC). Who waits for a human is `waiting`'s to say."""
        if not self.settings.recent_conversations:
            raise UnknownPerson("no recent conversations: they need OperatorConsole=true")
        items = self.store.recent(shards(self.settings.agent_id), limit)
        return {
            "conversations": [
                {"person": i["pk"], "address": i.get("recent_address"), "hour": i["recent_at"]}
                for i in items
            ]
        }

    def outcomes(self, first: str | None, last: str | None) -> dict[str, Any]:
        """The outcomes of the conversations opened from day `first` to `last` (UTC dates,
        both included; by default the last 7 days up to today): how many, resolved by the agent
        (neither handed to a human nor followed by the person's return within 24 hours), handed
        off, returned, the CSAT answers and the tokens spent (memagent.store.outcomes)."""
        end = _day(last, "to") if last else datetime.now(UTC).date()
        start = _day(first, "from") if first else end - timedelta(days=6)
        if start > end or (end - start).days >= MAX_OUTCOME_DAYS:
            raise InvalidEdit(f"from must not be after to, and at most {MAX_OUTCOME_DAYS} days")
        rows = self.store.outcomes(
            agent_key(self.settings.agent_id), start.isoformat(), end.isoformat()
        )
        counts = [{name: int(row.get(name, 0)) for name in COUNTERS} for row in rows]
        days = [
            {"day": str(row["sk"]).removeprefix("OUTCOMES#"), **each}
            for row, each in zip(rows, counts, strict=True)
        ]
        total = {name: sum(each[name] for each in counts) for name in COUNTERS}
        opened, answers = total["conversations"], total["csat_answers"]
        resolved = max(0, opened - total["handed_off"] - total["returned"])

        def share(part: int, whole: int) -> float | None:
            return round(part / whole, 4) if whole else None

        return {
            "from": start.isoformat(),
            "to": end.isoformat(),
            "conversations": opened,
            "resolved": resolved,
            "handed_off": total["handed_off"],
            "returned": total["returned"],
            "containment": share(resolved, opened),
            "handoff_rate": share(total["handed_off"], opened),
            "csat": {"answers": answers, "average": share(total["csat_total"], answers)},
            "tokens": total["tokens"],
            "tokens_per_conversation": share(total["tokens"], opened),
            "days": days,
        }

    def waiting(self) -> dict[str, Any]:
        """Who is waiting for a human, oldest handoff first (timed-out handoffs left out)."""
        now = datetime.now(UTC)
        people = []
        for item in self.store.handoffs(self.settings.agent_id):
            view = handoff_view(handoff_of(item), self.timeout, now)
            if view["handed_off"]:  # the address: to open and answer the chat
                people.append(
                    {"person": item["pk"], "address": item.get("handoff_address"), **view}
                )
        return {"handoffs": people}
