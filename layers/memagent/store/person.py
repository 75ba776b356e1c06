"""What the provider tells us about a person, kept on their STATE item (an opt-out, a
marketing preference), where their identifiers reach (memagent.turn.identity: attach, retire), and
the agent's current number."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.conditions import Key

from memagent.errors import ConcurrentUpdate
from memagent.store.table import ALIAS, STATE, Table, iso

if TYPE_CHECKING:
    from memagent.memory import PersonState


class PersonWrites(Table):
    if TYPE_CHECKING:  # ErasureWrites' (a MemoryStore is both)

        def everything(self, pk: str) -> list[dict[str, Any]]: ...

    def attach(
        self, key: str, pk: str, *, own: PersonState, role: str | None = None, merged: bool = False
    ) -> None:
        """Make an identifier's key reach person `pk`, from wherever it reached before (`own`:
        the key's state as read). A key without a memory of its own points (`alias_of`); one
        that holds a memory keeps it and redirects (`moved_to`): that memory stays its
        person's. `role` ("phone" or "bsuid"): it is the person's current one.
        `merged`: the memory under `key` is the same person's (an identity change)."""
        now = iso(datetime.now(UTC))
        previous = own.alias_of or own.moved_to or (key if own.last_seq else None)
        own_role = [f"{role}_key = :key"] if role else []
        if key == pk:  # the person's own key comes back to them
            sets = ", ".join(["updated_at = :now", *own_role])
            values = {":now": now, **({":key": key} if role else {})}
            actions = [self._set_state(key, values, f"SET {sets} REMOVE moved_to")]
        else:
            redirect = "moved_to" if own.last_seq else "alias_of"
            item = {"pk": pk, "sk": f"{ALIAS}{key}", **({"merged": merged} if merged else {})}
            actions = [
                self._set_state(
                    key, {":pk": pk, ":now": now}, f"SET {redirect} = :pk, updated_at = :now"
                ),
                {"Put": {"TableName": self.table_name, "Item": item}},
            ]
            if role:
                actions.append(self._set_state(pk, {":key": key}, "SET " + own_role[0]))
        if previous and previous not in (pk, key):
            actions.append(self._delete(previous, f"{ALIAS}{key}"))
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("an identifier moved meanwhile; retry")
        if previous and previous != pk and role:
            self._drop_role(previous, role, key)

    def retire(
        self,
        key: str,
        pk: str,
        *,
        own: PersonState,
        role: str | None = None,
        mark: datetime | None = None,
    ) -> None:
        """Detach an identifier's key from person `pk`: whoever writes from it next is someone
        new. A key that only pointed loses its state item; one that holds a memory or a mark
        (the person's own, or another's) keeps it and redirects to a new, empty key. `mark`:
        that key starts with an erasure mark (`pk` was erased: a late redelivery from before
        the erasure is refused there too)."""
        actions = []
        if key == pk or own.last_seq or own.erased_at:
            fresh = f"P#{secrets.token_hex(20)}"
            now = iso(datetime.now(UTC))
            redirect = "SET moved_to = :fresh, updated_at = :now"
            actions.append(self._set_state(key, {":fresh": fresh, ":now": now}, redirect))
            item = {"pk": fresh, "sk": f"{ALIAS}{key}"}
            actions.append({"Put": {"TableName": self.table_name, "Item": item}})
            if mark is not None:
                actions.append(self._set_state(fresh, {":at": iso(mark)}, "SET erased_at = :at"))
        else:
            actions.append(self._delete(key, STATE))
        if key != pk:
            actions.append(self._delete(pk, f"{ALIAS}{key}"))
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("an identifier moved meanwhile; retry")
        if role:
            self._drop_role(pk, role, key)

    def states(self, keys: list[str]) -> dict[str, dict[str, Any]]:
        """The state items of several keys in one request (BatchGetItem), by key."""
        request = {"Keys": [{"pk": k, "sk": STATE} for k in keys], "ConsistentRead": True}
        found: dict[str, dict[str, Any]] = {}
        while request:
            response = self._client.batch_get_item(RequestItems={self.table_name: request})
            found.update({i["pk"]: i for i in response["Responses"].get(self.table_name, [])})
            request = response.get("UnprocessedKeys", {}).get(self.table_name)
        return found

    def links(self, pk: str) -> set[str]:
        """The keys of the other identifiers a partition lists (its ALIAS# items)."""
        items = self._query(pk, Key("sk").begins_with(ALIAS), projection="sk")
        return {item["sk"].removeprefix(ALIAS) for item in items}

    def move(self, old: str, new: str, *, via: str) -> int:
        """Move a partition's items to key `new` (memagent.lifecycle.upgrade), whose state must hold
        no memory: copies first, then the old items' deletion, then one transaction that writes
        the state under `new` and deletes the old one and the `via` key's pointer (the commit:
        until then a redelivery finds the old state and finishes the move). The old partition's
        links (ALIAS#, keys of its own kind) are dropped: the identifiers at hand link again.
        Returns the number of items moved."""
        items = self.everything(old)
        state = next((i for i in items if i["sk"] == STATE), None)
        rest = [i for i in items if i["sk"] != STATE and not i["sk"].startswith(ALIAS)]
        links = [i["sk"].removeprefix(ALIAS) for i in items if i["sk"].startswith(ALIAS)]
        with self.table.batch_writer() as batch:
            for item in rest:
                batch.put_item(Item={**item, "pk": new})
        with self.table.batch_writer() as batch:
            for item in items:  # the links too
                if item["sk"] != STATE:
                    batch.delete_item(Key={"pk": old, "sk": item["sk"]})
        links_to_old = ("alias_of", "moved_to", "phone_key", "bsuid_key")
        kept = {k: v for k, v in (state or {}).items() if k not in links_to_old}
        actions = [self._delete(key, STATE) for key in dict.fromkeys((old, via))]
        if state is not None:
            condition = "attribute_not_exists(last_seq) AND attribute_not_exists(erased_at)"
            put = {"TableName": self.table_name, "Item": {**kept, "pk": new}}
            actions.append({"Put": {**put, "ConditionExpression": condition}})
        if self._transact(actions) is not None:
            raise ConcurrentUpdate("the memory moved meanwhile; retry")
        with self.table.batch_writer() as batch:  # the old links' pointers, now to nothing
            for key in set(links) - {via}:
                batch.delete_item(Key={"pk": key, "sk": STATE})
        return len(rest) + (state is not None)

    def _drop_role(self, pk: str, role: str, key: str) -> None:
        """The person no longer has `key` as their current phone or BSUID."""
        self._update_if(
            Key={"pk": pk, "sk": STATE},
            UpdateExpression=f"REMOVE {role}_key",
            ConditionExpression=f"{role}_key = :key",
            ExpressionAttributeValues={":key": key},
        )

    def _delete(self, pk: str, sk: str) -> dict[str, Any]:
        return {"Delete": {"TableName": self.table_name, "Key": {"pk": pk, "sk": sk}}}

    def current_number(self, agent_pk: str, last: str | None) -> str | None:
        """The business number to answer from: the one the person last wrote to, or the
        number that replaced it (number.replaced: the old one is retired)."""
        item = self.table.get_item(Key={"pk": agent_pk, "sk": "NUMBER"}).get("Item") or {}
        return item["current"] if last and item.get("previous") == last else last

    def record_opt_out(self, pk: str, at: datetime) -> bool:
        """Mark the person opted out, unless they have written since (events arrive out of
        order). Returns whether the opt-out was recorded."""
        return self._update_state_from(
            pk,
            at,
            "SET opted_out = :true, opted_out_at = :at, updated_at = :now",
            "attribute_not_exists(last_inbound_at) OR last_inbound_at < :at",
            {":true": True, ":now": iso(datetime.now(UTC))},
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
            ExpressionAttributeValues={**values, ":at": iso(at)},
        )

    def record_number(self, agent_pk: str, *, old: str, new: str) -> None:
        """Keep the agent's current whasp number (agent-wide, not per person: nothing migrates)."""
        self.table.put_item(Item={"pk": agent_pk, "sk": "NUMBER", "current": new, "previous": old})
