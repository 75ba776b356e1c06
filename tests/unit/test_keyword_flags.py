"""The state flags a keyword's answer sets (turn/keywords.py's KEYWORDS) name attributes of the
person's state item that the store reads back (memory/types.py's PersonState, the handoff's
handoff_* attributes), each with a value as the item holds it for its field's type: a misspelt
flag would be written to an attribute nobody reads, and the keyword would silently do nothing.
Every row is checked as it is declared: a new keyword needs nothing here."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from datetime import datetime

import pytest

from memagent.memory.types import Memory, PersonState
from memagent.store.erasure import state_attributes
from memagent.turn.keywords import HANDOFF_PHRASES, KEYWORDS, OPT_OUT_WORDS, keyword

STATE_ATTRIBUTES = frozenset(state_attributes(erased=True) + state_attributes(erased=False))
FIELD_TYPES = typing.get_type_hints(PersonState)


@dataclass(frozen=True)
class Words:
    forget_keyword: str = "forget me"
    handoff_phrases: tuple[str, ...] = HANDOFF_PHRASES
    opt_out_words: tuple[str, ...] = OPT_OUT_WORDS


def _as_stored(name: str, value: object) -> bool:
    """Whether `value` is what the state item holds for field `name`: a time as ISO text (the
    store writes the flags as they are), anything else as its type; a handoff_* attribute is
    the handoff's own writes' to check."""
    if name not in FIELD_TYPES:
        return True
    hint = FIELD_TYPES[name]
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if datetime in allowed and isinstance(value, str):
        return bool(datetime.fromisoformat(value))
    return any(isinstance(value, typing.get_origin(t) or t) for t in allowed if t is not datetime)


ANSWERED = [declared for declared in KEYWORDS if declared.answer is not None]


@pytest.mark.parametrize("declared", ANSWERED, ids=lambda declared: declared.name)
def test_a_keywords_flags_are_state_attributes_as_the_item_holds_them(declared):
    # given a keyword's answer, with a "forget me" pending (the flags a message sets anyway)
    memory = Memory(state=PersonState(forget_pending=True))
    assert declared.answer is not None
    answer = declared.answer(memory, Words(), {"forget_pending": False})
    # then every flag it sets is an attribute the store reads back, held as its field's type
    unknown = set(answer.flags) - STATE_ATTRIBUTES
    assert not unknown, f"{declared.name!r} sets {unknown}, which PersonState does not hold"
    wrong = {k: v for k, v in answer.flags.items() if not _as_stored(k, v)}
    assert not wrong, f"{declared.name!r} sets {wrong}, not as their fields are held"


def test_forget_me_sets_the_pending_flag_and_anything_else_clears_it():
    # the flags reach the turn: "forget me" sets one, and a data request clears it
    assert keyword("forget me", Memory(), Words()).flags == {"forget_pending": True}
    pending = Memory(state=PersonState(forget_pending=True))
    assert keyword("send me my data", pending, Words()).flags == {"forget_pending": False}


def test_a_misspelt_or_mistyped_flag_is_told_apart():
    # the check itself: a time as ISO text and a flag's own type pass; a typo or a wrong type not
    assert _as_stored("opted_out_at", "2026-12-01T09:00:00+00:00")
    assert _as_stored("forget_pending", True) and _as_stored("language_code", None)
    assert "forget_pendng" not in STATE_ATTRIBUTES
    assert not _as_stored("forget_pending", "yes") and not _as_stored("last_seq", "3")
