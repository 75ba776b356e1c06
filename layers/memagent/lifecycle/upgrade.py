"""Memory a stack kept before keyed person keys (memagent.memory.person), carried over to them.

Such a stack keyed a person by a bare SHA-256 of (agent, identifier), which cannot be reversed:
the memory can only move once the identifier is at hand again. So a turn whose person holds
nothing under their keyed key (the rare path: their first message since the upgrade, or a
stranger's first) looks up the old keys of the identifiers it has, in one request, and moves a
memory found there under the keyed key of the identifier that reached it (`store.move`:
crash-safe, finished by a redelivery; the dedupe ledger moves with it). The admin API's export
and forget by phone or BSUID look at the old key too (memagent.lifecycle.rights). LEGACY_PERSON_KEYS
turns the lookup off once nobody is left to move (InactiveRetentionDays after the upgrade).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memagent.memory import legacy_key, person_key
from memagent.observability import count, logger

if TYPE_CHECKING:
    from memagent.store import MemoryStore


def legacy_person(state: dict) -> str | None:
    """The old key holding a memory, from an old key's state: its own, or the one it links to."""
    if "last_seq" in state or "erased_at" in state:
        return state["pk"]
    return state.get("alias_of")


def carry_over(store: MemoryStore, agent: str, identifiers: tuple[str, ...]) -> bool:
    """Move the memory an old key of one of `identifiers` holds under that identifier's keyed
    key; returns whether a memory moved."""
    old = {legacy_key(agent, i): i for i in identifiers}
    states = store.states(list(old))
    for key, identifier in old.items():
        if key in states and (source := legacy_person(states[key])):
            if identifier != identifiers[0] and {source, *store.links(source)} - set(old):
                # reached by the phone beside a BSUID, and the memory names an identifier not
                # at hand (another BSUID): the previous owner of a recycled number. It waits
                # for its own BSUID; this newcomer is a stranger (memagent.turn.identity's rule).
                count("LegacyMemoriesLeft")
                logger.info("an old key's memory names someone else; not carried over")
                return False
            target = person_key(agent, identifier)
            moved = store.move(source, target, via=key)
            if moved:
                count("LegacyPeopleMoved")
                count("LegacyItemsMoved", moved)
                extra = {"person": target, "items": moved}
                logger.info("memory moved from a key before keyed keys", extra=extra)
            return bool(moved)
    return False
