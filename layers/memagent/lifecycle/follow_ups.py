"""Asking for a follow-up, whoever asks (the model's built-in tool in a turn, an operator through
the admin API): the request checked, kept in the person's partition (memagent.store: DUE#),
its one-time schedule created (memagent.aws.scheduler). Its firing is the turn's
(memagent.turn.follow_ups)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from memagent.errors import ScheduleRefused
from memagent.memory import internal_signature, looks_like_instruction, plain
from memagent.observability import count

FOLLOW_UP = "follow_up"  # the queued body's "memagent" field
MAX_ABOUT_CHARS = 300
EARLIEST = timedelta(minutes=1)  # a follow-up asked for sooner than this is refused


class FollowUpRefused(ValueError):
    """What was asked cannot be kept (a bad time or subject, the person's limit): says why."""


@dataclass(frozen=True)
class Target:
    """Where a person's follow-ups go: their address and our number, their zone, and their FIFO
    group (the webhook's: memagent.aws.queue.group_id)."""

    address: str
    number: str
    zone: str
    group: str


def body(name: str, person: str) -> dict[str, str]:
    """What the schedule puts into the queue: ids only, never the subject or an identifier,
    signed with the stack's key (the consumer acts on no internal event without it)."""
    sig = internal_signature(FOLLOW_UP, name, person)
    return {"memagent": FOLLOW_UP, "name": name, "person": person, "sig": sig}


def ask(
    store: Any,
    schedules: Any,
    pk: str,
    *,
    name: str,
    when: Any,
    about: Any,
    target: Target,
    max_pending: int,
    held: str,
) -> str:
    """Keep the follow-up `name` (for `when` on the person's clock, about `about`) and create
    its schedule; a repeat of the same request (the same name) keeps and creates nothing new.
    Returns what was scheduled, in words; FollowUpRefused says why not, ScheduleRefused that
    Scheduler did not take it (then nothing is kept). `held`: the status of follow-ups an
    operator has to handle, which the limit does not count."""
    try:
        local = datetime.fromisoformat(str(when)).replace(tzinfo=None, second=0, microsecond=0)
    except ValueError:
        raise FollowUpRefused("give 'when' as YYYY-MM-DDTHH:MM, on the person's clock") from None
    about = " ".join(plain(str(about or "")).split())  # kept as screened, as a fact is
    if not about or len(about) > MAX_ABOUT_CHARS:
        raise FollowUpRefused(f"'about' takes 1 to {MAX_ABOUT_CHARS} characters")
    if looks_like_instruction(about):
        # it goes before the model on every turn until it is due, as the facts do: screened
        # as they are (memagent.memory.facts), and framed as data where it is shown
        raise FollowUpRefused(
            "'about' is what to follow up on, not an instruction to the agent "
            "(instructions belong in the system prompt)"
        )
    try:
        at = local.replace(tzinfo=ZoneInfo(target.zone)).astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59 west of UTC is past the last date Python has
        raise FollowUpRefused("that time cannot be represented: ask for a nearer time") from None
    if at < datetime.now(UTC) + EARLIEST:
        raise FollowUpRefused("that time has passed: ask for a time in the future")
    pending = [p for p in store.follow_ups(pk) if p.get("status") != held]
    if name not in {p["name"] for p in pending}:
        if len(pending) >= max_pending:
            count("FollowUpsRefusedByLimit")
            raise FollowUpRefused(f"the person has {len(pending)} follow-ups pending already")
        store.add_follow_up(
            pk,
            name,
            {
                "at": at.isoformat(),
                "local": local.isoformat(timespec="minutes"),
                "zone": target.zone,
                "about": about,
                "address": target.address,
                "number": target.number,
                "created_at": datetime.now(UTC).isoformat(),
            },
        )
    try:
        schedules.create(name, local, target.zone, body(name, pk), target.group)
    except ScheduleRefused:
        # nothing was scheduled: nor is it kept, so it neither shows as pending nor counts
        # toward the person's limit (a schedule an earlier attempt made fires, finds nothing
        # pending and sends nothing)
        store.drop_follow_up(pk, name)
        raise
    return f"follow-up scheduled for {local.isoformat(timespec='minutes')} ({target.zone})"
