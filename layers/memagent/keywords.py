"""What the person's words ask of the agent itself: STOP, "forget me" (and its "yes"), and
"what do you remember about me". Pure functions from text and memory to a decision; adding a
keyword touches this file only.

- STOP (or "unsubscribe") opts the person out: stored, never answered, and it drops what
  awaits an answer; the opt-out lifts only with a message written after it.
- "forget me" (the FORGET_KEYWORD setting) is answered with a question; "yes" to it erases,
  after a short goodbye; anything else keeps the memory.
- "what do you remember about me" is answered from the summary and facts, word for word.
- "can I talk to a human?" (HANDOFF_PHRASES, several languages by default) hands the chat to
  a human: answered once with HANDOFF_NOTICE, then the agent stores and says nothing until an
  operator hands it back or HandoffTimeoutHours pass without an operator reply
  (memagent/operator_handoff.py). STOP and "forget me" keep their meaning while a human has
  the chat.

The keywords that get an answer of their own never join a burst (memagent/bursts.py), nor let
the message before them wait.
"""

from __future__ import annotations

import unicodedata
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
# Phrases that ask for a human: a phrase of one word must be the whole message (give or take
# "a", "please"); a longer one may stand anywhere in a short message ("can I talk to a human?")
HANDOFF_PHRASES = (
    # English
    "human", "person", "real person", "agent", "operator",
    "talk to a human", "talk to a person", "talk to someone", "talk to a real person",
    "speak to a human", "speak to a person", "speak to someone", "speak with a human",
    "speak with a person", "human please", "customer service", "live agent",
    # Spanish
    "humano", "persona", "hablar con una persona", "hablar con un humano",
    "hablar con alguien", "hablar con un agente", "agente",
    # French
    "personne", "humain", "parler à quelqu'un", "parler à une personne",
    "parler à un humain", "conseiller",
    # Portuguese
    "atendente", "falar com uma pessoa", "falar com um humano", "falar com alguém",
    # German
    "mensch", "mit einem menschen sprechen", "mitarbeiter",
    # Italian
    "operatore", "parlare con una persona", "parlare con un operatore",
)  # fmt: skip
HANDOFF_NOTICE = (
    "I've asked a person from our team to take over. They'll answer you here as soon as they can."
)
_FILLER = frozenset(
    [
        "a",
        "an",
        "please",
        "pls",
        "plz",
        "un",
        "una",
        "une",
        "um",
        "uma",
        "ein",
        "einen",
        "svp",
        "stp",
        "por",
        "favor",
        "bitte",
        "per",
        "favore",
    ]
)
_SHORT = 12  # words: a longer message mentioning "a person" is about something else
FORGOTTEN_REPLY = "Done. I have forgotten everything about you. If you write again, we start fresh."


@dataclass(frozen=True)
class Keyword:
    """What the message being answered asks for. `erase`: the person confirmed "forget me"
    (a goodbye, then the erasure). Otherwise `reply` is the fixed answer (None: the model
    answers) and `flags` the state flags stored with the reply."""

    erase: bool = False
    reply: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    handoff: bool = False  # the person asked for a human: `reply` is the handoff notice


def normalised(text: str) -> str:
    return " ".join(text.casefold().split()).strip("!.?¿¡ ")


def is_stop(message: InboundMessage, text: str) -> bool:
    return message.kind == "text" and text.strip().casefold() in STOP_WORDS


def cancels_forget(text: str, state: PersonState) -> bool:
    """A "forget me" awaits its "yes", and this message is anything else: the memory stays."""
    return state.forget_pending and normalised(text) not in CONFIRM_WORDS


def _words(text: str) -> list[str]:
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    return "".join(c if c.isalnum() or c == "'" else " " for c in text).split()


def asks_for_human(text: str, phrases: tuple[str, ...] = HANDOFF_PHRASES) -> bool:
    """Whether the person asks for a human (see HANDOFF_PHRASES)."""
    words = _words(text)
    if not words or len(words) > _SHORT:
        return False
    bare = [w for w in words if w not in _FILLER]
    for phrase in phrases:
        wanted = _words(phrase)
        if len(wanted) == 1:
            if bare == wanted:
                return True
        elif any(words[i : i + len(wanted)] == wanted for i in range(len(words))):
            return True
    return False


def keeps_its_meaning(text: str, state: PersonState, forget_keyword: str) -> bool:
    """A message the agent still answers while a human has the chat: "forget me" and its
    "yes" (a person's rights do not wait for an operator). STOP is handled before."""
    said = normalised(text)
    return said == normalised(forget_keyword) or (state.forget_pending and said in CONFIRM_WORDS)


def keyword(
    text: str,
    memory: Memory,
    forget_keyword: str,
    handoff_phrases: tuple[str, ...] = (),
    handoff_notice: str = HANDOFF_NOTICE,
) -> Keyword:
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
    if handoff_phrases and asks_for_human(text, handoff_phrases):
        return Keyword(reply=handoff_notice, flags=flags, handoff=True)
    return Keyword(flags=flags)


def answered_alone(
    message: InboundMessage, forget_keyword: str, handoff_phrases: tuple[str, ...] = ()
) -> bool:
    """A keyword that gets its own answer, as when sent alone ("forget me", "what do you
    remember about me", "can I talk to a human?"): it never joins a burst, nor lets the
    message before it wait."""
    if message.kind != "text" or not message.text:
        return False
    said = normalised(message.text)
    return (
        said == normalised(forget_keyword)
        or said in RECALL_QUESTIONS
        or (bool(handoff_phrases) and asks_for_human(message.text, handoff_phrases))
    )


def waits(
    text: str, state: PersonState, forget_keyword: str, handoff_phrases: tuple[str, ...] = ()
) -> bool:
    """Whether a message just stored can leave its answer to a later one of its burst."""
    said = normalised(text)
    return not (
        said == normalised(forget_keyword)
        or said in RECALL_QUESTIONS
        or (state.forget_pending and said in CONFIRM_WORDS)
        or (bool(handoff_phrases) and asks_for_human(text, handoff_phrases))
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
