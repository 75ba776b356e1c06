"""What compaction keeps of a person over many folds: the summary before each fold, the facts
already known, the caps on both, the threshold's edge, and a person who was forgotten and came
back. Through the compactor's handler code (Compactor.compact), moto and the local model."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from memagent.lifecycle.rights import forget
from memagent.memory.facts import fact_key
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, load_function, seed_turns
from tests.integration.test_compactor import items, seqs, state, summary

PK = person_key(AGENT, MAYA)


class Model:
    """The local model's fold answers, one per call, and what each call was shown."""

    def __init__(self, openai, *answers: tuple[str, list[str]]):
        self.answers = list(answers)
        self.shown: list[str] = []
        openai.responder = self.respond

    def respond(self, request) -> str:
        self.shown.append(request["input"])
        text, facts = self.answers.pop(0)
        return json.dumps({"summary": text, "facts": facts})


def section(fold_input: str, heading: str) -> list[str]:
    """One section of a fold request's input ("Current summary:", "Notes already kept:")."""
    # a heading may say more before its colon: "Conversation to fold in (times in UTC):"
    after = re.split(rf"{re.escape(heading[:-1])}[^\n]*:\n", fold_input, maxsplit=1)[1]
    return after.split("\n\n", 1)[0].splitlines()


def facts(table_name: str) -> list[str]:
    return sorted(i["text"] for i in items(table_name, "FACT#"))


def talk(store, n: int, **kwargs) -> None:
    seed_turns(store, MAYA, [f"message {i}" for i in range(n)], **kwargs)


def later(days: int) -> datetime:
    return datetime(2026, 11, 1, 8, tzinfo=UTC) + timedelta(days=days)


def compactor_with(compactor_env, monkeypatch, **settings: str):
    return load_function("compactor", {**compactor_env, **settings}, monkeypatch).compactor


def test_a_second_fold_starts_from_the_first_summary_and_shows_the_facts_kept(
    compactor, store, resources, openai
):
    model = Model(
        openai,
        ("Maya works nights and has a dog.", ["Works nights as a nurse", "Has a dog"]),
        ("Maya works nights, has a dog and moved to Leeds.", ["Lives in Leeds"]),
    )
    # given a first fold of Maya's first 25 turns
    talk(store, 45)
    assert compactor.compactor.compact(PK) == "compacted"
    # when 20 more turns bring 40 back and the second fold runs
    talk(store, 20, start=later(1))
    assert compactor.compactor.compact(PK) == "compacted"
    # then the model folded into the first summary, shown the facts already kept
    assert section(model.shown[1], "Current summary:") == ["Maya works nights and has a dog."]
    shown = section(model.shown[1], "Notes already kept:")  # "1. Has a dog (noted Mon 30 Nov)"
    assert sorted(re.sub(r"^\d+\. | \(noted [^)]*\)$", "", line) for line in shown) == [
        "Has a dog",
        "Works nights as a nurse",
    ]
    # and the first fold was shown an empty memory
    assert section(model.shown[0], "Current summary:") == ["(empty)"]
    assert section(model.shown[0], "Notes already kept:") == ["(none)"]
    # and memory holds the second summary and every fact, the newest 20 turns raw
    assert summary(resources.table_name) == "Maya works nights, has a dog and moved to Leeds."
    assert facts(resources.table_name) == ["Has a dog", "Lives in Leeds", "Works nights as a nurse"]
    assert int(state(resources.table_name)["marker"]) == 45
    assert seqs(resources.table_name) == list(range(46, 66))


def test_the_fact_cap_forgets_the_oldest_facts_first(compactor_env, resources, openai, monkeypatch):
    compactor = compactor_with(compactor_env, monkeypatch, MAX_FACTS="3")
    Model(
        openai,
        ("one", ["Works nights as a nurse"]),
        ("two", ["Has a dog called Biscuit"]),
        ("three", ["Lives in Leeds", "Is training for a marathon"]),
    )
    # given three folds on three days, the last learning two facts
    talk(compactor.store, 45)
    compactor.compact(PK)
    for day in (1, 2):
        talk(compactor.store, 20, start=later(day))
        assert compactor.compact(PK) == "compacted"
    # then with room for three, the oldest fact is the one forgotten
    assert facts(resources.table_name) == [
        "Has a dog called Biscuit",
        "Is training for a marathon",
        "Lives in Leeds",
    ]


def test_new_facts_past_the_cap_keep_the_later_ones(compactor_env, resources, openai, monkeypatch):
    compactor = compactor_with(compactor_env, monkeypatch, MAX_FACTS="1")
    Model(openai, ("one", ["Lives in Leeds", "Moved to London"]))
    talk(compactor.store, 45)
    assert compactor.compact(PK) == "compacted"
    # then only the later of one fold's facts is stored, the earlier never written
    assert facts(resources.table_name) == ["Moved to London"]


