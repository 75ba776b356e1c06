"""A person's rights over what we keep: erasure (GDPR art. 17) and access/portability (art. 15,
20). Used by the admin API, the command-line tool, the chat keywords and the opt-out policy.

forget() first records a content-free erasure mark (the state item's `erased_at`), so a late
redelivery of anything the person sent before the erasure is never stored again; then it deletes
every item of the person's partition (messages, summary, facts, dedupe ledger), archived
transcripts and kept media, and strips the state item down to the mark (with the day's budget
counters, which hold no content: an erasure is no new day's budget). It is idempotent: a
second run, or a run after a crash half-way, finishes the job and removes nothing that is
already gone. See docs/privacy.md for the copies that outlive it (stream records, backups,
logs, queues).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.errors import ScheduleRefused, UnknownPerson
from memagent.lifecycle.audit_trail import ERASE, audit
from memagent.lifecycle.upgrade import legacy_person
from memagent.memory import legacy_key, person_key
from memagent.observability import logger, metrics
from memagent.store import (
    ALIAS,
    DUE,
    EVT,
    FACT,
    KEPT_ON_ERASURE,
    MSG,
    STATE,
    SUMMARY,
    follow_up_view,
    from_iso,
)

if TYPE_CHECKING:
    from memagent.memory import Memory
    from memagent.store import MemoryStore


_MAX_PASSES = 5


@dataclass(frozen=True)
class Elsewhere:
    """What a person has outside the memory table, each None where the stack keeps none:
    archived transcripts (memagent.aws.TranscriptArchive), media files kept for a retry
    (KeptMedia: voice notes, photos) and their follow-ups' schedules (FollowUpSchedules).
    Erasure, expiry and export reach each of them."""

    archive: Any | None = None
    media: Any | None = None
    schedules: Any | None = None


NOWHERE = Elsewhere()  # a stack, or a test, that keeps nothing outside the table


@dataclass(frozen=True)
class Receipt:
    """What forget() removed, and when. Holds no content."""

    person: str
    at: datetime
    removed: int
    by_kind: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "person": self.person,
            "erased_at": self.at.isoformat(),
            "removed": self.removed,
            "by_kind": self.by_kind,
        }


def _kind(sk: str) -> str:
    if sk == SUMMARY:
        return "summary"
    for prefix, kind in ((MSG, "messages"), (FACT, "facts"), (EVT, "ledger"), (ALIAS, "links")):
        if sk.startswith(prefix):
            return kind
    return "other"


def resolve(store: MemoryStore, agent: str, identifier: str) -> str:
    """The key of the person an identifier (a phone or a Meta BSUID) reaches now."""
    return store.reach(person_key(agent, identifier))[0]


def legacy(store: MemoryStore, agent: str, identifier: str) -> str | None:
    """The key of a memory an identifier's key before keyed keys still holds
    (memagent.lifecycle.upgrade). A phone's only when no other identifier reaches it (a BSUID's may
    be a recycled number's previous owner's: that memory is theirs, exported and erased by their
    BSUID)."""
    key = legacy_key(agent, identifier)
    found = next((legacy_person(s) for s in store.states([key]).values()), None)
    if identifier.startswith("+"):
        return None if found != key or store.links(found) else found
    return found


def forget(
    store: MemoryStore,
    agent: str,
    phone: str,
    *,
    at: datetime | None = None,
    elsewhere: Elsewhere = NOWHERE,
    legacy_keys: bool = False,
) -> Receipt:
    """Forget a person by any of their identifiers (phone or BSUID), with what they have
    `elsewhere`; `legacy_keys`: and the memory its key before keyed keys holds
    (LEGACY_PERSON_KEYS)."""
    pk = resolve(store, agent, phone)
    receipt = forget_key(store, pk, at=at, elsewhere=elsewhere)
    old = legacy(store, agent, phone) if legacy_keys else None
    if old is None:
        return receipt
    more = forget_key(store, old, at=receipt.at, elsewhere=elsewhere)
    kinds = {**receipt.by_kind, **more.by_kind}
    by_kind = {k: receipt.by_kind.get(k, 0) + more.by_kind.get(k, 0) for k in kinds}
    return Receipt(receipt.person, receipt.at, receipt.removed + more.removed, by_kind)


def _after(when: Any, mark: datetime) -> bool:
    written = from_iso(when)
    return written is not None and written > mark


def _renewed(state: dict[str, Any], mark: datetime) -> bool:
    """Is this state item a new conversation's (the person wrote after the mark)? The TTL
    deleted the expired one, so it holds that conversation's last_seq, awaiting, handoff,
    budget counters and retention: kept as it is. Any other (the mark alone, the links the
    turn at hand made, which it makes again) is reduced to the mark."""
    return _after(state.get("last_inbound_at"), mark)


def _written_since(items: list[dict[str, Any]], mark: datetime) -> set[str]:
    """The sort keys of the items written after `mark`, once the TTL deleted the state item.
    The person's first message written since begins a new conversation: every turn and ledger
    entry from its seq on is newer (a reply's own time would not do: the reply to an old
    message may be stored late). Facts and the summary carry their own times. A link (ALIAS#)
    has none: it is the new conversation's when that conversation's state item names it
    (`phone_key`, `bsuid_key`), the expired memory's otherwise. A follow-up (DUE#) is the new
    conversation's when it was asked for after that first message (its `at` is when it is
    due; one asked for after the mark but before it, as an operator may, is the old memory's)."""
    state = next((item for item in items if item["sk"] == STATE), {})
    named = {state.get("phone_key"), state.get("bsuid_key")} - {None}
    if not _renewed(state, mark):
        named = set()
    first, began = min(
        (
            (int(i["seq"]), from_iso(i.get("at")))
            for i in items
            if i["sk"].startswith(MSG) and i.get("role") == "user" and _after(i.get("at"), mark)
        ),
        default=(None, None),
    )

    def newer(item: dict[str, Any]) -> bool:
        sk = item["sk"]
        if sk.startswith((MSG, EVT)):
            seq = item.get("seq", item.get("user_seq", item.get("reply_seq")))
            return first is not None and seq is not None and int(seq) >= first
        if sk.startswith(ALIAS):
            return sk.removeprefix(ALIAS) in named
        if sk.startswith(DUE):
            asked = from_iso(item.get("created_at"))
            return began is not None and asked is not None and asked >= began
        return sk != STATE and _after(item.get("at"), mark)

    return {item["sk"] for item in items if newer(item)}


def forget_key(
    store: MemoryStore,
    pk: str,
    *,
    at: datetime | None = None,
    elsewhere: Elsewhere = NOWHERE,
    keep_later: bool = False,
    files_before: datetime | None = None,
) -> Receipt:
    """Erase one partition, and what it has `elsewhere`; `keep_later`: only what was written
    up to the mark (`at`), keeping what came after it, the state item and the links it
    names, and files kept or archived up to `files_before` (retention: see expire). The
    schedules of the follow-ups erased are deleted too, so nothing of the person is left in
    Scheduler (a follow-up asked for after the mark, by a new conversation, stays)."""
    schedules = elsewhere.schedules
    at = store.mark_erased(pk, at or datetime.now(UTC))
    by_kind: dict[str, int] = {}
    aliases: dict[str, bool] = {}  # the keys of identifiers that reach the person: merged?
    # a turn in flight may commit between our read and our deletes: read again until only the
    # mark is left (its writes are refused once they see the mark, so this ends quickly)
    for _ in range(_MAX_PASSES):
        items = store.everything(pk)
        kept = {STATE} | (_written_since(items, at) if keep_later else set())
        doomed_items = [item for item in items if item["sk"] not in kept]
        doomed = [item["sk"] for item in doomed_items]
        aliases.update(
            {
                i["sk"].removeprefix(ALIAS): bool(i.get("merged"))
                for i in items
                if i["sk"].startswith(ALIAS)
            }
        )
        state = next((item for item in items if item["sk"] == STATE), {})
        # the mark and moved_to stay (it routes the partition's own identifier to whoever has
        # it now): memagent.memory.types.Kind
        content = [key for key in state if key not in KEPT_ON_ERASURE]
        if keep_later and _renewed(state, at):
            content = []  # the new conversation's state stays as it is
        if not doomed and not content:
            break
        if schedules is not None:  # before their items: a crash between leaves them to retry
            for item in doomed_items:
                if item["sk"].startswith(DUE):
                    # one Scheduler would not delete (counted and logged there) fires, finds
                    # nothing pending and sends nothing: the erasure goes on
                    with contextlib.suppress(ScheduleRefused):
                        schedules.cancel(item["name"])
        for sk in doomed:
            by_kind[_kind(sk)] = by_kind.get(_kind(sk), 0) + 1
        if keep_later:  # the new conversation may be writing the same keys meanwhile
            store.delete_items_as_read(pk, doomed_items)
        else:  # the mark refuses every write from now on
            store.delete_items(pk, doomed)
        if content:
            by_kind["state"] = 1  # with the summary, where an older version kept it there
            store.reduce_state_to_mark(pk, at)
    for sk in kept:  # keep_later: a link the new conversation made, maybe meanwhile, is its own
        aliases.pop(sk.removeprefix(ALIAS), None)
    if identifiers := _forget_identifiers(store, pk, aliases, at, elsewhere):
        by_kind["identifiers"] = identifiers
    before = (files_before or at) if keep_later else None
    if elsewhere.archive is not None:
        by_kind["archived"] = elsewhere.archive.delete_person(pk, before=before)
    if elsewhere.media is not None:
        by_kind["media"] = elsewhere.media.delete_person(pk, before=before)
    removed = sum(by_kind.values())
    metrics.add_metric(name="PeopleForgotten", unit=MetricUnit.Count, value=1)
    logger.info("person forgotten", extra={"person": pk, "removed": removed, **by_kind})
    return Receipt(person=pk, at=at, removed=removed, by_kind=by_kind)


def _forget_identifiers(
    store: MemoryStore,
    pk: str,
    aliases: dict[str, bool],
    at: datetime,
    elsewhere: Elsewhere,
) -> int:
    """The erased person's other identifiers (`aliases`: key -> merged?), each left with only
    the erasure's mark, or taken from them; how many."""
    count = 0
    for alias, merged in sorted(aliases.items()):
        own = store.state(alias)
        if own.moved_to == pk and not merged:
            # another person's own key, whose identifier had come to this person: it is
            # retired to a new key holding only this erasure's mark; that memory stays theirs
            store.retire(alias, pk, own=own, mark=at)
        elif own.alias_of in (pk, None) or own.moved_to == pk:
            # the person's other identifiers: each keeps only its own erasure mark, so a late
            # redelivery under any of them is refused too; and files kept under them go as well
            forget_key(store, alias, at=at, elsewhere=elsewhere)
        else:
            continue  # it reaches someone else now
        count += 1
    return count


# Who deletes an expired item: DynamoDB's TTL process, as its stream records name it
TTL_PRINCIPAL = "dynamodb.amazonaws.com"


@dataclass(frozen=True)
class Expiry:
    """The TTL's deletion of a person's state item (they were silent for InactiveRetentionDays)."""

    person: str
    at: datetime | None  # when it was deleted (the stream record's ApproximateCreationDateTime)


def expired_by_ttl(record: dict[str, Any]) -> Expiry | None:
    """The expiry a stream record is, if it is the TTL's deletion of a person's state item."""
    identity = record.get("userIdentity") or {}
    image = record.get("dynamodb") or {}
    keys = image.get("Keys") or {}
    sk, pk = (keys.get(name, {}).get("S") for name in ("sk", "pk"))
    ttl = identity.get("type") == "Service" and identity.get("principalId") == TTL_PRINCIPAL
    if not (ttl and record.get("eventName") == "REMOVE" and sk == STATE and pk):
        return None
    deleted = image.get("ApproximateCreationDateTime")
    return Expiry(pk, datetime.fromtimestamp(float(deleted), UTC) if deleted else None)


def left_by_ttl(memory: Memory, now: datetime) -> datetime | None:
    """The newest time in what a person's memory holds when their retention has ended and the
    memory is not erased yet: the TTL deleted their state item and the deletion's stream record
    has yet to erase the rest, or DynamoDB has not deleted it yet (it deletes expired items
    "typically within two days"; until then they "still show up in reads"); None for any other
    memory. (Every turn writes the state item: turns, facts or a summary without one are an
    expiry's.)"""
    state = memory.state
    passed = state.retention_passed(now)
    if not passed and (state.last_seq or state.erased_at or state.alias_of or state.moved_to):
        return None
    times = [t.at for t in memory.turns] + [f.at for f in memory.facts]
    if memory.summary is not None and memory.summary.at is not None:
        times.append(memory.summary.at)
    return max(times, default=state.expires_at if passed else None)


def left_half_done(memory: Memory) -> datetime | None:
    """The mark of an erasure or expiry that stopped between its mark and its deletes (a
    timeout, a throttle, a crash), while memory still holds something written on or before
    it; None for any other memory. (Whatever was written after a mark is the person's own.)"""
    mark = memory.state.erased_at
    if mark is None:
        return None
    summary = memory.summary
    if (
        any(turn.at <= mark for turn in memory.turns)
        or any(fact.at <= mark for fact in memory.facts)
        or (summary is not None and (summary.at is None or summary.at <= mark))
    ):
        return mark
    return None


def _held_until(items: list[dict[str, Any]], up_to: datetime | None) -> datetime | None:
    """The newest time in what a person's partition holds (a message, a reply, a fact, the
    summary), of those written up to `up_to`."""
    times = (
        from_iso(item.get("at"))
        for item in items
        if item["sk"] == SUMMARY or item["sk"].startswith((MSG, FACT))
    )
    held = [t for t in times if t is not None and (up_to is None or t <= up_to)]
    return max(held, default=None)


def expire(
    store: MemoryStore,
    pk: str,
    *,
    deleted_at: datetime | None = None,
    elsewhere: Elsewhere = NOWHERE,
) -> Receipt:
    """Forget a person who has been silent for the retention period: the same erasure, and the
    same audit line, as an operator's; the caller is the TTL process. Their follow-ups go too,
    with their schedules, however far ahead they were due.

    `deleted_at`: when the TTL deleted their state item. The erasure mark is not that time but
    the newest one the expired memory holds (its newest message, reply, fact or summary, up to
    the deletion): what it had handled had all happened by then, so a redelivery of any of it
    is refused (memagent.turn.redelivery.skipped), while a message written after it is the person
    writing to us, even one written before the deletion (queued or in flight when the TTL
    fired): it is answered as a new conversation, without the old memory. Only what was
    written up to the mark goes (kept and archived files: up to the deletion); what the person
    wrote after it is kept, with the state item its turn wrote. A mark already there stands
    (this record handled before, or the turn ran the expiry first, or an erasure since): a
    second delivery finds nothing left to erase, and never what was answered since.

    A state item still there whose retention has passed (`expires_at`; DynamoDB deletes it
    later, or the turn came first) holds only the expired memory: every message since would
    have moved its `expires_at` on. Its mark is the newest time the partition holds, over any
    older mark (an erasure before that memory began), and its files go up to now (a fold may
    have archived a transcript after the newest of them)."""
    items = store.everything(pk)
    state = next((item for item in items if item["sk"] == STATE), {})
    now = datetime.now(UTC)
    files_before = deleted_at or now
    mark: datetime | None
    if state.get("expires_at") is not None and int(state["expires_at"]) <= now.timestamp():
        mark, files_before = _held_until(items, None) or now, now
    else:
        mark = from_iso(state.get("erased_at")) or _held_until(items, deleted_at) or deleted_at
    try:
        receipt = forget_key(
            store, pk, at=mark, elsewhere=elsewhere, keep_later=True, files_before=files_before
        )
    except Exception:
        audit(ERASE, caller=f"retention ({TTL_PRINCIPAL})", person=pk, outcome="failed")
        raise
    audit(ERASE, caller=f"retention ({TTL_PRINCIPAL})", person=pk, outcome="done")
    metrics.add_metric(name="PeopleExpired", unit=MetricUnit.Count, value=1)
    return receipt


def export(
    store: MemoryStore,
    agent: str,
    phone: str,
    *,
    elsewhere: Elsewhere = NOWHERE,
    legacy_keys: bool = False,
) -> dict[str, Any]:
    """Everything held about a person, every layer with its times, as JSON-ready data; by any
    of their identifiers (phone or BSUID). Outside the table (`elsewhere`): archived
    transcripts and kept media files (each `export_person(pk) -> list[dict]`).
    `legacy_keys`: with what the identifier's key before keyed keys holds (LEGACY_PERSON_KEYS).
    A memory whose retention has ended, or that an erasure left half-done, is gone here as for
    the turn and the seat (UnknownPerson), whether or not DynamoDB's TTL has deleted it yet."""
    pk = resolve(store, agent, phone)
    memory = store.load(pk)
    if left_by_ttl(memory, datetime.now(UTC)) or left_half_done(memory):
        raise UnknownPerson("no memory is held for this person")
    old = legacy(store, agent, phone) if legacy_keys else None
    items = store.everything(pk) + (store.everything(old) if old else [])
    state = next((item for item in items if item["sk"] == STATE), {})
    return {
        "agent": agent,
        "phone": phone,
        "person": pk,
        "exported_at": datetime.now(UTC).isoformat(),
        "summary": _exported_summary(items, state),
        "facts": [
            {"text": i["text"], "at": i.get("at")} for i in items if i["sk"].startswith(FACT)
        ],
        "messages": [
            {
                "seq": _plain(i["seq"]),
                "role": i["role"],
                "text": i["text"],
                "at": i.get("at"),
                "whasp_number": i.get("number"),
            }
            for i in items
            if i["sk"].startswith(MSG)
        ],
        "follow_ups": [follow_up_view(i) for i in items if i["sk"].startswith(DUE)],
        "processed_events": [
            {
                "event_id": i.get("event_id"),
                "status": i.get("status"),
                "at": i.get("created_at"),
            }
            for i in items
            if i["sk"].startswith(EVT)
        ],
        "state": {
            k: _plain(v) for k, v in state.items() if k not in ("pk", "sk", "summary", "summary_at")
        },
        "archived_transcripts": _exported(elsewhere.archive, pk),
        "kept_media": _exported(elsewhere.media, pk),
    }


def _exported_summary(items: list[dict[str, Any]], state: dict[str, Any]) -> dict[str, Any] | None:
    """The summary from its own item, or from the state item where an older version kept it."""
    summary = next((item for item in items if item["sk"] == SUMMARY), {})
    if not summary and state.get("summary"):
        summary = {"text": state["summary"], "at": state.get("summary_at")}
    if not summary.get("text"):
        return None
    return {
        "text": summary["text"],
        "covers_up_to_message": _plain(state.get("marker", 0)),
        "updated_at": summary.get("at"),
    }


def _plain(value: Any) -> Any:
    """JSON's types for what boto3's resource reads (numbers come as Decimal)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | set | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "as_integer_ratio") and not isinstance(value, bool | int | float):
        return int(value) if value == int(value) else float(value)  # Decimal
    return value


def _exported(kept: Any | None, pk: str) -> list[dict[str, Any]]:
    return kept.export_person(pk) if kept is not None else []
