"""The turn's writes (memagent/store/memory_store.py has its one Query and the table's key schema):
a person's message with its ledger entry and the state, in one transaction; the reply in the slot
that write reserved for it; the state's `awaiting` list cleared when a reply is taken back."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from memagent.errors import ConcurrentUpdate
from memagent.memory import PersonState, Turn
from memagent.store.ledger import (
    ANSWERED,
    OPTED_OUT,
    STAFF_ECHO,
    LedgerWrites,
    Standing,
)
from memagent.store.table import HANDOFF_ATTRIBUTES, STATE, TRANSACTION_LIMIT, iso

DEFAULT_LEDGER_TTL = timedelta(days=30)


class TurnWrites(LedgerWrites):
    def _turn_with_state(
        self,
        pk: str,
        previous: PersonState,
        turn: Turn,
        compact: bool,
        *,
        extra_set: dict[str, Any] | None = None,
        event_time: datetime | None = None,
        remove: Iterable[str] = (),
    ) -> list[dict[str, Any]]:
        """The business's words that answer no one event (a follow-up, the CSAT question, an
        operator's reply, staff's echo): the turn, and the state advanced to it
        (`_state_update`), two actions of the transaction that writes its ledger entry."""
        update = self._state_update(
            pk,
            previous=previous,
            seq=turn.seq,
            compact=compact,
            extra_set=extra_set,
            event_time=event_time,
            remove=remove,
        )
        return [self._new_turn(pk, turn), update]

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
        group) and by the erasure mark (nothing older than an erasure is written again); one
        that moves the retention on (`expires_at`), by the retention too: an expired state is
        never renewed (DynamoDB may not have deleted it yet; the turn expires it first)."""
        now = datetime.now(UTC)
        values: dict[str, Any] = {":seq": seq, ":compact": compact, ":now": iso(now)}
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
        if "expires_at" in (extra_set or {}):
            condition += " AND (attribute_not_exists(expires_at) OR expires_at > :epoch)"
            values[":epoch"] = int(now.timestamp())
        expression = "SET " + ", ".join(sets)
        if remove:
            expression += " REMOVE " + ", ".join(remove)
        return self._set_state(pk, values, expression, condition)

    def remember_inbound(
        self,
        pk: str,
        *,
        previous: PersonState,
        turn: Turn,
        event_time: datetime,
        compact: bool,
        ledger_ttl: timedelta,
        standing: Standing = Standing.ANSWER,
        end_handoff: bool = False,
        extra_set: dict[str, Any] | None = None,
        reserve_reply: bool | None = None,
    ) -> bool:
        """Store the person's message atomically with its ledger entry. False: a duplicate.

        Its `standing` (memagent.store.ledger.Standing) decides the rest: a message the agent
        answers joins the state's `awaiting` list, which the next reply answers as a whole, and
        the state's counter moves past its seq + 1 too (that seq is the reply's, remember_reply:
        no other turn can take it). A STOP drops the replies still awaited, so nothing is sent
        after it; a message written before a standing opt-out (HELD) is kept, never answered,
        and the opt-out stays; one that came while a human has the chat (FOR_HUMAN) is kept
        for the human, never answered by the agent. `reserve_reply` False stores an awaiting
        message without its reply's slot, as versions before the slot did (tests seed that
        shape; None: as the standing says)."""
        assert turn.event_id is not None
        stop = standing is Standing.STOP
        reserve = standing.awaits_reply if reserve_reply is None else reserve_reply
        extra, remove = self._inbound_state(previous, turn, standing, end_handoff=end_handoff)
        extra.update(extra_set or {})
        actions = [
            # the STOP's own entry is `opted_out` (that status also ends refused and dropped
            # replies): `stop` tells it apart
            self._new_entry(pk, turn, standing.status, ledger_ttl, stop=stop),
            self._new_turn(pk, turn),
            self._state_update(
                pk,
                previous=previous,
                seq=turn.seq + 1 if reserve else turn.seq,
                compact=compact,
                extra_set=extra,
                event_time=event_time,
                remove=remove,
            ),
        ]
        if stop:
            dropped = previous.awaiting[-(TRANSACTION_LIMIT - len(actions)) :]
            actions += [self._settle(pk, e, ledger_ttl, status=OPTED_OUT) for e in dropped]
        # False: the ledger entry exists (a duplicate); ConcurrentUpdate: a failed condition on
        # the state (someone wrote first) or a TransactionConflict with a concurrent compaction
        return self._write_once(actions, "remembering")

    def _inbound_state(
        self, previous: PersonState, turn: Turn, standing: Standing, *, end_handoff: bool
    ) -> tuple[dict[str, Any], list[str]]:
        """The state attributes a person's message sets, and those it removes."""
        extra: dict[str, Any] = {"last_number": turn.number}
        opted_out = standing is Standing.STOP
        held = standing is Standing.HELD
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
        elif standing.awaits_reply:  # not held, nor a human's to answer
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
        handoff_since: datetime | None = None,
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
        erasure.

        Either way the write holds only if no human took the chat since the turn read its
        memory (`handoff_since`: the start of the handoff it read, None if none): the state's
        handoff is checked in the same transaction (alone: a ConditionCheck beside the put).
        A take-over meanwhile refuses it, like any lost race, with ConcurrentUpdate: nothing
        is stored or sent, and the turn's retry from a fresh read finds the chat a human's."""
        others = [e for e in covered if e != event_id]
        if not extra_set and not others:
            unchanged, values = _no_handoff_since(handoff_since)
            check: dict[str, Any] = {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                "ConditionExpression": unchanged,
            }
            if values:
                check["ExpressionAttributeValues"] = values
            reasons = self._transact([self._new_turn(pk, turn), {"ConditionCheck": check}])
            if reasons is None:
                return
            if reasons[0] == "ConditionalCheckFailed":
                raise ConcurrentUpdate("a reply to this message is stored already")
            raise ConcurrentUpdate("the chat was handed to a human meanwhile; retry")
        actions = [
            self._new_turn(pk, turn),
            self._reply_state(pk, extra_set or {}, event_time, handoff_since),
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

    def _reply_state(
        self,
        pk: str,
        extra_set: dict[str, Any],
        event_time: datetime,
        handoff_since: datetime | None,
    ) -> dict[str, Any]:
        """A reply's transaction, on the state: the flags set and the `awaiting` list dropped,
        guarded by the erasure mark and by the handoff the turn read."""
        unchanged, values = _no_handoff_since(handoff_since)
        values[":event_time"] = iso(event_time)
        sets = []
        for index, (name, value) in enumerate(extra_set.items()):
            sets.append(f"{name} = :x{index}")
            values[f":x{index}"] = value
        expression = ("SET " + ", ".join(sets) + " " if sets else "") + "REMOVE awaiting"
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {"pk": pk, "sk": STATE},
                "UpdateExpression": expression,
                "ConditionExpression": (
                    "attribute_exists(last_seq)"
                    " AND (attribute_not_exists(erased_at) OR erased_at < :event_time)"
                    f" AND ({unchanged})"
                ),
                "ExpressionAttributeValues": values,
            }
        }

    def remember_staff_echo(
        self,
        pk: str,
        *,
        event_id: str,
        previous: PersonState,
        turn: Turn,
        handoff: dict[str, Any],
        compact: bool,
        ledger_ttl: timedelta,
    ) -> bool:
        """Store what staff sent from the phone (memagent/turn/echoes.py) as the business's
        words, with a ledger entry keyed by its message id and the handoff it starts or renews
        (`handoff`: the state's attributes), in one transaction, guarded by the erasure mark (an
        echo older than an erasure never brings anything back). The person's messages still
        awaiting a reply are answered by it, as by an operator's reply. False: a repeat of the
        echo, or the memory was erased after it was written. ConcurrentUpdate: a turn took the
        seq first (read again)."""
        actions = [
            self._ledger_put(pk, event_id, STAFF_ECHO, ledger_ttl, reply_seq=turn.seq),
            *self._turn_with_state(
                pk,
                previous,
                turn,
                compact,
                extra_set=handoff,
                event_time=turn.at,
                remove=("awaiting",),
            ),
        ]
        actions += [
            self._settle(
                pk, e, ledger_ttl, status=ANSWERED, answered_by=event_id, reply_seq=turn.seq
            )
            for e in previous.awaiting[-(TRANSACTION_LIMIT - len(actions)) :]
        ]
        reasons = self._transact(actions)
        if reasons is None:
            return True
        if reasons[0] == "ConditionalCheckFailed":
            return False  # seen before
        if reasons[2] == "ConditionalCheckFailed":
            item = self.table.get_item(Key={"pk": pk, "sk": STATE}, ConsistentRead=True)
            if int(item.get("Item", {}).get("last_seq", 0)) == previous.last_seq:
                return False  # the erasure mark refused it, not a race
        raise ConcurrentUpdate("memory changed while storing the staff echo; retry")

    def clear_awaiting(self, pk: str) -> None:
        """Forget which messages await a reply (a reply the provider refused was taken back:
        what it answered is not to be answered again by the next reply)."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression="REMOVE awaiting",
            ConditionExpression="attribute_exists(last_seq)",
        )


def _no_handoff_since(since: datetime | None) -> tuple[str, dict[str, Any]]:
    """The condition that no human took the chat after the handoff a turn read (`since`, its
    start; None: the turn read none), and its values."""
    if since is None:
        return "attribute_not_exists(handoff_since)", {}
    return "attribute_not_exists(handoff_since) OR handoff_since <= :handoff_read", {
        ":handoff_read": iso(since)
    }
