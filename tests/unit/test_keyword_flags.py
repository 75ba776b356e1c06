"""The state flags a keyword's answer sets (turn/keywords.py's KEYWORDS) name attributes of the
person's state item that the store reads back (memory/types.py's PersonState, the handoff's
handoff_* attributes), each with a value of its field's type: a misspelt flag would be written
to an attribute nobody reads, and the keyword would silently do nothing."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass

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


# each row of KEYWORDS: a message that is it, and the state it is written in
SAID = {
    "stop": ("STOP", PersonState()),
    "confirm forget": ("yes", PersonState(forget_pending=True)),
    "forget me": ("Forget me!", PersonState()),
    "data request": ("send me my data", PersonState(forget_pending=True)),
    "handoff": ("can I talk to a human?", PersonState(forget_pending=True)),
}


def test_every_keyword_has_an_example_here():
    # a new row of KEYWORDS gets its message here, so its flags are checked too
    assert {declared.name for declared in KEYWORDS} == set(SAID)


def _of_its_type(name: str, value: object) -> bool:
    if name not in FIELD_TYPES:  # a handoff_* attribute: the handoff's own writes check it
        return True
    hint = FIELD_TYPES[name]
    allowed = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    return any(isinstance(value, typing.get_origin(t) or t) for t in allowed)


@pytest.mark.parametrize("name", sorted(SAID))
def test_a_keywords_flags_are_state_attributes_of_their_fields_type(name):
    # given the message that is this keyword, in the state it is written in
    text, state = SAID[name]
    # when the turn asks what it is answered with
    answer = keyword(text, Memory(state=state), Words())
    # then every flag it sets is an attribute the store reads back, of its field's type
    unknown = set(answer.flags) - STATE_ATTRIBUTES
    assert not unknown, f"{name!r} sets {unknown}, which PersonState does not hold"
    wrong = {k: v for k, v in answer.flags.items() if not _of_its_type(k, v)}
    assert not wrong, f"{name!r} sets {wrong}, not of their fields' types"


def test_forget_me_sets_the_pending_flag_and_anything_else_clears_it():
    # the examples do reach the flags: "forget me" sets one, and a data request clears it
    assert keyword("forget me", Memory(), Words()).flags == {"forget_pending": True}
    pending = Memory(state=PersonState(forget_pending=True))
    assert keyword("send me my data", pending, Words()).flags == {"forget_pending": False}
