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
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.errors import ConcurrentUpdate, ModelRejected
from memagent.facts import cap_facts, fact_key, screen_facts, screen_summary
from memagent.memory import Fact, Turn
from memagent.observability import logger, metrics
from memagent.store_table import TRANSACTION_LIMIT

if TYPE_CHECKING:
    from memagent.model import Folded, ModelClient
    from memagent.settings import MemorySettings
    from memagent.store import MemoryStore

SUMMARY_MAX_WORDS = 200
NEW_FACTS_PER_FOLD = 10
# The fold's bounds. A request carries the prompt (~1 KB), the summary (200 words), at most
# FOLD_MAX_FACTS facts of MAX_FACT_CHARS (60 x 160 = 9.6 KB) and one part of the transcript
# (60,000 characters, ~15,000 tokens): under 80 KB, far from 1 MB and any model's context.
FOLD_TURN_CHARS = 4_000  # a WhatsApp text is usually far shorter; a pasted essay is cut
FOLD_PART_CHARS = 60_000
FOLD_MAX_PARTS = 2  # per run: with one shortened retry each, at most 4 model calls
FOLD_MAX_FACTS = 60
REFUSED_TURN_CHARS = 280  # the shortened transcript a refused part is asked again with
UNSUMMARISED = "(Part of the earlier conversation could not be summarised.)"


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
        settings: MemorySettings,
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
        summary = memory.summary.text if memory.summary else ""
        shown = [_cut(fact.text, self.settings.max_fact_chars) for fact in memory.facts]
        found: list[str] = []
        for part in parts:
            folded = self._fold_part(summary, (shown + found)[-FOLD_MAX_FACTS:], part)
            if folded is not None:
                summary = screen_summary(_words(folded.summary, SUMMARY_MAX_WORDS))
                found.extend(folded.facts)
        now = datetime.now(UTC)
        texts = screen_facts(
            found,
            existing=[fact.text for fact in memory.facts],
            max_chars=self.settings.max_fact_chars,
            limit=NEW_FACTS_PER_FOLD,
        )
        new_facts = [Fact(text=text, at=now) for text in texts]
        _, dropped = cap_facts([*memory.facts, *new_facts], self.settings.max_facts)
        dropped_keys = {fact_key(fact.text) for fact in dropped}
        new_facts = [fact for fact in new_facts if fact_key(fact.text) not in dropped_keys]
        # one transaction holds at most 100 actions; any excess is dropped on a later fold
        room = TRANSACTION_LIMIT - 2 - len(new_facts)  # the state and the summary first
        dropped_keys = set(sorted(dropped_keys)[:room])

        new_marker = to_fold[-1].seq
        # archive before the commit, so nothing is deleted unarchived; withdrawn if we lose
        archived = self.archive.put(pk, to_fold) if self.archive is not None else None
        if archived is not None and self.store.erasure_mark(pk) != state.erased_at:
            # an erasure ran while we folded, and its sweep of the archive may have come
            # before our write: withdraw the copy now (the commit would be refused anyway)
            self.archive.delete(archived)
            _count("CompactionsLostRace")
            logger.info("person erased during the fold; archive copy withdrawn")
            return "lost_race"
        try:
            self.store.commit_compaction(
                pk,
                old_marker=state.marker,
                new_marker=new_marker,
                summary=summary or UNSUMMARISED,
                new_facts=[(fact_key(fact.text), fact) for fact in new_facts],
                dropped_fact_keys=dropped_keys,
                erased_at=state.erased_at,
                summary_at=memory.summary.at if memory.summary else None,
            )
        except ConcurrentUpdate:
            if archived is not None:
                self.archive.delete(archived)
            _count("CompactionsLostRace")
            logger.info("memory changed (another compaction, or an erasure); nothing to do")
            return "lost_race"
        deleted = self.store.delete_turns(pk, [turn.seq for turn in to_fold])
        _count("TurnsFolded", len(to_fold))
        _count("FoldCalls", len(parts))
        _count("FactsAdded", len(new_facts))
        logger.info(
            "compacted",
            extra={
                "folded": len(to_fold),
                "deleted": deleted,
                "marker": new_marker,
                "facts_added": len(new_facts),
                "facts_dropped": len(dropped_keys),
            },
        )
        return "compacted"

    def _fold_part(self, summary: str, facts: list[str], part: list[Turn]) -> Folded | None:
        """One part's fold; a refusal is asked again once, shortened; None if refused again."""
        try:
            return self.model.fold(summary=summary, facts=facts, turns=part)
        except ModelRejected:
            _count("FoldsShortened")
            logger.warning("fold refused; asking again on a shortened transcript")
        shortened = [dataclasses.replace(t, text=_cut(t.text, REFUSED_TURN_CHARS)) for t in part]
        try:
            return self.model.fold(summary=summary, facts=facts, turns=shortened)
        except ModelRejected:
            _count("FoldsRefused")  # alarmed: these turns leave memory unsummarised
            logger.error("fold refused twice; committed without them", extra={"turns": len(part)})
            return None
