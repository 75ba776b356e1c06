"""A person's state is defined once (memagent.memory.types.PersonState): the store's parser and what
an erasure strips are derived from its fields, so a new attribute is read, and erased, or
fails here."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from memagent.memory.types import Kind, PersonState, _held
from memagent.store.erasure import _STATE_CONTENT, KEPT_ON_ERASURE, state_attributes
from memagent.store.memory_store import state_reader


@dataclasses.dataclass(frozen=True)
class WithAnUnclassedField(PersonState):
    paused_until: datetime | None = None  # a new attribute, its Kind forgotten


@dataclasses.dataclass(frozen=True)
class WithAClassedField(PersonState):
    paused_until: datetime | None = _held(Kind.CONTENT)


def test_a_state_field_without_its_kind_fails_the_parser_and_the_erasure():
    with pytest.raises(TypeError, match="paused_until"):
        state_reader(WithAnUnclassedField)
    with pytest.raises(TypeError, match="paused_until"):
        state_attributes(WithAnUnclassedField, erased=True)


def test_a_classed_field_is_read_and_erased_without_another_list_to_keep():
    # given a new content attribute, declared once with its Kind
    item = {"pk": "p", "sk": "STATE", "last_seq": 4, "paused_until": "2026-12-01T09:00:00+00:00"}
    # then the store reads it, and an erasure strips it
    state = state_reader(WithAClassedField)(item)
    assert state.paused_until == datetime(2026, 12, 1, 9, tzinfo=UTC)
    assert state.last_seq == 4
    assert "paused_until" in state_attributes(WithAClassedField, erased=True)
    assert "paused_until" not in state_attributes(WithAClassedField, erased=False)


def test_an_erasure_strips_everything_but_the_mark_the_route_and_the_days_counters():
    # the day's budget counters are no content: "forget me" must not reset the day's turns
    counters = {"budget_day", "day_turns", "day_tokens", "notice_day", "day_voice_chars"}
    assert {"pk", "sk", "erased_at", "moved_to", *counters} == KEPT_ON_ERASURE
    # every attribute of the state, the handoff's and the old summary's, is one or the other
    assert "handoff_address" in _STATE_CONTENT and "summary" in _STATE_CONTENT
    assert not KEPT_ON_ERASURE & set(_STATE_CONTENT)
    assert state_reader()({}) == PersonState()
