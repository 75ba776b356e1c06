"""The context's budgets at their edges, and which facts are picked when not all fit: ties in
time (one fold's facts share one), word forms, short words."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from memagent.memory.context import build_context
from memagent.memory.types import Fact, Memory, Turn
from tests.unit.test_context import PROMPT, START


def turn(seq: int, text: str) -> Turn:
    return Turn(seq=seq, role="user" if seq % 2 else "assistant", text=text, at=START)


def picked(facts: list[Fact], message: str, max_facts: int) -> list[str]:
    answering = turn(1, message)
    context = build_context(
        Memory(facts=tuple(facts)), answering, system_prompt=PROMPT, max_facts=max_facts
    )
    # those picked for the message (the tail), then the stable block (the instructions), each
    # a bullet with the date it was noted
    lines = f"{context.tail}\n{context.instructions}".splitlines()
    return [re.sub(r" \(noted [^)]*\)$", "", line[2:]) for line in lines if line[:2] == "- "]


def test_turns_that_fill_the_character_budget_exactly_all_go_in():
    # given the answered message and two earlier turns, 30 characters in all
    earlier = [turn(1, "a" * 10), turn(2, "b" * 10)]
    answering = turn(3, "c" * 10)
    memory = Memory(turns=(*earlier, answering))
    # when the budget is exactly 30, then all three go in; at 29 the oldest is left out
    assert build_context(memory, answering, system_prompt=PROMPT, max_chars=30).turns_used == 3
    assert build_context(memory, answering, system_prompt=PROMPT, max_chars=29).turns_used == 2


def test_the_default_budget_is_12000_characters():
    earlier = [turn(1, "a" * 6_000), turn(2, "b" * 5_999)]
    answering = turn(3, "c")
    memory = Memory(turns=(*earlier, answering))
    assert build_context(memory, answering, system_prompt=PROMPT).chars_used == 12_000
    longer = Memory(turns=(turn(1, "a" * 6_001), earlier[1], answering))
    assert build_context(longer, answering, system_prompt=PROMPT).chars_used == 6_000


@pytest.mark.parametrize(("max_chars", "text"), [(7, "a […] z"), (6, "abcdef"), (1, "a"), (0, "")])
def test_an_answered_message_over_a_tiny_budget_keeps_what_fits(max_chars, text):
    # the cut keeps one character of each end once the mark fits with them; else the start
    answering = turn(1, "abcdefghijklmnopqrstuvwxyz")
    context = build_context(Memory(), answering, system_prompt=PROMPT, max_chars=max_chars)
    assert context.input[-1]["content"] == text


def test_facts_of_one_fold_tie_on_time_and_the_later_ones_are_newer():
    # given 35 facts learned in one fold (one time), none matching the message
    facts = [Fact(f"Fact number {i}", START) for i in range(35)]
    # when 30 fit, then the 30 later ones go in, in memory's order
    assert picked(facts, "hello", 30) == [f"Fact number {i}" for i in range(5, 35)]


def test_a_fact_matching_the_message_beats_a_newer_one():
    facts = [Fact("Has a dog called Biscuit", START), Fact("Works nights", START + timedelta(1))]
    assert picked(facts, "Biscuit was sick", 1) == ["Has a dog called Biscuit"]
    assert picked(facts, "hello", 1) == ["Works nights"]


@pytest.mark.parametrize(
    ("fact", "message"),
    [
        ("Has two dogs", "How is the dog?"),
        ("Has a dog", "I love dogs"),
        ("Writes blog posts", "new post today"),
        ("Likes long walks", "went for a walk"),
    ],
)
def test_a_fact_matches_the_message_in_the_singular_or_the_plural(fact, message):
    facts = [Fact(fact, START), Fact("Works nights", START + timedelta(1))]
    assert picked(facts, message, 1) == [fact]


def test_a_two_letter_word_matches():
    facts = [Fact("Is a DJ at weekends", START), Fact("Works nights", START + timedelta(1))]
    assert picked(facts, "great dj", 1) == ["Is a DJ at weekends"]


def test_with_room_for_no_facts_none_go_in():
    assert picked([Fact("Has a dog", START)], "dog", 0) == []


def test_picked_facts_go_in_oldest_first_whatever_order_memory_gives():
    facts = [
        Fact("Works nights", START + timedelta(2)),
        Fact("Has a dog", START + timedelta(1)),
        Fact("Lives in Leeds", START),
    ]
    assert picked(facts, "hello", 2) == ["Has a dog", "Works nights"]
