"""What the person's words ask of the agent itself: STOP, "forget me" (and its "yes"), and
"what do you remember about me". Pure functions from text and memory to a decision; adding a
keyword touches this file only.

- STOP (or "unsubscribe") opts the person out: stored, never answered, and it drops what
  awaits an answer; the opt-out lifts only with a message written after it.
- "forget me" (the FORGET_KEYWORD setting) is answered with a question; "yes" to it erases,
  after a short goodbye; anything else keeps the memory.
- "what do you remember about me" is answered from the summary and facts, word for word.

The keywords that get an answer of their own never join a burst (memagent/bursts.py), nor let
the message before them wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memagent.memory import Memory, PersonState
    from memagent.provider import InboundMessage

STOP_WORDS = frozenset({"stop", "unsubscribe"})
CONFIRM_WORDS = frozenset({"yes", "y", "confirm", "yes forget me", "yes, forget me"})
RECALL_QUESTIONS = frozenset(
    {
        "what do you remember about me",
        "what do you know about me",
        "what do you remember",
    }
)
FORGET_QUESTION = (
    "Do you want me to forget everything about you: our messages, the summary and the notes "
    "I keep? Reply YES to confirm. Anything else keeps your memory as it is."
)
FORGOTTEN_REPLY = "Done. I have forgotten everything about you. If you write again, we start fresh."


@dataclass(frozen=True)
class Keyword:
    """What the message being answered asks for. `erase`: the person confirmed "forget me"
    (a goodbye, then the erasure). Otherwise `reply` is the fixed answer (None: the model
    answers) and `flags` the state flags stored with the reply."""

    erase: bool = False
    reply: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)


def normalised(text: str) -> str:
    return " ".join(text.casefold().split()).strip("!.?¿¡ ")


def is_stop(message: InboundMessage, text: str) -> bool:
    return message.kind == "text" and text.strip().casefold() in STOP_WORDS


def cancels_forget(text: str, state: PersonState) -> bool:
    """A "forget me" awaits its "yes", and this message is anything else: the memory stays."""
    return state.forget_pending and normalised(text) not in CONFIRM_WORDS


def keyword(text: str, memory: Memory, forget_keyword: str) -> Keyword:
    """The decision for the message being answered (`text`: the burst's last message)."""
    said = normalised(text)
    flags: dict[str, Any] = {}
    if memory.state.forget_pending:
        if said in CONFIRM_WORDS:
            return Keyword(erase=True)
        flags["forget_pending"] = False  # anything else keeps the memory
    if said == normalised(forget_keyword):
        return Keyword(reply=FORGET_QUESTION, flags={"forget_pending": True})
    if said in RECALL_QUESTIONS:
        return Keyword(reply=recall(memory, forget_keyword), flags=flags)
    return Keyword(flags=flags)


def answered_alone(message: InboundMessage, forget_keyword: str) -> bool:
    """A keyword that gets its own answer, as when sent alone ("forget me", "what do you
    remember about me"): it never joins a burst, nor lets the message before it wait."""
    if message.kind != "text" or not message.text:
        return False
    said = normalised(message.text)
    return said == normalised(forget_keyword) or said in RECALL_QUESTIONS


def waits(text: str, state: PersonState, forget_keyword: str) -> bool:
    """Whether a message just stored can leave its answer to a later one of its burst."""
    said = normalised(text)
    return not (
        said == normalised(forget_keyword)
        or said in RECALL_QUESTIONS
        or (state.forget_pending and said in CONFIRM_WORDS)
    )


def recall(memory: Memory, forget_keyword: str) -> str:
    """Answer "what do you remember about me?" from the facts and summary, word for word."""
    if not memory.facts and not memory.summary:
        return "I don't keep any notes about you yet, only our recent messages."
    lines = ["Here is what I remember about you:"]
    if memory.summary:
        lines.append(memory.summary.text)
    lines.extend(f"- {fact.text}" for fact in memory.facts)
    lines.append(f'To erase all of it, write "{forget_keyword}".')
    return "\n".join(lines)


def stopped_at(memory: Memory) -> datetime | None:
    """The time of the person's STOP message behind the opt-out in force, if we hold it. An
    opt-out learnt otherwise (whasp's 409) has no STOP time we trust: the next message lifts
    it, as before, and whasp refuses the reply if the block still holds."""
    state = memory.state
    if not state.opted_out or state.opted_out_at is None:
        return None
    stops = [
        t for t in memory.turns if t.role == "user" and t.text.strip().casefold() in STOP_WORDS
    ]
    if stops and stops[-1].at <= state.opted_out_at:
        return stops[-1].at
    return None
