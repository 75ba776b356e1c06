"""The admin API's settings (AdminSettings): memory, and the provider for the operator's
replies."""

from __future__ import annotations

from dataclasses import dataclass

from memagent.environment import Environment
from memagent.memory import MemorySettings
from memagent.providers import ProviderSettings


@dataclass(frozen=True, kw_only=True)
class AdminSettings(MemorySettings, ProviderSettings):
    """The admin API: memory, and the provider for the operator's replies. The template always
    sets PROVIDER; without it the admin API sends nothing (`sends` is false: an operator reply
    answers 503 saying so) and needs no provider settings."""

    sends: bool = True
    # follow-ups' schedule group: an operator's cancel deletes the schedule too
    follow_up_group: str | None = None

    @classmethod
    def _read(cls, read: Environment) -> dict:
        group = {"follow_up_group": read.optional("FOLLOW_UP_SCHEDULE_GROUP")}
        if read.optional("PROVIDER") is None:
            return {**super()._read(read), **group, "sends": False}
        return {**super()._read(read), **group, **cls._provider(read)}
