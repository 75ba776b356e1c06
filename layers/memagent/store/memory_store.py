"""DynamoDB: this module and its parts (store_*.py) alone touch the memory table.

One partition per person (`pk` = memagent.memory.person.person_key); sort keys:

    ALIAS#<key>       another identifier's key that reaches this person (its STATE holds
                      `alias_of`, or `moved_to` when that key holds another person's memory;
                      `merged`: the memory there is this person's too)
    EVT#<digest>      the dedupe ledger: one item per whasp event, with the turn's progress
                      (stored -> sent, or opted_out / parked / skipped; `replied`, with the
                      reply's text, in entries an older version wrote) and a TTL; a message
                      answered by a later one's reply (a burst) ends `answered`, naming the
                      reply: answered_by, reply_seq
    FACT#<key>        one durable fact (text, `at` learned, `confirmed` last found still true);
                      the key is derived from its normalised text, so facts are unique per
                      person by construction
    MSG#<seq:012d>    one turn (user or assistant); seq is strictly increasing per person.
                      Storing a message reserves the next seq for its reply
    STATE             counters and flags, the summary's marker, the erasure mark: small, since
                      every turn writes it
    SUMMARY           the rolling summary (text, marker, time), written only by compaction

A turn reads everything it needs with one strongly consistent Query on `sk >= "FACT#"` (facts,
turns, state, summary: the ledger sorts before it and is not read). Every write that could race is
conditional, so a lost race raises ConcurrentUpdate and the caller retries from a fresh read.

Write units for a message answered on its own (items under 1 KB; a transaction bills each item
twice): the message, its ledger entry and the state in one transaction (6), the reply alone in
its reserved slot (1), the ledger's `sent` (1). The summary off the state item keeps that item
small; the reserved slot makes the reply's put, conditional on the slot being empty, enough to
store one reply per message. The state's `awaiting` list is then cleared lazily: a message
counts as awaiting only while no reply follows it (load).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from boto3.dynamodb.conditions import Key

from memagent.memory import (
    Choices,
    Epoch,
    Fact,
    Handoff,
    Memory,
    PersonState,
    Summary,
    Turn,
    classed,
)
from memagent.store.compaction import CompactionWrites
from memagent.store.erasure import ErasureWrites
from memagent.store.follow_ups import FollowUpWrites
from memagent.store.ledger import (  # noqa: F401 (ledger_sk: an event's key, re-exported)
    LedgerWrites,
    ledger_sk,
)
from memagent.store.outcomes import OutcomeWrites
from memagent.store.person import PersonWrites
from memagent.store.table import FACT, MSG, STATE, SUMMARY, TURN_READ_FROM, from_iso
from memagent.store.turn import TurnWrites


def state_reader(state_type: type = PersonState) -> Callable[[dict[str, Any] | None], Any]:
    """The parser of a state item, derived from the state's fields (memagent.memory.types.classed):
    each attribute read by its field's type, missing ones at the field's default."""
    hints = typing.get_type_hints(state_type)
    readers: dict[str, Callable[[dict[str, Any]], Any]] = {}
    for each, _kind in classed(state_type):
        read = _READERS.get(hints[each.name])
        if read is None:
            raise TypeError(f"{state_type.__name__}.{each.name}: no reader for its type")
        readers[each.name] = functools.partial(read, each.name, each.default)

    def parse(item: dict[str, Any] | None) -> Any:
        if not item:
            return state_type()
        return state_type(**{name: read(item) for name, read in readers.items()})

    return parse


def _number(name: str, default: Any, item: dict[str, Any]) -> int:
    return int(item.get(name, default))


def _optional_number(name: str, default: Any, item: dict[str, Any]) -> int | None:
    value = item.get(name)
    return default if value is None else int(value)


_READERS: dict[Any, Callable[[str, Any, dict[str, Any]], Any]] = {
    int: _number,
    int | None: _optional_number,
    bool: lambda name, default, item: bool(item.get(name, default)),
    str | None: lambda name, default, item: item.get(name, default),
    datetime | None: lambda name, default, item: from_iso(item.get(name)),
    # a TTL attribute: epoch seconds, a Number
    Epoch | None: lambda name, default, item: _epoch(item.get(name)),
    tuple[str, ...]: lambda name, default, item: tuple(item.get(name) or ()),
    # the handoff_* attributes (memagent.store.table.HANDOFF_ATTRIBUTES)
    Handoff | None: lambda name, default, item: handoff_of(item),
}


def _epoch(value: Any) -> datetime | None:
    """A TTL attribute (epoch seconds, a Number) as a time."""
    return datetime.fromtimestamp(int(value), UTC) if value is not None else None


def handoff_of(item: dict[str, Any]) -> Handoff | None:
    """The handoff a state item (or its HandoffIndex projection) records, if any."""
    since = from_iso(item.get("handoff_since"))
    if since is None:
        return None
    return Handoff(
        since=since,
        reason=str(item.get("handoff_reason") or "operator"),
        replied_at=from_iso(item.get("handoff_replied_at")),
        waiting=int(item.get("handoff_waiting") or 0),
        by=item.get("handoff_by"),
    )


_state = state_reader()


def _turn(item: dict[str, Any]) -> Turn:
    return Turn(
        seq=int(item["seq"]),
        role=item["role"],
        text=item.get("text", ""),
        at=from_iso(item["at"]) or datetime.now(UTC),
        number=item.get("number"),
        event_id=item.get("event_id"),
        author=item.get("author"),
        tools=tuple(item.get("tools") or ()),
        tokens=int(item.get("tokens", 0)),
        choices=_choices(item.get("choices")),
        voice=bool(item.get("voice")),
    )


def _choices(value: Any) -> Choices | None:
    """A reply's offered options ({"options": [...], "button": ...}), if it offered any."""
    if not isinstance(value, dict) or not value.get("options"):
        return None
    return Choices(tuple(str(o) for o in value["options"]), str(value.get("button") or ""))


