"""The operator's memory by hand: add, correct or delete one fact, replace the summary.

Each edit is a conditional write (memagent.store.operator), so an edit racing a compaction loses
neither: the loser is told (409) or, for a compaction, leaves its turns raw for the next fold.
The next turn reads the edited memory like any other (one Query), so an edit shows in the next
reply's context."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from memagent.errors import EditConflict, InvalidEdit, UnknownPerson
from memagent.memory import fact_key, looks_like_instruction
from memagent.operator.seat import Seat, required_text
from memagent.store import iso

MAX_SUMMARY_CHARS = 2_000
FACT_ID = re.compile(r"[0-9a-f]{1,64}\Z")


def screened(text: str, what: str) -> str:
    """An operator's fact or summary, refused if any sentence reads as an order to the agent:
    both stand in the model's instructions, as the facts and summaries a fold writes, which
    are screened the same way (memagent.memory.facts.screen_facts, screen_summary)."""
    if looks_like_instruction(text):
        raise InvalidEdit(
            f"a {what} is data about the person, not an instruction to the agent "
            "(instructions belong in the system prompt)"
        )
    return text


class MemoryEdits(Seat):
    def _fact_text(self, body: dict[str, Any]) -> str:
        limit = self.settings.max_fact_chars
        return screened(" ".join(required_text(body.get("text"), "text", limit).split()), "fact")

    def _fact_id(self, raw: str) -> str:
        if not FACT_ID.match(raw):
            raise InvalidEdit("a fact id is the hex id the facts list gives")
        return raw

    def add_fact(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        text = self._fact_text(body)
        pk, _memory = self.person(who)
        key = fact_key(text)
        if not self.store.add_fact(pk, key, text, datetime.now(UTC)):
            raise EditConflict("this fact is held already (or the person was just erased)")
        return {"person": pk, "fact": {"id": key, "text": text}}

    def correct_fact(self, who: str, fact_id: str, body: dict[str, Any]) -> dict[str, Any]:
        old, text = self._fact_id(fact_id), self._fact_text(body)
        pk, _memory = self.person(who)
        key = fact_key(text)
        reasons = self.store.correct_fact(pk, old, key, text, datetime.now(UTC))
        if reasons is not None:
            if reasons[0] == "ConditionalCheckFailed":
                raise UnknownPerson("no such fact (deleted, or folded away by a compaction)")
            raise EditConflict("the corrected text is a fact held already")
        return {"person": pk, "fact": {"id": key, "text": text}, "replaced": old}

    def delete_fact(self, who: str, fact_id: str) -> dict[str, Any]:
        key = self._fact_id(fact_id)
        pk, _memory = self.person(who)
        if not self.store.delete_fact(pk, key):
            raise UnknownPerson("no such fact (deleted already, or dropped by a compaction)")
        return {"person": pk, "deleted": key}

    def replace_summary(self, who: str, body: dict[str, Any]) -> dict[str, Any]:
        """Replace the summary. `based_on`: the summary's `at` as the operator read it (null
        when there was none); without it, the summary as it stands now."""
        text = screened(required_text(body.get("text"), "text", MAX_SUMMARY_CHARS), "summary")
        pk, memory = self.person(who)
        if "based_on" in body:
            seen = body["based_on"]
            try:
                seen_at = datetime.fromisoformat(seen) if seen is not None else None
            except (TypeError, ValueError):
                raise InvalidEdit('"based_on" must be the summary\'s "at", or null') from None
        else:
            seen_at = memory.summary.at if memory.summary else None
        at = datetime.now(UTC)
        if not self.store.replace_summary(pk, text, seen_at=seen_at, at=at):
            raise EditConflict(
                "the summary changed since it was read (a compaction folded more in): "
                "read it again and redo the edit"
            )
        return {"person": pk, "summary": {"text": text, "at": iso(at)}}
