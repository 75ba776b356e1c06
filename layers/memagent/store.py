"""DynamoDB: the only module that touches the memory table.

One partition per person (`pk` = memagent.person.person_key); sort keys:

    ALIAS#<key>       another identifier's key that points here (its STATE holds `alias_of`)
    EVT#<digest>      the dedupe ledger: one item per whasp event, with the turn's progress
                      (stored -> sent, or opted_out / parked / skipped; `replied`, with the
                      reply's text, in entries an older version wrote) and a TTL; a message
                      answered by a later one's reply (a burst) ends `answered`, naming the
                      reply: answered_by, reply_seq
    FACT#<key>        one durable fact; the key is derived from its normalised text, so facts
                      are unique per person by construction
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
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError

from memagent.errors import ConcurrentUpdate
from memagent.memory import Fact, Memory, PersonState, Summary, Turn

STATE = "STATE"
SUMMARY = "SUMMARY"
MSG = "MSG#"
FACT = "FACT#"
EVT = "EVT#"
ALIAS = "ALIAS#"
PART = "part_"  # ledger attribute part_<n>: the provider's id of reply part n, once sent
TURN_READ_FROM = FACT  # FACT# < MSG# < STATE < SUMMARY: one range holds what a turn needs

# ledger statuses
STORED, REPLIED, SENT = "stored", "replied", "sent"
OPTED_OUT, PARKED, SKIPPED = "opted_out", "parked", "skipped"
ANSWERED = "answered"  # covered by the reply stored under the entry `answered_by` names

TRANSACTION_LIMIT = 100  # DynamoDB's cap on actions per TransactWriteItems
DEFAULT_LEDGER_TTL = timedelta(days=30)

# every state attribute but the erasure mark: what forget() strips from the state item
_STATE_CONTENT = (
    "last_seq",
    "marker",
    "compaction_due",
    "last_number",
    "last_inbound_at",
    "opted_out",
    "opted_out_at",
    "summary",  # on the state item only in versions before the SUMMARY item
    "summary_at",
    "updated_at",
    "forget_pending",
    "alias_of",
    "awaiting",
    "marketing",
    "marketing_at",
    "expires_at",  # the retention TTL: a mark never expires (it refuses late redeliveries)
)


def msg_sk(seq: int) -> str:
    return f"{MSG}{seq:012d}"


def ledger_sk(event_id: str) -> str:
    return f"{EVT}{hashlib.sha256(event_id.encode()).hexdigest()[:32]}"


def sent_parts(entry: dict[str, Any]) -> dict[int, str]:
    """The reply parts a ledger entry records as sent: {part: provider message id}."""
    return {
        int(name.removeprefix(PART)): str(value)
        for name, value in entry.items()
        if name.startswith(PART) and name.removeprefix(PART).isdigit()
    }


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(UTC).isoformat() if value else None


def _time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def _state(item: dict[str, Any] | None) -> PersonState:
    if not item:
        return PersonState()
    return PersonState(
        last_seq=int(item.get("last_seq", 0)),
        marker=int(item.get("marker", 0)),
        compaction_due=bool(item.get("compaction_due", False)),
        last_number=item.get("last_number"),
        last_inbound_at=_time(item.get("last_inbound_at")),
        opted_out=bool(item.get("opted_out", False)),
        opted_out_at=_time(item.get("opted_out_at")),
        erased_at=_time(item.get("erased_at")),
        forget_pending=bool(item.get("forget_pending", False)),
        alias_of=item.get("alias_of"),
        awaiting=tuple(item.get("awaiting") or ()),
    )


def _turn(item: dict[str, Any]) -> Turn:
    return Turn(
        seq=int(item["seq"]),
        role=item["role"],
        text=item.get("text", ""),
        at=_time(item["at"]) or datetime.now(UTC),
        number=item.get("number"),
        event_id=item.get("event_id"),
    )


def _cancel_codes(error: ClientError) -> list[str]:
    return [reason.get("Code", "None") for reason in error.response.get("CancellationReasons", [])]


class MemoryStore:
    def __init__(
        self, table_name: str, *, resource: Any | None = None, retention: timedelta | None = None
    ):
        """`retention`: a person who writes nothing for this long is forgotten (DynamoDB's TTL
        deletes their state item, whose stream record erases the rest: memagent.lifecycle
        .expire); None keeps them until erased."""
        self.retention = retention
        self._dynamodb = resource or boto3.resource("dynamodb")
        self.table = self._dynamodb.Table(table_name)
        self.table_name = table_name
        self._client = self._dynamodb.meta.client  # speaks Python types, like the Table API

    # ------------------------------------------------------------------ reading

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
        summary = Summary(text=text, marker=state.marker, at=_time(at)) if text else None
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
                    Fact(text=i["text"], at=_time(i["at"]) or datetime.now(UTC))
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

    def ledger(self, pk: str, event_id: str) -> dict[str, Any] | None:
        response = self.table.get_item(
            Key={"pk": pk, "sk": ledger_sk(event_id)}, ConsistentRead=True
        )
        return response.get("Item")

    def everything(self, pk: str) -> list[dict[str, Any]]:
        """Every item held for a person, for export and erasure."""
        return list(self._query(pk, None))

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

    # ------------------------------------------------------------------ the turn

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
        values: dict[str, Any] = {":seq": seq, ":compact": compact, ":now": _iso(datetime.now(UTC))}
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
            values[":event_time"] = _iso(event_time)
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
        extra_set: dict[str, Any] | None = None,
        reserve_reply: bool = False,
    ) -> bool:
        """Store the person's message atomically with its ledger entry. False: a duplicate.

        The message joins the state's `awaiting` list, which the next reply answers as a whole,
        unless it is a STOP (`opted_out`: the replies still awaited are dropped with it, so
        nothing is sent after a STOP) or was written before a standing opt-out (`held`: kept,
        never answered, and the opt-out stays).

        With `reserve_reply`, the state's counter moves past the message's seq + 1 too: that
        seq is the reply's (remember_reply), and no other turn can take it."""
        assert turn.event_id is not None
        now = datetime.now(UTC)
        ledger = {
            "pk": pk,
            "sk": ledger_sk(turn.event_id),
            "event_id": turn.event_id,
            "status": OPTED_OUT if opted_out or held else STORED,
            "user_seq": turn.seq,
            "created_at": _iso(now),
            "expires_at": int((now + ledger_ttl).timestamp()),
        }
        if opted_out:  # the STOP's own entry (opted_out also ends refused and dropped replies)
            ledger["stop"] = True
        extra: dict[str, Any] = {"last_number": turn.number}
        remove = ["awaiting"] if opted_out else []
        if not held:  # an older message moves neither the opt-out nor the last-written time
            extra["last_inbound_at"] = _iso(turn.at)
            extra["opted_out"] = opted_out  # a later message from the person lifts an opt-out
            # retention counts from what the person last wrote, in the write a turn makes anyway
            if self.retention:
                extra["expires_at"] = int((turn.at + self.retention).timestamp())
            else:
                remove.append("expires_at")
        if opted_out:
            extra["opted_out_at"] = _iso(turn.at)
        elif not held:
            extra["awaiting"] = [*previous.awaiting, turn.event_id]
        extra.update(extra_set or {})
        actions = [
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": ledger,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
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
        return True

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
        values: dict[str, Any] = {":event_time": _iso(event_time)}
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

    def finish_event(self, pk: str, event_id: str, status: str, **details: Any) -> bool:
        """Record the end of an event's turn (sent, parked, opted out, skipped). The reply text
        copy (older versions) is dropped from the ledger; a forgotten person's ledger is never
        recreated. False if the event has no ledger entry (the person was forgotten)."""
        names = {"#s": "status"}
        values: dict[str, Any] = {":status": status, ":now": _iso(datetime.now(UTC))}
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

    def link(self, alias_pk: str, person_pk: str) -> bool:
        """Point another identifier's key at a person's key: its STATE gets `alias_of`, the
        person's partition an ALIAS# item (so erasure finds every key). Only an identifier with
        no memory of its own is linked; returns whether the link holds."""
        return (
            self._transact(
                [
                    {
                        "Update": {
                            "TableName": self.table_name,
                            "Key": {"pk": alias_pk, "sk": STATE},
                            "UpdateExpression": "SET alias_of = :person, updated_at = :now",
                            "ConditionExpression": (
                                "attribute_not_exists(last_seq)"
                                " AND (attribute_not_exists(alias_of) OR alias_of = :person)"
                            ),
                            "ExpressionAttributeValues": {
                                ":person": person_pk,
                                ":now": _iso(datetime.now(UTC)),
                            },
                        }
                    },
                    {
                        "Put": {
                            "TableName": self.table_name,
                            "Item": {"pk": person_pk, "sk": f"{ALIAS}{alias_pk}", "key": alias_pk},
                        }
                    },
                ]
            )
            is None
        )

    def record_opt_out(self, pk: str, at: datetime) -> bool:
        """Mark the person opted out, unless they have written since (events arrive out of
        order). Returns whether the opt-out was recorded."""
        return self._update_state_from(
            pk,
            at,
            "SET opted_out = :true, opted_out_at = :at, updated_at = :now",
            "attribute_not_exists(last_inbound_at) OR last_inbound_at < :at",
            {":true": True, ":now": _iso(datetime.now(UTC))},
        )

    def record_marketing(self, pk: str, value: str, at: datetime) -> bool:
        """Record a marketing preference on a known person's state, unless a newer one (or an
        erasure) came first. Returns whether it was recorded."""
        return self._update_state_from(
            pk,
            at,
            "SET marketing = :value, marketing_at = :at",
            "attribute_exists(last_seq)"
            " AND (attribute_not_exists(marketing_at) OR marketing_at < :at)",
            {":value": value},
        )

    def _update_state_from(
        self, pk: str, at: datetime, expression: str, condition: str, values: dict[str, Any]
    ) -> bool:
        """Apply an event from time `at` (`:at`) to the person's state if `condition` holds and
        no erasure came after it. Returns whether it was applied."""
        return self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression=expression,
            ConditionExpression=(
                f"({condition}) AND (attribute_not_exists(erased_at) OR erased_at < :at)"
            ),
            ExpressionAttributeValues={**values, ":at": _iso(at)},
        )

    def record_number(self, agent_pk: str, *, old: str, new: str, label: str | None, at: datetime):
        """Keep the agent's current whasp number (agent-wide, not per person: nothing migrates)."""
        self.table.put_item(
            Item={
                "pk": agent_pk,
                "sk": "NUMBER",
                "current": new,
                "previous": old,
                "label": label,
                "replaced_at": _iso(at),
            }
        )

    # ------------------------------------------------------------------ erasure

    def mark_erased(self, pk: str, at: datetime) -> datetime:
        """Record the erasure mark first: from now on no event older than it is stored. The mark
        only moves forward; returns the mark in force (`at`, or a later one already there)."""
        if not self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="SET erased_at = :at",
            ConditionExpression="attribute_not_exists(erased_at) OR erased_at < :at",
            ExpressionAttributeValues={":at": _iso(at)},
        ):
            state = self.table.get_item(Key={"pk": pk, "sk": STATE}, ConsistentRead=True)
            return _time(state["Item"]["erased_at"]) or at
        return at

    def erasure_mark(self, pk: str) -> datetime | None:
        """The person's erasure mark as it stands now (a consistent read of one attribute)."""
        item = self.table.get_item(
            Key={"pk": pk, "sk": STATE}, ConsistentRead=True, ProjectionExpression="erased_at"
        ).get("Item")
        return _time(item.get("erased_at")) if item else None

    def delete_items(self, pk: str, sort_keys: Iterable[str]) -> int:
        """Delete items by sort key, idempotently, in batches of 25 (boto3's batch writer)."""
        count = 0
        with self.table.batch_writer() as batch:
            for sk in sort_keys:
                batch.delete_item(Key={"pk": pk, "sk": sk})
                count += 1
        return count

    def reduce_state_to_mark(self, pk: str, at: datetime) -> None:
        """Strip the state item down to the content-free erasure mark (pk, sk, erased_at),
        unless a newer erasure or a genuinely new message has taken over meanwhile."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="REMOVE " + ", ".join(_STATE_CONTENT),
            ConditionExpression="erased_at = :at",
            ExpressionAttributeValues={":at": _iso(at)},
        )

    # ------------------------------------------------------------------ compaction

    def commit_compaction(
        self,
        pk: str,
        *,
        old_marker: int,
        new_marker: int,
        summary: str,
        new_facts: Iterable[tuple[str, Fact]],
        dropped_fact_keys: Iterable[str] = (),
        erased_at: datetime | None = None,
    ) -> None:
        """The commit point of a compaction: summary, new marker and facts, all or nothing, and
        only if nobody moved the marker since we read it and nobody erased the person meanwhile
        (an erasure strips last_seq and moves erased_at). Raises ConcurrentUpdate otherwise.
        The summary goes in its own item (the state, written by every turn, stays small); the
        marker stays on the state, where every turn's condition reads it."""
        now = _iso(datetime.now(UTC))
        condition = (
            "marker = :old" if old_marker else "(attribute_not_exists(marker) OR marker = :old)"
        )
        condition += " AND attribute_exists(last_seq) AND last_seq >= :new"
        values: dict[str, Any] = {}
        if erased_at is None:
            condition += " AND attribute_not_exists(erased_at)"
        else:
            condition += " AND erased_at = :erased"
            values[":erased"] = _iso(erased_at)
        actions: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self.table_name,
                    "Key": {"pk": pk, "sk": STATE},
                    # REMOVE: a summary an older version kept on the state item
                    "UpdateExpression": (
                        "SET marker = :new, compaction_due = :false, updated_at = :now "
                        "REMOVE summary, summary_at"
                    ),
                    "ConditionExpression": f"attribute_exists(pk) AND {condition}",
                    "ExpressionAttributeValues": {
                        **values,
                        ":now": now,
                        ":new": new_marker,
                        ":old": old_marker,
                        ":false": False,
                    },
                }
            },
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": {
                        "pk": pk,
                        "sk": SUMMARY,
                        "text": summary,
                        "marker": new_marker,
                        "at": now,
                    },
                }
            },
        ]
        for key, fact in new_facts:
            actions.append(
                {
                    "Put": {
                        "TableName": self.table_name,
                        "Item": {
                            "pk": pk,
                            "sk": f"{FACT}{key}",
                            "text": fact.text,
                            "at": _iso(fact.at),
                        },
                    }
                }
            )
        for key in dropped_fact_keys:
            actions.append(
                {"Delete": {"TableName": self.table_name, "Key": {"pk": pk, "sk": f"{FACT}{key}"}}}
            )
        if len(actions) > TRANSACTION_LIMIT:
            raise ValueError(f"compaction commit needs {len(actions)} actions")
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("the summary marker moved; another compaction won")

    def delete_turns(self, pk: str, seqs: Iterable[int]) -> int:
        """Delete folded turns. Idempotent (deleting a missing item is a no-op); batches of 25,
        which boto3's batch writer retries until none is left unprocessed."""
        count = 0
        with self.table.batch_writer() as batch:
            for seq in seqs:
                batch.delete_item(Key={"pk": pk, "sk": msg_sk(seq)})
                count += 1
        return count

    def clear_compaction_flag(self, pk: str, *, seen_last_seq: int) -> None:
        """Lower the flag when there is nothing to fold, unless a new turn arrived meanwhile."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="SET compaction_due = :false",
            ConditionExpression="last_seq = :seen AND compaction_due = :true",
            ExpressionAttributeValues={":false": False, ":true": True, ":seen": seen_last_seq},
        )

    # ------------------------------------------------------------------ conditional writes

    def _update_if(self, **update: Any) -> bool:
        """update_item guarded by its ConditionExpression: False, and nothing written, when the
        condition does not hold (the usual outcome of a lost race or a repeat, not an error)."""
        try:
            self.table.update_item(**update)
        except ClientError as error:
            if error.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

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

    # ------------------------------------------------------------------ items

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
            "at": _iso(turn.at),
        }
        if turn.number:
            item["number"] = turn.number
        if turn.event_id:
            item["event_id"] = turn.event_id
        return item
