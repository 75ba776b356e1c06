"""What every function that reads or writes memory needs (MemorySettings): the table, the
compaction threshold, retention, the facts' bounds, the person key. Read at cold start by the
functions' own settings classes (memagent.<wing>.settings), which extend it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self

from memagent.environment import Environment, Setting, agent_id, setting, table_of
from memagent.memory.clock import is_zone
from memagent.memory.person import read_person_key

# Follow-ups: the consumer's model and the admin API's operators schedule them alike
FOLLOW_UP_MAX_PENDING = Setting(
    "FOLLOW_UP_MAX_PENDING",
    3,
    kind="integer",
    minimum=1,
    maximum=20,
    parameter="FollowUpMaxPending",
    custom=True,  # read with the schedule group only
)
# OperatorConsole=true: each message marks its person recent (RecentIndex), which the admin
# API's GET /conversations lists
RECENT_CONVERSATIONS = Setting("RECENT_CONVERSATIONS", False, kind="flag")


def _time_zone(read: Environment, declared: Setting) -> str:
    name = read.value(declared)
    if name.upper() != "UTC" and not is_zone(name):
        read.problems.append(f"TIME_ZONE: {name!r} is not a time zone (e.g. Europe/London)")
    return name


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """What every function that reads or writes memory needs."""

    agent_id: str = setting("AGENT_ID", parameter="AgentId", custom=True)
    table_name: str = setting("TABLE_NAME")
    # checked against each other: custom
    compact_threshold: int = setting("COMPACT_THRESHOLD", 40, minimum=2, custom=True)
    compact_keep: int = setting("COMPACT_KEEP", 20, minimum=1, custom=True)
    ledger_ttl_days: int = setting("LEDGER_TTL_DAYS", 30, minimum=7)
    # a person silent this long is forgotten (TTL on their state item); 0 keeps them until erased
    inactive_retention_days: int = setting(
        "INACTIVE_RETENTION_DAYS", 365, minimum=0, parameter="InactiveRetentionDays"
    )
    # memory a stack before keyed person keys kept is looked up (and moved:
    # memagent.lifecycle.upgrade)
    legacy_person_keys: bool = setting("LEGACY_PERSON_KEYS", True, parameter="LegacyPersonKeys")
    max_facts: int = setting("MAX_FACTS", 200, minimum=1)
    max_fact_chars: int = setting("MAX_FACT_CHARS", 160, minimum=20)
    archive_bucket: str | None = setting("ARCHIVE_BUCKET", None)
    # voice notes and photos kept between attempts
    media_bucket: str | None = setting("MEDIA_BUCKET", None)
    # the compactor works on keys it is given (the stream's), never derives one
    reads_person_keys: ClassVar[bool] = True
    # a chat handed to a human goes back to the agent after this long without an operator reply
    handoff_timeout_hours: int = setting(
        "HANDOFF_TIMEOUT_HOURS", 24, minimum=1, maximum=24 * 30, parameter="HandoffTimeoutHours"
    )
    # EventBridge bus for handoff notifications
    operator_event_bus: str | None = setting("OPERATOR_EVENT_BUS", None)
    # the agent's zone (IANA name): the person's own when their phone's country has one zone
    time_zone: str = setting("TIME_ZONE", "UTC", parameter="TimeZone", custom=True)
    # FollowUps=true: the stack's schedule group; forgetting a person (an operator's erasure, the
    # compactor's expiry) deletes their follow-ups' schedules in it
    follow_up_group: str | None = setting("FOLLOW_UP_SCHEDULE_GROUP", None)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        read = Environment(env)
        settings = cls(**read.values(cls), **cls._read(read))
        read.check()
        return settings

    @classmethod
    def _read(cls, read: Environment) -> dict:
        """The custom reads (Setting.custom); Environment.values reads the others."""
        table = table_of(cls)
        threshold = read.value(table["compact_threshold"])
        keep = read.value(table["compact_keep"])
        if keep >= threshold:
            read.problems.append("COMPACT_KEEP: must be smaller than COMPACT_THRESHOLD")
        if cls.reads_person_keys:
            read_person_key(read)  # checked here, read by memagent.memory.person on first use
        return {
            "agent_id": agent_id(read),
            "compact_threshold": threshold,
            "compact_keep": keep,
            "time_zone": _time_zone(read, table["time_zone"]),
        }
