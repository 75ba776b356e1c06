"""What every function that reads or writes memory needs (MemorySettings): the table, the
compaction threshold, retention, the facts' bounds, the person key. Read at cold start by the
functions' own settings classes (memagent.<wing>.settings), which extend it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self

from memagent.environment import Environment, agent_id
from memagent.memory.clock import is_zone
from memagent.memory.person import read_person_key


def _time_zone(read: Environment) -> str:
    name = read.text("TIME_ZONE", "UTC")
    if name.upper() != "UTC" and not is_zone(name):
        read.problems.append(f"TIME_ZONE: {name!r} is not a time zone (e.g. Europe/London)")
    return name


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """What every function that reads or writes memory needs."""

    agent_id: str
    table_name: str
    compact_threshold: int = 40
    compact_keep: int = 20
    ledger_ttl_days: int = 30
    # a person silent this long is forgotten (TTL on their state item); 0 keeps them until erased
    inactive_retention_days: int = 365
    # memory a stack before keyed person keys kept is looked up (and moved:
    # memagent.lifecycle.upgrade)
    legacy_person_keys: bool = True
    max_facts: int = 200
    max_fact_chars: int = 160
    archive_bucket: str | None = None
    media_bucket: str | None = None  # voice notes and photos kept between attempts
    # the compactor works on keys it is given (the stream's), never derives one
    reads_person_keys: ClassVar[bool] = True
    # a chat handed to a human goes back to the agent after this long without an operator reply
    handoff_timeout_hours: int = 24
    operator_event_bus: str | None = None  # EventBridge bus for handoff notifications
    # the agent's zone (IANA name): the person's own when their phone's country has one zone
    time_zone: str = "UTC"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        read = Environment(env)
        settings = cls(**cls._read(read))
        read.check()
        return settings

    @classmethod
    def _read(cls, read: Environment) -> dict:
        threshold = read.integer("COMPACT_THRESHOLD", 40, minimum=2)
        keep = read.integer("COMPACT_KEEP", 20, minimum=1)
        if keep >= threshold:
            read.problems.append("COMPACT_KEEP: must be smaller than COMPACT_THRESHOLD")
        if cls.reads_person_keys:
            read_person_key(read)  # checked here, read by memagent.memory.person on first use
        return {
            "agent_id": agent_id(read),
            "table_name": read.text("TABLE_NAME"),
            "compact_threshold": threshold,
            "compact_keep": keep,
            "ledger_ttl_days": read.integer("LEDGER_TTL_DAYS", 30, minimum=7),
            "inactive_retention_days": read.integer("INACTIVE_RETENTION_DAYS", 365, minimum=0),
            "legacy_person_keys": read.flag("LEGACY_PERSON_KEYS", True),
            "max_facts": read.integer("MAX_FACTS", 200, minimum=1),
            "max_fact_chars": read.integer("MAX_FACT_CHARS", 160, minimum=20),
            "archive_bucket": read.optional("ARCHIVE_BUCKET"),
            "media_bucket": read.optional("MEDIA_BUCKET"),
            "handoff_timeout_hours": read.integer(
                "HANDOFF_TIMEOUT_HOURS", 24, minimum=1, maximum=24 * 30
            ),
            "operator_event_bus": read.optional("OPERATOR_EVENT_BUS"),
            "time_zone": _time_zone(read),
        }
