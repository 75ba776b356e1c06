"""The provider's events other than a message: an opt-out, a reply's status, a marketing
preference, a replaced business number. (An identity change: memagent/turn/identity.py.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aws_lambda_powertools.metrics import MetricUnit, single_metric

from memagent.memory import agent_key, person_key
from memagent.observability import count, logger
from memagent.providers import parse_send_key
from memagent.turn.identity import person

if TYPE_CHECKING:
    from memagent.providers import ChatOptedOut, MarketingPreference, NumberReplaced, ReplyStatus
    from memagent.turn.crew import Crew


def opt_out(crew: Crew, event: ChatOptedOut) -> str:
    pk = person_key(crew.settings.agent_id, event.chat)
    logger.append_keys(event_id=event.event_id, person=pk)
    if crew.settings.opt_out_policy == "erase":
        state = crew.store.load(pk).state
        if state.last_inbound_at and state.last_inbound_at >= event.created_at:
            count("StaleOptOuts")  # they wrote again since: the opt-out no longer holds
            logger.info("opt-out event older than the last message; ignored")
            return "stale"
        crew._forget(pk, at=event.created_at)
        count("OptOuts")
        logger.info("opt-out event: person forgotten (policy erase)")
        return "forgotten"
    recorded = crew.store.record_opt_out(pk, event.created_at)
    count("OptOuts" if recorded else "StaleOptOuts")
    logger.info("opt-out event", extra={"recorded": recorded})
    return "opted_out" if recorded else "stale"


def reply_status(crew: Crew, event: ReplyStatus) -> str:
    """A provider status for a reply part: `sent` records the part (so a redelivery of the
    message does not send it again); `failed` is counted and kept on the ledger."""
    logger.append_keys(event_id=event.event_id)
    found = parse_send_key(event.key)
    if found is None:
        count("StatusesIgnored")
        return "ignored"
    event_id, part = found
    pk, _memory = person(crew, event.chat, event.aliases, link=False)
    if event.status == "failed":
        with single_metric(name="RepliesFailed", unit=MetricUnit.Count, value=1) as metric:
            metric.add_dimension(name="code", value=str(event.error_code))
        logger.error("reply failed after sending", extra={"code": event.error_code})
        crew.store.record_part(pk, event_id, part, f"failed:{event.error_code}")
        return "reply_failed"
    recorded = crew.store.record_part(pk, event_id, part, event.message_id)
    logger.info("reply status recorded", extra={"status": event.status, "known": recorded})
    return "status_recorded" if recorded else "status_unknown"


def marketing_preference(crew: Crew, event: MarketingPreference) -> str:
    """Record a marketing stop/resume on a person we know (nobody else gets a record).
    It concerns marketing templates only: replies to what the person writes go on."""
    logger.append_keys(event_id=event.event_id)
    pk, memory = person(crew, event.chat, event.aliases, link=False)
    if not memory.state.last_seq:
        return "unknown_person"
    recorded = crew.store.record_marketing(pk, event.value, event.created_at)
    count("MarketingPreferencesRecorded" if recorded else "StaleMarketingPreferences")
    logger.info("marketing preference", extra={"value": event.value, "recorded": recorded})
    return "marketing_recorded" if recorded else "stale"


def replace_number(crew: Crew, event: NumberReplaced) -> str:
    logger.append_keys(event_id=event.event_id)
    crew.store.record_number(
        agent_key(crew.settings.agent_id), old=event.old_number, new=event.new_number
    )
    count("NumbersReplaced")
    logger.info("business number replaced")
    return "number_replaced"
