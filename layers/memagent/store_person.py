"""What the provider tells us about a person, kept on their STATE item (an opt-out, a
marketing preference), their other identifiers' links, and the agent's current number."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memagent.store_table import ALIAS, STATE, Table, iso


class PersonWrites(Table):
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
                                ":now": iso(datetime.now(UTC)),
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

    def record_number(self, agent_pk: str, *, old: str, new: str, label: str | None, at: datetime):
        """Keep the agent's current whasp number (agent-wide, not per person: nothing migrates)."""
        self.table.put_item(
            Item={
                "pk": agent_pk,
                "sk": "NUMBER",
                "current": new,
                "previous": old,
                "label": label,
                "replaced_at": iso(at),
            }
        )
