"""DynamoDB: this module and its parts (store_*.py) alone touch the memory table.

One partition per person (`pk` = memagent.person.person_key); sort keys:

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
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from memagent.errors import ConcurrentUpdate
from memagent.memory import Fact, Handoff, Memory, PersonState, Summary, Turn
from memagent.store_compaction import CompactionWrites
from memagent.store_erasure import ErasureWrites
from memagent.store_ledger import (  # noqa: F401 (ledger_sk: an event's key, re-exported)
    ANSWERED,
    FOR_HUMAN,
    OPTED_OUT,
    STORED,
    LedgerWrites,
    ledger_sk,
)
from memagent.store_person import PersonWrites
from memagent.store_table import (
    FACT,
    HANDOFF_ATTRIBUTES,
    MSG,
    STATE,
    SUMMARY,
    TRANSACTION_LIMIT,
    TURN_READ_FROM,
    from_iso,
    iso,
)

DEFAULT_LEDGER_TTL = timedelta(days=30)


def _state(item: dict[str, Any] | None) -> PersonState:
    if not item:
        return PersonState()
    return PersonState(
        last_seq=int(item.get("last_seq", 0)),
        marker=int(item.get("marker", 0)),
        compaction_due=bool(item.get("compaction_due", False)),
        last_number=item.get("last_number"),
        last_inbound_at=from_iso(item.get("last_inbound_at")),
        opted_out=bool(item.get("opted_out", False)),
        opted_out_at=from_iso(item.get("opted_out_at")),
        erased_at=from_iso(item.get("erased_at")),
        forget_pending=bool(item.get("forget_pending", False)),
        alias_of=item.get("alias_of"),
        moved_to=item.get("moved_to"),
        phone_key=item.get("phone_key"),
        bsuid_key=item.get("bsuid_key"),
        awaiting=tuple(item.get("awaiting") or ()),
        handoff=handoff_of(item),
        budget_day=item.get("budget_day"),
        day_turns=int(item.get("day_turns", 0)),
        day_tokens=int(item.get("day_tokens", 0)),
        counted_seq=int(item.get("counted_seq", 0)),
        notice_day=item.get("notice_day"),
    )


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
    )


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
    )


class MemoryStore(LedgerWrites, PersonWrites, ErasureWrites, CompactionWrites):
    """The memory table. Here: the turn's one Query and its writes; the ledger, a person's
    records and links, erasure and compaction are in memagent/store_*.py."""

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
        """The person an identifier's key reaches now (memagent.identity), their memory, and
        the key's own state: one Query when it is the person's own key, one more when it
        points elsewhere (`alias_of`, `moved_to`)."""
        memory = self.load(key)
        own = memory.state
        target = own.alias_of or own.moved_to
        if target and target != key:
            return target, self.load(target), own
        return key, memory, own

    def state(self, pk: str) -> PersonState:
        """One key's state item alone (a consistent GetItem)."""
        key = {"pk": pk, "sk": STATE}
        return _state(self.table.get_item(Key=key, ConsistentRead=True).get("Item"))

    def _state_update(
        self,
        pk: str,
        *,
        previous: PersonState,
        seq: int,
        compact: bool,
        extra_set: dict[str, Any] | None = None,
        event_time: datetime | None = None,
        remove: Iterable[str] = (),
    ) -> dict[str, Any]:
        """Advance last_seq, guarded by the value we read (one writer per person: the FIFO
        group) and by the erasure mark (nothing older than an erasure is written again)."""
        values: dict[str, Any] = {":seq": seq, ":compact": compact, ":now": iso(datetime.now(UTC))}
        sets = ["last_seq = :seq", "compaction_due = :compact", "updated_at = :now"]
        for index, (name, value) in enumerate((extra_set or {}).items()):
            sets.append(f"{name} = :x{index}")
            values[f":x{index}"] = value
        if previous.last_seq:
            condition = "last_seq = :prev"
            values[":prev"] = previous.last_seq
        else:
            # a new memory never starts in a key linked to another person's meanwhile
            condition = "attribute_not_exists(last_seq) AND attribute_not_exists(alias_of)"
        if event_time is not None:
            condition += " AND (attribute_not_exists(erased_at) OR erased_at < :event_time)"
            values[":event_time"] = iso(event_time)
        expression = "SET " + ", ".join(sets)
        if remove:
            expression += " REMOVE " + ", ".join(remove)
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                "UpdateExpression": expression,
                "ConditionExpression": condition,
                "ExpressionAttributeValues": values,
            }
        }

    def remember_inbound(
        self,
        pk: str,
        *,
        previous: PersonState,
        turn: Turn,
        event_time: datetime,
        compact: bool,
        ledger_ttl: timedelta,
        opted_out: bool = False,
        held: bool = False,
        for_human: bool = False,
        end_handoff: bool = False,
        extra_set: dict[str, Any] | None = None,
        reserve_reply: bool = False,
    ) -> bool:
        """Store the person's message atomically with its ledger entry. False: a duplicate.

        The message joins the state's `awaiting` list, which the next reply answers as a whole,
        unless it is a STOP (`opted_out`: the replies still awaited are dropped with it, so
        nothing is sent after a STOP) or was written before a standing opt-out (`held`: kept,
        never answered, and the opt-out stays) or came while a human has the chat (`for_human`:
        kept for the human, never answered by the agent).

        With `reserve_reply`, the state's counter moves past the message's seq + 1 too: that
        seq is the reply's (remember_reply), and no other turn can take it."""
        assert turn.event_id is not None
        extra, remove = self._inbound_state(
            previous,
            turn,
            opted_out=opted_out,
            held=held,
            for_human=for_human,
            end_handoff=end_handoff,
        )
        extra.update(extra_set or {})
        status = OPTED_OUT if opted_out or held else (FOR_HUMAN if for_human else STORED)
        actions = [
            # the STOP's own entry is `opted_out` (that status also ends refused and dropped
            # replies): `stop` tells it apart
            self._new_entry(pk, turn, status, ledger_ttl, stop=opted_out),
            self._new_turn(pk, turn),
            self._state_update(
                pk,
                previous=previous,
                seq=turn.seq + 1 if reserve_reply else turn.seq,
                compact=compact,
                extra_set=extra,
                event_time=event_time,
                remove=remove,
            ),
        ]
        if opted_out:
            dropped = previous.awaiting[-(TRANSACTION_LIMIT - len(actions)) :]
            actions += [self._settle(pk, e, ledger_ttl, status=OPTED_OUT) for e in dropped]
        reasons = self._transact(actions)
        if reasons is None:
            return True
        if reasons[:1] == ["ConditionalCheckFailed"]:  # the ledger entry exists: a duplicate
            return False
        # a failed condition on the state (someone wrote first) or a TransactionConflict
        # with a concurrent compaction: the caller retries from a fresh read
        raise ConcurrentUpdate("memory changed while remembering; retry")

    def _inbound_state(
        self,
        previous: PersonState,
        turn: Turn,
        *,
        opted_out: bool,
        held: bool,
        for_human: bool,
        end_handoff: bool,
    ) -> tuple[dict[str, Any], list[str]]:
        """The state attributes a person's message sets, and those it removes."""
        extra: dict[str, Any] = {"last_number": turn.number}
        remove = ["awaiting"] if opted_out else []
        if end_handoff:  # timed out: the agent has the chat again, from this message on
            remove.extend(HANDOFF_ATTRIBUTES)
        if not held:  # an older message moves neither the opt-out nor the last-written time
            extra["last_inbound_at"] = iso(turn.at)
            extra["opted_out"] = opted_out  # a later message from the person lifts an opt-out
            # retention counts from what the person last wrote, in the write a turn makes anyway
            if self.retention:
                extra["expires_at"] = int((turn.at + self.retention).timestamp())
            else:
                remove.append("expires_at")
        if opted_out:
            extra["opted_out_at"] = iso(turn.at)
        elif not held and not for_human:  # a human has the chat: the agent answers nothing
            extra["awaiting"] = [*previous.awaiting, turn.event_id]
        return extra, remove

    def remember_reply(
        self,
        pk: str,
        *,
        event_id: str,
        turn: Turn,
        event_time: datetime,
        extra_set: dict[str, Any] | None = None,
        covered: Sequence[str] = (),
        ledger_ttl: timedelta = DEFAULT_LEDGER_TTL,
    ) -> None:
        """Store the reply to `event_id`'s message in the slot remember_inbound reserved for it
        (the message's seq + 1), only if the slot is empty: one reply per message, however often
        the turn is retried. The message's ledger entry stays `stored`: a redelivery finds the
        reply in its slot and sends the same words. Raises ConcurrentUpdate if a reply is there.

        A reply to that message alone is one conditional put; the state's `awaiting` list is
        left as it was (load counts nothing before a reply as awaiting). A reply to a burst
        (`covered`: the earlier messages it answers too) or with state flags (`extra_set`, the
        forget keywords) is one transaction: the covered entries move to `answered`, naming this
        reply, and the state takes the flags and drops the list, guarded by the erasure mark.
        A reply stored alone just after an erasure is caught by the turn instead: finish_event
        finds no ledger entry and the turn (or, after a crash, its redelivery) finishes the
        erasure."""
        others = [e for e in covered if e != event_id]
        if not extra_set and not others:
            try:
                self.table.put_item(
                    Item=self._turn_item(pk, turn), ConditionExpression="attribute_not_exists(pk)"
                )
            except ClientError as error:
                if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                raise ConcurrentUpdate("a reply to this message is stored already") from None
            return
        values: dict[str, Any] = {":event_time": iso(event_time)}
        sets = []
        for index, (name, value) in enumerate((extra_set or {}).items()):
            sets.append(f"{name} = :x{index}")
            values[f":x{index}"] = value
        expression = ("SET " + ", ".join(sets) + " " if sets else "") + "REMOVE awaiting"
        actions: list[dict[str, Any]] = [
            self._new_turn(pk, turn),
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": {"pk": pk, "sk": STATE},
                    "UpdateExpression": expression,
                    "ConditionExpression": (
                        "attribute_exists(last_seq)"
                        " AND (attribute_not_exists(erased_at) OR erased_at < :event_time)"
                    ),
                    "ExpressionAttributeValues": values,
                }
            },
        ]
        others = others[-(TRANSACTION_LIMIT - len(actions)) :]
        actions += [
            self._settle(
                pk, e, ledger_ttl, status=ANSWERED, answered_by=event_id, reply_seq=turn.seq
            )
            for e in others
        ]
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("memory changed while storing the reply; retry")

    def clear_awaiting(self, pk: str) -> None:
        """Forget which messages await a reply (a reply the provider refused was taken back:
        what it answered is not to be answered again by the next reply)."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="REMOVE awaiting",
            ConditionExpression="attribute_exists(last_seq)",
        )
