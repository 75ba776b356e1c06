"""Meta's identity rules: who a payload is about.

A person is their business-scoped user id (BSUID, ``user_id``/``from_user_id``) when the payload
has one, else their phone (``wa_id``/``from``); the other one is an alias. System messages
``user_changed_number`` / ``user_changed_user_id`` move a person to new identifiers (the parser
builds the event; these rules say which identifiers are old and which new).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

IDENTITY_CHANGES = frozenset({"user_changed_number", "user_changed_user_id"})

BSUID = re.compile(r"[A-Z]{2}\.[A-Za-z0-9.]{1,140}\Z")  # "US.13491208655302741918"
PHONE = re.compile(r"\+?[1-9][0-9]{6,14}\Z")  # Meta's wa_id: digits, no "+"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _phone(value: Any) -> str | None:
    """A wa_id ("972987654321") as the E.164 phone we key people by ("+972987654321")."""
    digits = _text(value)
    if not digits or not PHONE.match(digits):
        return None
    return digits if digits.startswith("+") else f"+{digits}"


def _bsuid(value: Any) -> str | None:
    """A business-scoped user id, stored whole ("US.13491208655302741918")."""
    text = _text(value)
    return text if text and BSUID.match(text) else None


def _contact_for(message: Mapping[str, Any], contacts: list[dict[str, Any]]) -> dict[str, Any]:
    sender, sender_id = _text(message.get("from")), _text(message.get("from_user_id"))
    for contact in contacts:
        if (sender and contact.get("wa_id") == sender) or (
            sender_id and contact.get("user_id") == sender_id
        ):
            return contact
    return {}  # never someone else's entry, even the only one: its BSUID would become theirs


def identities(
    message: Mapping[str, Any], contact: Mapping[str, Any]
) -> tuple[str | None, str | None]:
    """(BSUID, phone) of a message's sender, each when the payload has it."""
    bsuid = _bsuid(message.get("from_user_id")) or _bsuid(contact.get("user_id"))
    phone = _phone(message.get("from")) or _phone(contact.get("wa_id"))
    return bsuid, phone


def preference_id(who: str, stamp: Any, choice: str) -> str:
    """A marketing preference's event id (its dedupe key, logged): the person as a keyed
    digest, so no phone or BSUID reaches the logs, nor one computable from a phone."""
    from memagent.memory import digest

    return f"pref:{digest(who)[:32]}:{stamp}:{choice}"


def _introduced(message: Mapping[str, Any]) -> frozenset[str]:
    """The identifiers an identity change gives the person: the new BSUID, the new phone."""
    system = _object(message.get("system"))
    if message.get("type") != "system" or system.get("type") not in IDENTITY_CHANGES:
        return frozenset()
    new = (_bsuid(system.get("user_id")), _phone(system.get("wa_id") or system.get("new_wa_id")))
    return frozenset(i for i in new if i)


def changed_identifiers(message: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An identity change's (previous, new) identifiers: what the person was known by (the
    system message's previous BSUID and phone, the sender's), and what is new to them."""
    system = _object(message.get("system"))
    previous = [
        _bsuid(system.get("previous_user_id")),
        _bsuid(message.get("from_user_id")),
        _phone(system.get("customer")),
        _phone(message.get("from")),
    ]
    current = [
        _bsuid(system.get("user_id")),
        _phone(system.get("wa_id") or system.get("new_wa_id")),
    ]
    old = tuple(dict.fromkeys(i for i in previous if i))
    new = tuple(dict.fromkeys(i for i in current if i and i not in old))
    return old, new
