"""The admin API's settings (AdminSettings): memory, and the provider for the operator's
replies."""

from __future__ import annotations

import re
from dataclasses import dataclass

from memagent.aws import DEAD_LETTER_ARN
from memagent.environment import Environment, declare, setting
from memagent.memory import FOLLOW_UP_MAX_PENDING, RECENT_CONVERSATIONS, MemorySettings
from memagent.providers import ProviderSettings

WABA_ID = re.compile(r"[0-9]{5,20}\Z")


@dataclass(frozen=True, kw_only=True)
class AdminSettings(MemorySettings, ProviderSettings):
    """The admin API: memory, and the provider for the operator's replies. The template always
    sets PROVIDER; without it the admin API sends nothing (`sends` is false: an operator reply
    answers 503 saying so) and needs no provider settings."""

    sends: bool = True
    # follow-ups: an operator schedules them as the model does, and a cancel deletes the schedule
    follow_up_role_arn: str | None = setting("FOLLOW_UP_ROLE_ARN", None, custom=True)
    follow_up_queue_url: str | None = setting("FOLLOW_UP_QUEUE_URL", None, custom=True)
    follow_up_dead_letter_arn: str | None = setting("FOLLOW_UP_DEAD_LETTER_ARN", None, custom=True)
    follow_up_max_pending: int = declare(FOLLOW_UP_MAX_PENDING)
    # OperatorConsole=true: the page's sign-in (the user pool's client and managed login)
    console_client_id: str | None = setting("CONSOLE_CLIENT_ID", None)
    console_login_url: str | None = setting("CONSOLE_LOGIN_URL", None)
    recent_conversations: bool = declare(RECENT_CONVERSATIONS)  # GET /conversations
    # Meta: the WhatsApp Business Account whose approved templates operators may send (its
    # template list kept this long: memagent/operator/templates.py)
    meta_waba_id: str | None = setting("META_WABA_ID", None, parameter="MetaWabaId", custom=True)
    template_cache_seconds: int = setting("TEMPLATE_CACHE_SECONDS", 300, minimum=0, maximum=86400)
    # the one-tap rating question after an operator's hand-back (memagent/turn/csat.py): off
    # unless the business turns it on (a message it did not write itself); the hand-back's
    # ?csat= asks, or not, either way. The question goes through the event queue.
    csat_after_handback: bool = setting("CSAT_AFTER_HANDBACK", False, parameter="CsatAfterHandback")
    csat_queue_url: str | None = setting("CSAT_QUEUE_URL", None)

    @classmethod
    def _read(cls, read: Environment) -> dict:
        group: dict = {}
        if read.optional("META_WABA_ID"):
            hint = "a WhatsApp Business Account id (digits)"
            group["meta_waba_id"] = read.matching("META_WABA_ID", WABA_ID, hint)
        if read.optional("FOLLOW_UP_SCHEDULE_GROUP"):
            group.update(
                follow_up_role_arn=read.text("FOLLOW_UP_ROLE_ARN"),
                follow_up_queue_url=read.text("FOLLOW_UP_QUEUE_URL"),
                follow_up_dead_letter_arn=read.matching(
                    "FOLLOW_UP_DEAD_LETTER_ARN", DEAD_LETTER_ARN, "a standard SQS queue's ARN"
                ),
                follow_up_max_pending=read.value(FOLLOW_UP_MAX_PENDING),
            )
        if read.optional("PROVIDER") is None:
            return {**super()._read(read), **group, "sends": False}
        return {**super()._read(read), **group, **cls._provider(read)}