def test_a_summary_over_200_words_is_cut_to_200(compactor, store, resources, openai):
    Model(openai, (" ".join(f"w{i}" for i in range(250)), []))
    talk(store, 45)
    assert compactor.compactor.compact(PK) == "compacted"
    # (the ellipsis stored as a reader sees it: NFKC makes it three dots)
    assert summary(resources.table_name) == " ".join(f"w{i}" for i in range(200)) + " ..."


def test_a_summary_of_200_words_is_kept_whole(compactor, store, resources, openai):
    Model(openai, (" ".join(f"w{i}" for i in range(200)), []))
    talk(store, 45)
    assert compactor.compactor.compact(PK) == "compacted"
    assert summary(resources.table_name) == " ".join(f"w{i}" for i in range(200))


def test_a_refused_fold_keeps_the_summary_it_had(compactor, store, resources, openai):
    Model(openai, ("Maya works nights.", []))
    talk(store, 45)
    compactor.compactor.compact(PK)
    # given the model refuses the next fold, also shortened
    talk(store, 20, start=later(1))
    openai.fail_next(2, status=400)
    # when it runs
    assert compactor.compactor.compact(PK) == "compacted"
    # then the earlier summary stands (not a note that a part could not be summarised)
    assert summary(resources.table_name) == "Maya works nights."
    assert int(state(resources.table_name)["marker"]) == 45


def test_a_first_fold_refused_says_part_could_not_be_summarised(
    compactor, store, resources, openai
):
    talk(store, 45)
    openai.fail_next(2, status=400)
    assert compactor.compactor.compact(PK) == "compacted"
    assert summary(resources.table_name) == (
        "(Part of the earlier conversation could not be summarised.)"
    )


@pytest.mark.parametrize(("turns", "marker"), [(40, 20), (41, 21)])
def test_compaction_folds_from_exactly_the_threshold(
    compactor, store, resources, openai, turns, marker
):
    Model(openai, ("folded", []))
    # given 40 (or 41) turns waiting: the threshold is 40, 20 stay raw
    talk(store, turns)
    # then all but the newest 20 are folded
    assert compactor.compactor.compact(PK) == "compacted"
    assert int(state(resources.table_name)["marker"]) == marker
    assert seqs(resources.table_name) == list(range(marker + 1, turns + 1))


def test_one_turn_under_the_threshold_folds_nothing(compactor, store, resources, openai):
    talk(store, 39)
    assert compactor.compactor.compact(PK) == "nothing_to_fold"
    assert openai.calls() == []
    assert seqs(resources.table_name) == list(range(1, 40))


def test_a_person_forgotten_and_back_is_compacted_again(compactor, store, resources, openai):
    Model(openai, ("Maya is back.", ["Lives in Leeds"]))
    # given Maya was forgotten (her erasure mark stays), then wrote 45 messages afterwards
    erased = forget(store, AGENT, MAYA).at
    talk(store, 45, start=erased + timedelta(minutes=1))
    # when her memory is compacted
    assert compactor.compactor.compact(PK) == "compacted"
    # then the fold commits like anyone's
    assert summary(resources.table_name) == "Maya is back."
    assert facts(resources.table_name) == ["Lives in Leeds"]
    assert int(state(resources.table_name)["marker"]) == 25


def test_a_backlog_over_two_parts_folds_two_and_leaves_the_rest_for_the_next_run(
    compactor, store, resources, openai
):
    model = Model(openai, ("part one", ["Works nights"]), ("part two", ["Has a dog"]))
    # given 55 turns of exactly 4,000 characters (the most a turn brings to a fold), the first
    # one longer: 35 to fold, 15 to a 60,000-character part
    texts = ["0" * 4_001] + [f"{i:02d}".ljust(4_000, ".") for i in range(1, 55)]
    seed_turns(store, MAYA, texts)
    # when it is compacted
    assert compactor.compactor.compact(PK) == "compacted"
    # then two parts of 15 turns are folded, one call each, and the last 5 wait for the next run
    assert len(model.shown) == 2
    assert int(state(resources.table_name)["marker"]) == 30
    assert seqs(resources.table_name) == list(range(31, 56))
    # each turn went in whole, the longer one cut to 4,000 characters
    first, second = (section(shown, "Conversation to fold in:") for shown in model.shown)
    assert [line.split("): ", 1)[1] for line in first] == ["0" * 3_999 + "\u2026", *texts[1:15]]
    assert [line.split("): ", 1)[1] for line in second] == texts[15:30]
    # and the second part was folded into the first's summary, shown the first's facts
    assert section(model.shown[1], "Current summary:") == ["part one"]
    assert section(model.shown[1], "Notes already kept:")[0].startswith("1. Works nights (noted ")
    assert len(section(model.shown[1], "Notes already kept:")) == 1
    assert summary(resources.table_name) == "part two"
    assert facts(resources.table_name) == ["Has a dog", "Works nights"]


