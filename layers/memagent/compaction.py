"""Compaction: fold all but the newest turns into the summary and the facts, then delete them.

    read (one Query) -> one model call (summary + new facts, structured output, store=false)
    -> [archive the folded transcript, if configured]
    -> COMMIT: summary, new marker and facts in one transaction, conditional on the old marker
    -> clean up: delete the folded turns (idempotent; a crash here is finished by the next run)

The marker is the commit point: context reads only turns after it, so a half-done clean-up is
invisible, and no turn is ever both gone and unsummarised. Two compactions racing (a redelivered
stream batch, overlapping triggers) both call the model, but only one commits; the other's
condition fails and it stops. Turns the consumer writes meanwhile have higher seqs than anything
read, so they stay raw.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from memagent.errors import ConcurrentUpdate
from memagent.facts import cap_facts, fact_key, screen_facts
from memagent.memory import Fact
from memagent.observability import logger, metrics

if TYPE_CHECKING:
    from memagent.model import ModelClient
    from memagent.settings import MemorySettings
    from memagent.store import MemoryStore

SUMMARY_MAX_WORDS = 200
NEW_FACTS_PER_FOLD = 10
TRANSACTION_LIMIT = 100


def _count(name: str, value: float = 1) -> None:
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

        folded = self.model.fold(
            summary=memory.summary.text if memory.summary else "",
            facts=[fact.text for fact in memory.facts],
            turns=to_fold,
        )
        now = datetime.now(UTC)
        texts = screen_facts(
            folded.facts,
            existing=[fact.text for fact in memory.facts],
            max_chars=self.settings.max_fact_chars,
            limit=NEW_FACTS_PER_FOLD,
        )
        new_facts = [Fact(text=text, at=now) for text in texts]
        _, dropped = cap_facts([*memory.facts, *new_facts], self.settings.max_facts)
        dropped_keys = {fact_key(fact.text) for fact in dropped}
        new_facts = [fact for fact in new_facts if fact_key(fact.text) not in dropped_keys]
        # one transaction holds at most 100 actions; any excess is dropped on a later fold
        room = TRANSACTION_LIMIT - 1 - len(new_facts)
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
                summary=_words(folded.summary, SUMMARY_MAX_WORDS),
                new_facts=[(fact_key(fact.text), fact) for fact in new_facts],
                dropped_fact_keys=dropped_keys,
                erased_at=state.erased_at,
            )
        except ConcurrentUpdate:
            if archived is not None:
                self.archive.delete(archived)
            _count("CompactionsLostRace")
            logger.info("memory changed (another compaction, or an erasure); nothing to do")
            return "lost_race"
        deleted = self.store.delete_turns(pk, [turn.seq for turn in to_fold])
        _count("TurnsFolded", len(to_fold))
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
