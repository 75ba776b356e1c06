"""Who an event is from: the person's key and memory, by any of their identifiers.

A person is keyed by their primary identifier (`person_key`). When a message brings a new
identifier beside a known one (Meta: a BSUID beside the phone), or the provider reports a
change, the new identifier's key is linked to the person's (`alias_of` on its STATE item), so
the person keeps one memory; the memory itself is still read with one Query (a linked
identifier costs one more, small Query to follow the link).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from memagent.observability import count, logger
from memagent.person import person_key

if TYPE_CHECKING:
    from memagent.crew import Crew
    from memagent.memory import Memory
    from memagent.provider import IdentityChanged


def person(
    crew: Crew,
    chat: str,
    aliases: tuple[str, ...] = (),
    *,
    link: bool = True,
    at: datetime | None = None,
) -> tuple[str, Memory]:
    """The person's key and memory, by any of their identifiers. One Query when the
    identifier is the person's own key; one more when it is linked to another. `link`:
    record new identifiers' links (what the person sends); False for what only concerns
    them (a status, a preference), which must not create records. `at`: when the event
    was created; after an erasure, only an event written after it links identifiers
    again (so erasure and export by any of them find the new memory)."""
    store, agent_id = crew.store, crew.settings.agent_id
    pk = person_key(agent_id, chat)
    memory = store.load(pk)
    if memory.state.alias_of:
        return memory.state.alias_of, store.load(memory.state.alias_of)
    erased = memory.state.erased_at
    if memory.state.last_seq or (erased and (at is None or at <= erased)) or not aliases:
        return pk, memory
    # an identifier with no memory yet: is this someone we know by another one?
    others = [person_key(agent_id, alias) for alias in aliases]
    for other in others:
        if other == pk:
            continue
        known = store.load(other)
        target = known.state.alias_of or (other if known.state.last_seq else None)
        if target and not link:
            return target, known if target == other else store.load(target)
        if target and store.link(pk, target):
            count("IdentitiesLinked")
            logger.info("new identifier linked to a known person", extra={"person": target})
            return target, known if target == other else store.load(target)
    for other in others:  # someone new: any of their identifiers finds this memory
        if other != pk and link:
            store.link(other, pk)
    return pk, memory


def change_identity(crew: Crew, event: IdentityChanged) -> str:
    """The person now goes by new identifiers: link each to the key of their memory."""
    logger.append_keys(event_id=event.event_id)
    pk, memory = person(crew, event.previous[0], event.previous[1:], at=event.created_at)
    erased = memory.state.erased_at
    if erased and event.created_at <= erased:
        # a late change from before an erasure: linking would recreate the erased person
        count("EventsSkippedAfterErasure")
        logger.info("identity change predates an erasure; skipped")
        return "skipped"
    for identifier in event.current:
        crew.store.link(person_key(crew.settings.agent_id, identifier), pk)
    count("IdentitiesChanged")
    logger.info("identity change recorded", extra={"person": pk, "new": len(event.current)})
    return "identity_changed"