def test_a_fold_keeps_at_most_ten_new_facts_and_none_it_already_has(
    compactor, store, resources, openai
):
    Model(
        openai,
        ("one", ["Works nights as a nurse"]),
        ("two", ["works nights as a nurse."] + [f"Visited city number {i}" for i in range(12)]),
    )
    talk(store, 45)
    compactor.compactor.compact(PK)
    talk(store, 20, start=later(1))
    assert compactor.compactor.compact(PK) == "compacted"
    # then the known fact is not stored twice, and of 12 new ones the first 10 are
    assert facts(resources.table_name) == sorted(
        ["Works nights as a nurse"] + [f"Visited city number {i}" for i in range(10)]
    )


def test_a_fold_refused_once_is_folded_from_the_shortened_transcript(
    compactor, store, resources, openai
):
    model = Model(openai, ("Maya works nights.", []), ("Maya works nights; has a dog.", ["Dog"]))
    # given a first fold, and the next fold's turns long, one with a space where the cut falls
    texts = ["x" * 278 + " and the rest of it", "y" * 300] * 10
    seed_turns(store, MAYA, [f"message {i}" for i in range(25)] + texts)
    compactor.compactor.compact(PK)
    talk(store, 20, start=later(1))
    # when the model refuses the fold once
    openai.fail_next(1, status=400)
    assert compactor.compactor.compact(PK) == "compacted"
    # then it was asked again with each turn cut to 280 characters (no space before the mark),
    # into the summary it had
    assert len(model.shown) == 2  # the refused request never reached the responder
    retry = model.shown[1]
    assert section(retry, "Current summary:") == ["Maya works nights."]
    turns = [line.split("): ", 1)[1] for line in section(retry, "Conversation to fold in:")]
    assert turns[-2:] == ["x" * 278 + "\u2026", "y" * 279 + "\u2026"]
    assert summary(resources.table_name) == "Maya works nights; has a dog."
    assert facts(resources.table_name) == ["Dog"]


def test_a_flag_with_nothing_to_fold_is_lowered(compactor_env, resources, openai, monkeypatch):
    # given the flag went up at 40 turns, and the compactor now folds from 50
    compactor = compactor_with(compactor_env, monkeypatch, COMPACT_THRESHOLD="50")
    talk(compactor.store, 40)
    assert state(resources.table_name)["compaction_due"] is True
    # when it runs, then nothing is folded and the flag is down, so the stream stays quiet
    assert compactor.compact(PK) == "nothing_to_fold"
    assert state(resources.table_name)["compaction_due"] is False
    assert openai.calls() == []


def test_a_clean_up_a_crash_interrupted_is_finished_by_the_next_run(
    compactor, store, resources, openai, monkeypatch
):
    Model(openai, ("folded", []))
    talk(store, 45)
    # given a compaction that committed, then died after deleting two of the 25 folded turns
    delete = store.delete_turns

    def crash(pk, seqs_):
        delete(pk, list(seqs_)[:2])
        raise RuntimeError("killed mid clean-up")

    monkeypatch.setattr(store, "delete_turns", crash)
    with pytest.raises(RuntimeError):
        compactor.compactor.compact(PK)
    monkeypatch.setattr(store, "delete_turns", delete)
    assert seqs(resources.table_name) == list(range(3, 46))
    # when the next run comes, with nothing new to fold
    assert compactor.compactor.compact(PK) == "nothing_to_fold"
    # then the rest of the folded turns are gone, the newest 20 stay, and the flag is down
    assert seqs(resources.table_name) == list(range(26, 46))
    assert state(resources.table_name)["compaction_due"] is False


def test_a_cap_lowered_under_many_facts_drops_them_over_folds_within_one_transaction(
    compactor_env, resources, openai, monkeypatch
):
    # given 120 facts kept from long ago, and a cap lowered to 5
    table = dynamodb_table(resources.table_name)
    with table.batch_writer() as batch:
        for i in range(120):
            text = f"Old fact number {i}"
            at = (later(-400) + timedelta(minutes=i)).isoformat()
            batch.put_item(Item={"pk": PK, "sk": f"FACT#{fact_key(text)}", "text": text, "at": at})
    compactor = compactor_with(compactor_env, monkeypatch, MAX_FACTS="5")
    Model(openai, ("one", ["Lives in Leeds"]), ("two", ["Has a dog"]))
    talk(compactor.store, 45)
    # when a fold adds a fact: one transaction holds the state, the summary, the new fact and
    # 97 of the 116 deletions (100 actions); the other 19 wait
    assert compactor.compact(PK) == "compacted"
    assert len(facts(resources.table_name)) == 120 + 1 - 97
    assert "Lives in Leeds" in facts(resources.table_name)
    # then the next fold finishes: the five newest stay
    talk(compactor.store, 20, start=later(1))
    assert compactor.compact(PK) == "compacted"
    assert facts(resources.table_name) == sorted(
        ["Has a dog", "Lives in Leeds", *(f"Old fact number {i}" for i in (117, 118, 119))]
    )
