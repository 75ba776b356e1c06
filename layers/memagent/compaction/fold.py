"""Compaction: fold all but the newest turns into the summary and the facts, then delete them.

    read (one Query) -> a model call per part, usually one (summary + new facts, structured
    output, store=false)
    -> [archive the folded transcript, if configured]
    -> COMMIT: summary, new marker and facts in one transaction, conditional on the old marker
    -> clean up: delete the folded turns (idempotent; a crash here is finished by the next run)

The marker is the commit point: context reads only turns after it, so a half-done clean-up is
invisible, and no turn is ever both gone and unsummarised.

The fold's input is bounded whatever the person wrote: each turn is cut to FOLD_TURN_CHARS, the
folded span is sent in parts of at most FOLD_PART_CHARS (each part's call folds into the summary
the previous one returned), at most FOLD_MAX_PARTS parts per run (what does not fit waits for the
next run), and at most FOLD_MAX_FACTS facts go with it. A part the model refuses for good (a
400-class answer, or a refusal) is asked again once on a shortened transcript; refused again,
it is committed without changing the summary (counted as FoldsRefused, alarmed), so a refusal
ends in a commit, never in a compaction re-triggered on every turn.

Two compactions racing (a redelivered stream batch, overlapping triggers) both call the model,
but only one commits; the other's condition fails and it stops. Turns the consumer writes
meanwhile have higher seqs than anything read, so they stay raw.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.errors import ConcurrentUpdate, ModelRejected
from memagent.memory import (
    Fact,
    Memory,
    Turn,
    cap_facts,
    key_of,
    normalise,
    screen_facts,
    screen_summary,
    stack_budget,
)
from memagent.observability import logger, metrics
from memagent.store import TRANSACTION_LIMIT

if TYPE_CHECKING:
    from memagent.model import Folded, ModelClient, ModelSettings
    from memagent.store import MemoryStore

SUMMARY_MAX_WORDS = 200
NEW_FACTS_PER_FOLD = 10
# The fold's bounds. A request carries the prompt (~2 KB), the summary (200 words), at most
# FOLD_MAX_FACTS facts of MAX_FACT_CHARS with their dates (200 x 190 = 38 KB: every fact at the
# default cap, so the fold sees each one it may retire) and one part of the transcript (60,000
# characters, ~15,000 tokens): under 110 KB, far from 1 MB and any model's context.
FOLD_TURN_CHARS = 4_000  # a WhatsApp text is usually far shorter; a pasted essay is cut
FOLD_PART_CHARS = 60_000
FOLD_MAX_PARTS = 2  # per run: with one shortened retry each, at most 4 model calls
FOLD_MAX_FACTS = 200
REFUSED_TURN_CHARS = 280  # the shortened transcript a refused part is asked again with
UNSUMMARISED = "(Part of the earlier conversation could not be summarised.)"


@dataclass(frozen=True)
class FactChanges:
    """What a fold's commit does to the facts: `put` the new and the confirmed ones, `delete`
    by key the outdated ones and the cap's excess."""

    put: list[Fact]
    delete: set[str]
    added: int
    retired: int


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def fold_parts(
    turns: list[Turn], *, turn_chars: int = FOLD_TURN_CHARS, part_chars: int = FOLD_PART_CHARS
) -> list[list[Turn]]:
    """The turns to fold, oldest first, each cut to `turn_chars`, packed into parts of at most
    `part_chars` characters of text (a part holds at least one turn)."""
    parts: list[list[Turn]] = []
    size = 0
    for turn in turns:
        cut = dataclasses.replace(turn, text=_cut(turn.text, turn_chars))
        if not parts or size + len(cut.text) > part_chars:
            parts.append([])
            size = 0
        parts[-1].append(cut)
        size += len(cut.text)
    return parts


def _count(name: str, value: float = 1) -> None:  # pragma: no mutate (metrics only)
    metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def _words(text: str, limit: int) -> str:
    words = text.split()
    return text.strip() if len(words) <= limit else " ".join(words[:limit]) + " …"