class MemoryStore(
    FollowUpWrites,
    TurnWrites,
    LedgerWrites,
    PersonWrites,
    ErasureWrites,
    CompactionWrites,
    OutcomeWrites,
):
    """The memory table. Here: the turn's one Query; its writes (memagent/store/turn.py), the
    ledger, a person's records and links, erasure and compaction are the other modules of
    memagent/store/ (ledger.py, person.py, erasure.py, compaction.py)."""

    def load(self, pk: str) -> Memory:
        """Everything one turn needs: one strongly consistent Query (more pages only if a
        compaction backlog grew the partition past 1 MB)."""
        items = list(self._query(pk, Key("sk").gte(TURN_READ_FROM)))
        state_item = next((i for i in items if i["sk"] == STATE), None)
        state = _state(state_item)
        # the summary's own item; a state item from an older version may still carry it
        held = next((i for i in items if i["sk"] == SUMMARY), None)
        text, at = (held.get("text"), held.get("at")) if held else (None, None)
        if not text and state_item and state_item.get("summary"):
            text, at = state_item["summary"], state_item.get("summary_at")
        summary = Summary(text=text, marker=state.marker, at=from_iso(at)) if text else None
        turns = tuple(
            _turn(i) for i in items if i["sk"].startswith(MSG) and int(i["seq"]) > state.marker
        )
        if state.awaiting:
            # a reply stored alone leaves the list as it was: what it follows is answered
            seqs = {t.event_id: t.seq for t in turns if t.role == "user" and t.event_id}
            replied = max((t.seq for t in turns if t.role == "assistant"), default=0)
            awaiting = tuple(e for e in state.awaiting if seqs.get(e, 0) > replied)
            state = dataclasses.replace(state, awaiting=awaiting)
        facts = tuple(
            sorted(
                (
                    Fact(
                        text=i["text"],
                        at=from_iso(i["at"]) or datetime.now(UTC),
                        confirmed_at=from_iso(i.get("confirmed")),
                        key=i["sk"].removeprefix(FACT),
                    )
                    for i in items
                    if i["sk"].startswith(FACT)
                ),
                key=lambda fact: fact.at,
            )
        )
        leftovers = tuple(
            int(i["seq"])
            for i in items
            if i["sk"].startswith(MSG) and int(i["seq"]) <= state.marker
        )
        return Memory(state=state, summary=summary, turns=turns, facts=facts, leftovers=leftovers)

    def reach(self, key: str) -> tuple[str, Memory, PersonState]:
        """The person an identifier's key reaches now (memagent.turn.identity), their memory, and
        the key's own state: one Query when it is the person's own key, one more when it
        points elsewhere (`alias_of`, `moved_to`)."""
        memory = self.load(key)
        own = memory.state
        target = _pointed(key, own)
        if target != key:
            return target, self.load(target), own
        return key, memory, own

    def reached_by(self, key: str) -> str:
        """The person an identifier's key reaches now, as `reach` says, from the key's state
        item alone (one GetItem): whom an address still reaches."""
        return _pointed(key, self.state(key))

    def state(self, pk: str) -> PersonState:
        """One key's state item alone (a consistent GetItem)."""
        key = {"pk": pk, "sk": STATE}
        return _state(self.table.get_item(Key=key, ConsistentRead=True).get("Item"))


def _pointed(key: str, own: PersonState) -> str:
    """The person a key's own state sends it to: elsewhere (`alias_of`, `moved_to`), or itself."""
    target = own.alias_of or own.moved_to
    return target if target and target != key else key
