"""What one person may cost a day: model turns and tokens, counted on their state item.

The counters ride on writes a turn makes anyway: a reply's tokens are stored on its turn item
(the put that stores the reply), and the next message's state update (the transaction that
stores it) adds the replies since the last count to the day's totals. So counting costs no
request of its own, only a few bytes on the state item (docs/benchmarks.md). Every model call
made for the person counts: a photo's description and a voice note's transcription in the
write that stores the message they became; a fold's tokens, which the compactor adds to the
state's `fold_tokens` as it commits, at the next message, like a reply's. Past a limit the
person's messages are still remembered, in order; a photo or voice note is then not described
or transcribed (`converts`: no model call); the first message gets one short notice (no model
call), the rest of the day nothing, and tomorrow's message is answered with all of them in
context. The day is the UTC date of what the person wrote (their message's own time). The
counters are not content: "forget me" keeps them (memagent.store.erasure).
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterable

    from memagent.memory.types import PersonState, Turn


class StackLimit(Protocol):
    """What the stack's budget reads of a function's settings (memagent.model.ModelSettings)."""

    # properties: the settings are frozen dataclasses, whose fields mypy reads as read-only
    @property
    def table_name(self) -> str: ...
    @property
    def agent_id(self) -> str: ...
    @property
    def stack_daily_tokens_hard_limit(self) -> int: ...


class PersonLimits(Protocol):
    """What a person's budget reads of the consumer's settings (memagent.turn.ConsumerSettings)."""

    # properties: as StackLimit's
    @property
    def person_daily_turns(self) -> int: ...
    @property
    def person_daily_tokens(self) -> int: ...


def day_of(at: datetime) -> str:
    return at.astimezone(UTC).date().isoformat()


def counted(state: PersonState, turns: Iterable[Turn], day: str) -> dict[str, Any]:
    """The state's day counters with the model replies stored since the last count added.
    Those answered the person's previous messages: on a new day they were the last day's, and
    the counters start again from nothing."""
    fresh = [t for t in turns if t.role == "assistant" and t.seq > state.counted_seq]
    same_day = state.budget_day == day
    today = [t for t in fresh if t.tokens] if same_day else []
    # folds since the last count: a high-water mark, so a fold committing between this read
    # and this write is counted next time, never lost
    folds = state.fold_tokens - state.counted_fold_tokens if same_day else 0
    tokens = sum(t.tokens for t in today) + max(0, folds)
    return {
        "budget_day": day,
        "day_turns": (state.day_turns if same_day else 0) + len(today),
        "day_tokens": (state.day_tokens if same_day else 0) + tokens,
        # a voice reply's synthesized characters (Polly and OpenAI bill per character)
        "day_voice_chars": (state.day_voice_chars if same_day else 0)
        + sum(len(t.text) for t in fresh if t.voice and same_day),
        "counted_seq": max([state.counted_seq, *(t.seq for t in fresh)]),
        "counted_fold_tokens": state.fold_tokens,
    }


class StackBudget:
    """StackDailyTokensHardLimit: the stack's model tokens today, on one counter item beside
    the people's (pk STACK#<agent>, sk DAY#<date>, expiring after 3 days). Only with a limit
    set: one UpdateItem (ADD) per model reply, and a GetItem at most once a minute per
    environment; an environment's own replies count at once."""

    def __init__(self, table: Any, agent: str, limit: int, *, refresh_seconds: float = 60.0):
        self.table, self.limit, self.refresh = table, limit, refresh_seconds
        self.pk = f"STACK#{agent}"
        # no day read yet: reached() reads the day before these are used (no mutate: any value
        # here is read over)
        self._day, self._tokens, self._read_at = "", 0, float("-inf")  # pragma: no mutate

    def reached(self) -> bool:
        if not self.limit:
            return False
        day = day_of(datetime.now(UTC))  # pragma: no mutate (naive now is read as local: same)
        if day != self._day or time.monotonic() - self._read_at > self.refresh:
            item = self.table.get_item(Key={"pk": self.pk, "sk": f"DAY#{day}"}).get("Item")
            self._day, self._tokens = day, int((item or {}).get("tokens", 0))
            self._read_at = time.monotonic()
        return self._tokens >= self.limit

    def add(self, tokens: int) -> None:
        if not self.limit or not tokens:
            return
        day = day_of(datetime.now(UTC))  # pragma: no mutate (naive now is read as local: same)
        self.table.update_item(
            Key={"pk": self.pk, "sk": f"DAY#{day}"},
            UpdateExpression="ADD tokens :n SET expires_at = if_not_exists(expires_at, :ttl)",
            ExpressionAttributeValues={":n": tokens, ":ttl": int(time.time()) + 3 * 86_400},
        )
        if day == self._day:
            self._tokens += tokens


_stacks: dict[tuple[str, str], StackBudget] = {}


def stack_budget(store: Any, settings: StackLimit) -> StackBudget:
    """The environment's one StackBudget for this table and agent (its cache lives on)."""
    key = (settings.table_name, settings.agent_id)
    if key not in _stacks or _stacks[key].table is not store.table:
        _stacks[key] = StackBudget(
            store.table, settings.agent_id, settings.stack_daily_tokens_hard_limit
        )
    return _stacks[key]


def exhausted(state: PersonState, settings: PersonLimits) -> bool:
    """Whether today's model turns or tokens have reached a limit (0: none)."""
    turns, tokens = settings.person_daily_turns, settings.person_daily_tokens
    return bool(turns and state.day_turns >= turns) or bool(tokens and state.day_tokens >= tokens)


def converts(
    state: PersonState, turns: Iterable[Turn], day: str, settings: PersonLimits, stack: Any
) -> bool:
    """Whether a photo or voice note written on `day` may still be described or transcribed:
    neither the person's day, counted as the message's own write will count it, nor the
    stack's has reached its limit."""
    counters = counted(state, turns, day)
    today = dataclasses.replace(state, **counters)
    return not exhausted(today, settings) and not stack.reached()