class Compactor:
    def __init__(
        self,
        settings: ModelSettings,
        store: MemoryStore,
        model: ModelClient,
        archive: Any | None = None,
    ):
        self.settings = settings
        self.store = store
        self.model = model
        self.archive = archive

    def compact(self, pk: str) -> str:
        """Fold one person's memory if enough turns wait; return the decision taken."""
        logger.append_keys(person=pk)
        memory = self.store.load(pk)
        state = memory.state
        if memory.leftovers:  # a previous run committed, then stopped before its clean-up
            self.store.delete_turns(pk, memory.leftovers)
            logger.info("finished an earlier clean-up", extra={"deleted": len(memory.leftovers)})

        to_fold = list(memory.turns[: max(0, len(memory.turns) - self.settings.compact_keep)])
        if state.pending < self.settings.compact_threshold or not to_fold:
            self.store.clear_compaction_flag(pk, seen_last_seq=state.last_seq)
            logger.info("nothing to fold", extra={"pending": state.pending})
            return "nothing_to_fold"

        parts = fold_parts(to_fold)[:FOLD_MAX_PARTS]  # the rest waits for the next run
        to_fold = to_fold[: sum(len(part) for part in parts)]
        used = self.model.tokens_used
        summary, changes = self._fold(memory, parts)
        # the fold's tokens count on the stack's day now, and on the person's with the commit
        spent = self.model.tokens_used - used
        stack_budget(self.store, self.settings).add(spent)

        new_marker = to_fold[-1].seq
        # archive before the commit, so nothing is deleted unarchived; withdrawn if we lose
        archived = self.archive.put(pk, to_fold) if self.archive is not None else None
        if archived is not None and self.store.erasure_mark(pk) != state.erased_at:
            # an erasure ran while we folded, and its sweep of the archive may have come
            # before our write: withdraw the copy now (the commit would be refused anyway)
            assert self.archive is not None  # it archived
            self.archive.delete(archived)
            _count("CompactionsLostRace")
            logger.info("person erased during the fold; archive copy withdrawn")
            return "lost_race"
        if not self._commit(pk, memory, new_marker, summary, changes, archived, spent):
            return "lost_race"
        deleted = self.store.delete_turns(pk, [turn.seq for turn in to_fold])
        _count("TurnsFolded", len(to_fold))
        _count("FoldCalls", len(parts))
        _count("FactsAdded", changes.added)
        _count("FactsRetired", changes.retired)
        logger.info(
            "compacted",
            extra={
                "folded": len(to_fold),
                "deleted": deleted,
                "marker": new_marker,
                "facts_added": changes.added,
                "facts_retired": changes.retired,
                "facts_confirmed": len(changes.put) - changes.added,
                "facts_dropped": len(changes.delete) - changes.retired,
            },
        )
        return "compacted"

    def _commit(
        self,
        pk: str,
        memory: Memory,
        new_marker: int,
        summary: str,
        changes: FactChanges,
        archived: Any | None,
        spent: int,
    ) -> bool:
        """The commit point; False (the archive copy withdrawn) if the memory changed first.
        `spent`: the fold's tokens, added to the person's `fold_tokens` (memagent.memory.budget)."""
        state = memory.state
        try:
            self.store.commit_compaction(
                pk,
                old_marker=state.marker,
                new_marker=new_marker,
                summary=summary or UNSUMMARISED,
                new_facts=[(key_of(fact), fact) for fact in changes.put],
                dropped_fact_keys=changes.delete,
                erased_at=state.erased_at,
                summary_at=memory.summary.at if memory.summary else None,
                fold_tokens=spent,
            )
        except ConcurrentUpdate:
            if archived is not None:
                assert self.archive is not None  # it archived
                self.archive.delete(archived)
            _count("CompactionsLostRace")
            logger.info("memory changed (another compaction, or an erasure); nothing to do")
            return False
        return True

    def _fold(self, memory: Memory, parts: list[list[Turn]]) -> tuple[str, FactChanges]:
        """Fold the parts into the summary, and work out what changes in the facts: the new
        ones, those the conversation made outdated (removed) or confirmed, and, at the cap, the
        least recently confirmed (removed). Nothing is written here."""
        summary = memory.summary.text if memory.summary else ""
        now = datetime.now(UTC)
        limit = self.settings.max_fact_chars
        # what the fold may act on: all the facts within its bound, the most recently confirmed
        known = [
            dataclasses.replace(f, text=_cut(f.text, limit), key=key_of(f))
            for f in cap_facts(list(memory.facts), FOLD_MAX_FACTS)[0]
        ]
        found: list[Fact] = []
        retired: set[str] = set()
        confirmed: set[str] = set()
        for part in parts:
            shown = [f for f in (*known, *found) if key_of(f) not in retired]
            folded = self._fold_part(summary, shown, part)
            if folded is None:
                continue
            summary = screen_summary(_words(folded.summary, SUMMARY_MAX_WORDS))
            retired.update(key_of(shown[n - 1]) for n in folded.outdated)
            confirmed.update(key_of(shown[n - 1]) for n in folded.confirmed)
            learned = part[-1].at  # said by the end of its part, at the latest
            found.extend(Fact(text, at=learned, confirmed_at=now) for text in folded.facts)
        return summary, self._fact_changes(memory, found, retired, confirmed, now)

    def _fact_changes(
        self,
        memory: Memory,
        found: list[Fact],
        retired: set[str],
        confirmed: set[str],
        now: datetime,
    ) -> FactChanges:
        """What the fold's findings (facts `found`, keys of stored facts `retired` and
        `confirmed`) change in the stored facts, within one transaction and the cap."""
        retired, confirmed = set(retired), set(confirmed)
        stored = {key_of(f): f for f in memory.facts}
        by_text = {normalise(f.text): key for key, f in stored.items()}
        candidates: list[Fact] = []
        for fact in found:
            if (same := by_text.get(normalise(fact.text))) is not None:
                retired.discard(same)  # said again: confirmed, and never stored twice
                confirmed.add(same)
            elif key_of(fact) not in retired:  # not taken back by a later part
                candidates.append(fact)
        learned_at = {normalise(f.text): f.at for f in candidates}
        texts = screen_facts(
            [f.text for f in candidates],
            existing=[f.text for f in memory.facts],
            max_chars=self.settings.max_fact_chars,
            limit=NEW_FACTS_PER_FOLD,
        )
        new = [Fact(t, at=learned_at.get(normalise(t), now), confirmed_at=now) for t in texts]
        retired &= stored.keys()
        confirmed = confirmed.difference(retired) & stored.keys()
        # one transaction holds at most 100 actions: the state and the summary, then the
        # removals the conversation asked for, the new facts, the confirmations; a cap excess
        # beyond that is dropped on a later fold
        room = TRANSACTION_LIMIT - 2
        gone = sorted(retired)[:room]
        new = new[: room - len(gone)]
        touched = [
            dataclasses.replace(stored[k], key=k, confirmed_at=now) for k in sorted(confirmed)
        ][: room - len(gone) - len(new)]
        remaining = [
            dataclasses.replace(f, confirmed_at=now) if key in confirmed else f
            for key, f in stored.items()
            if key not in retired
        ]
        _, over = cap_facts([*remaining, *new], self.settings.max_facts)
        over_keys = {key_of(f) for f in over}
        new = [f for f in new if key_of(f) not in over_keys]
        touched = [f for f in touched if key_of(f) not in over_keys]
        spare = room - len(gone) - len(new) - len(touched)
        dropped = sorted(over_keys & stored.keys())[: max(spare, 0)]
        return FactChanges(
            put=[*new, *touched], delete={*gone, *dropped}, added=len(new), retired=len(gone)
        )

    def _fold_part(self, summary: str, facts: list[Fact], part: list[Turn]) -> Folded | None:
        """One part's fold; a refusal is asked again once, shortened; None if refused again."""
        try:
            return self.model.fold(
                summary=summary, facts=facts, turns=part, zone=self.settings.time_zone
            )
        except ModelRejected:
            _count("FoldsShortened")
            logger.warning("fold refused; asking again on a shortened transcript")
        shortened = [dataclasses.replace(t, text=_cut(t.text, REFUSED_TURN_CHARS)) for t in part]
        try:
            return self.model.fold(
                summary=summary, facts=facts, turns=shortened, zone=self.settings.time_zone
            )
        except ModelRejected:
            _count("FoldsRefused")  # alarmed: these turns leave memory unsummarised
            logger.error("fold refused twice; committed without them", extra={"turns": len(part)})
            return None
