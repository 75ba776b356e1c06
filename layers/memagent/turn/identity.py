"""Who an event is from: a person, and the identifiers (phone, Meta BSUID) that reach them now.

A person is a partition of the memory table. Each identifier has a key (memagent.memory.person); a
person's memory lives under the key of the identifier they first wrote with (their own key), so
a turn reads it with one Query. Every other identifier that reaches them has a state item of its
own that points there (`alias_of`: one more, small Query), listed in the person's partition
(ALIAS#) so that erasure finds it. An identifier moves to another person, or is retired, by
rewriting its own state item alone; when it is a person's own key, that partition keeps the
memory (still reached, exported and erased by the person's other identifiers) and redirects the
identifier (`moved_to`). Nothing is copied, nothing is lost. The person's state names their
current phone and BSUID (`phone_key`, `bsuid_key`), so the common turn checks them for free.

Meta's rules, a BSUID being the strongest identifier:
- a message whose BSUID is new, from a phone whose person already has another BSUID, is someone
  else (a recycled number): a new, empty person, whom the phone reaches from now on; the
  previous owner keeps their memory, reached (and erased) by their BSUID;
- `user_changed_number`: the old phone is retired, the new one reaches the person (a memory the
  new phone held is its previous owner's: it stays theirs);
- `user_changed_user_id`: the new BSUID reaches the person whatever came first (the new id's
  messages in the same POST queue behind the change, memagent.providers.meta; a person the new id
  started meanwhile is merged: it is erased with the person).
whasp's phone never moves; a recycled whasp number is what retention (InactiveRetentionDays)
is for.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from memagent.lifecycle import carry_over
from memagent.memory import person_key
from memagent.observability import count, logger

if TYPE_CHECKING:
    from memagent.memory import Memory
    from memagent.providers import IdentityChanged
    from memagent.turn.crew import Crew


def _role(identifier: str) -> str:
    return "phone" if identifier.startswith("+") else "bsuid"


def person(
    crew: Crew,
    chat: str,
    aliases: tuple[str, ...] = (),
    *,
    link: bool = True,
    at: datetime | None = None,
) -> tuple[str, Memory]:
    """The person's key and memory, by any of their identifiers (`chat`, the BSUID when Meta
    gives one; `aliases`: the phone beside it). `link`: record where the identifiers belong now
    (what the person sends); False for what only concerns them (a status, a preference), which
    must not create records. `at`: when the event was created; an event older than an erasure
    under `chat` is left to the caller to refuse, and moves nothing."""
    store, agent_id = crew.store, crew.settings.agent_id
    key = person_key(agent_id, chat)
    pk, memory, own = store.reach(key)
    known = memory.state.last_seq or memory.state.erased_at or own.alias_of or own.moved_to
    # nobody yet: a stranger, or someone a stack before keyed keys remembers
    # (memagent.lifecycle.upgrade)
    legacy = link and not known and crew.settings.legacy_person_keys
    if legacy and carry_over(store, agent_id, (chat, *aliases)):
        pk, memory, own = store.reach(key)
    erased = memory.state.erased_at
    if not aliases or (erased and (at is None or at <= erased)):
        return pk, memory
    phone_key = person_key(agent_id, aliases[0])
    if memory.state.last_seq:  # a known BSUID: its phone is theirs (if it was not already)
        if link and memory.state.phone_key != phone_key:
            store.attach(phone_key, pk, own=store.state(phone_key), role="phone")
            if not memory.state.bsuid_key and pk == key:  # kept by versions before this one
                store.attach(key, pk, own=own, role="bsuid")
        return pk, memory
    known, phones_memory, phones_own = store.reach(phone_key)
    other = phones_memory.state.bsuid_key
    if phones_memory.state.last_seq and (not link or not other or other == key):
        if link:  # the person's first BSUID (Meta sent their phone alone until now)
            store.attach(key, known, own=own, role="bsuid")
            count("IdentitiesLinked")
            logger.info("new identifier linked to a known person", extra={"person": known})
        return known, phones_memory
    if link:  # someone new, reached by both identifiers from now on
        if phones_memory.state.last_seq:
            count("NumbersRecycled")
            logger.info("a new BSUID on a known phone: someone new", extra={"previous": known})
        store.attach(phone_key, pk, own=phones_own, role="phone")
        if pk == key:
            store.attach(key, pk, own=own, role="bsuid")
    return pk, memory


def reaches(crew: Crew, pk: str, address: str) -> bool:
    """Does `address` (a phone, a BSUID) still reach the person `pk` (one GetItem)? What
    the agent writes unprompted, asked for long ago, goes nowhere else: not to a recycled
    number's new owner, nor to a BSUID that moved."""
    return crew.store.reached_by(person_key(crew.settings.agent_id, address)) == pk


def change_identity(crew: Crew, event: IdentityChanged) -> str:
    """The person now goes by new identifiers: each reaches them from now on (a person one of
    them started meanwhile is merged); a new phone retires the old one."""
    logger.append_keys(event_id=event.event_id)
    store, agent_id = crew.store, crew.settings.agent_id
    found = [store.reach(person_key(agent_id, i)) for i in event.previous]
    pk, memory, _own = next((f for f in found if f[1].state.last_seq), found[0])
    erased = memory.state.erased_at
    if (erased and event.created_at <= erased) or not memory.state.last_seq:
        # a late change from before an erasure (or about nobody we know): linking would
        # recreate the erased person
        count("EventsSkippedAfterErasure")
        logger.info("identity change about no memory we hold; skipped")
        return "skipped"
    new_phone = any(_role(i) == "phone" for i in event.current)
    for identifier in event.previous:
        key = person_key(agent_id, identifier)
        own = store.state(key)
        if (
            new_phone
            and _role(identifier) == "phone"
            and (own.alias_of or own.moved_to or key) == pk
        ):
            store.retire(key, pk, own=own, role="phone")
    for identifier in event.current:
        key = person_key(agent_id, identifier)
        own = store.state(key)
        role = _role(identifier)
        # a memory under her new BSUID is hers, started meanwhile (merged: erased with her); a
        # memory under her new phone is its previous owner's (a recycled number): the phone
        # reaches her from now on, and that memory stays theirs, reached by their BSUID
        store.attach(key, pk, own=own, role=role, merged=role == "bsuid" and bool(own.last_seq))
    count("IdentitiesChanged")
    logger.info("identity change recorded", extra={"person": pk, "new": len(event.current)})
    return "identity_changed"
