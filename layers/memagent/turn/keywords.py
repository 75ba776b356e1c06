"""What the person's words ask of the agent itself: STOP, "forget me" (and its "yes"), "send me
my data" and "can I talk to a human?". Pure functions from text and memory to a
decision. Each keyword is declared once, in KEYWORDS, with everything the turn asks of it (how it
matches, whether it is answered alone, whether it keeps its meaning while a human has the chat,
its answer): adding one touches this table (CONTRIBUTING.md, "Adding a keyword").

- STOP (OPT_OUT_WORDS: "stop", "unsubscribe" and their like in the languages of the handoff
  phrases) opts the person out: stored, never answered, and it drops what awaits an answer; the
  opt-out lifts only with a message written after it.
- "forget me" (the FORGET_KEYWORD setting) is answered with a question; "yes" to it (in the
  languages of the fixed replies: CONFIRM_WORDS) erases, after a short goodbye; anything else
  keeps the memory.
- "send me my data" (DATA_REQUESTS) is answered with how to ask for a copy: the right of access
  is the operators' export (docs/privacy.md). "What do you remember about me?" is no keyword: the
  model answers it, with the notes about the person in its instructions like every turn.
- "can I talk to a human?" (HANDOFF_PHRASES, six languages by default) hands the chat to a
  human: answered once with the handoff notice, then the agent stores and says nothing until an
  operator hands it back or HandoffTimeoutHours pass without an operator reply
  (memagent/operator/handoff.py). STOP and "forget me" keep their meaning while a human has
  the chat. The phrases are a fast path for explicit requests only, with no model call: a
  request in the person's own words ("can someone from the clinic call me?") is the model's to
  understand, and it asks for a human with the built-in request_human tool
  (memagent/model/tools.py), which hands the chat over the same way. A message that only names
  the service or a person ("your customer service is great", "is the dentist a real person?")
  is never one.

Every keyword but the handoff phrases is a whole message: one normalisation (`normalised`: NFKC,
case, punctuation and emoji around and between the words) decides, so "STOP.", "Stop!" and a
full-width STOP (U+FF33...) are STOP, and "please don't stop" is not. The keywords that get an
answer of their own never join a burst (memagent/turn/bursts.py), nor let the message before them
wait. Their answers are fixed replies, named here and written, per language, in
memagent/turn/replies.toml.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from memagent.memory import PersonState

if TYPE_CHECKING:
    from memagent.memory import Memory
    from memagent.providers import InboundMessage
    from memagent.turn.replies import Replies

# the CSAT question's options (memagent/turn/csat.py), in the order it offers them, each with
# its score (GET /outcomes averages them: 3 is the best); a text of memagent/turn/replies.toml
CSAT_OPTIONS = (("csat_good", 3), ("csat_okay", 2), ("csat_bad", 1))
CSAT_ANSWER_WINDOW = timedelta(hours=24)  # a tap later than this is an ordinary message

# always an opt-out, whatever OPT_OUT_WORDS says: whasp opts a chat out on STOP itself
# (docs/whasp.md), and on Meta's Cloud API "STOP" is ours to honour (no opt-out event for chats)
STOP_WORDS = ("stop", "unsubscribe")
# OPT_OUT_WORDS' default: a whole message that says "stop messaging me" in the languages of the
# handoff phrases, and nothing a person would write meaning anything else ("cancel", "end",
# "basta" may be about a booking or a meal: left out)
OPT_OUT_WORDS = (
    *STOP_WORDS,
    "stop all",  # English
    "baja", "darme de baja",  # Spanish
    "arrêt", "désabonner", "me désabonner", "désinscription",  # French
    "parar", "descadastrar",  # Portuguese
    "stopp", "abmelden", "abbestellen",  # German
    "disiscrivimi", "annulla iscrizione",  # Italian
)  # fmt: skip
# "yes" to "forget me", as the forget question asks for it in each language of the replies
CONFIRM_WORDS = frozenset(
    {
        "yes", "y", "confirm", "yes forget me", "yes, forget me",  # English
        "sí", "si",  # Spanish, Italian (sì)
        "sì", "oui", "sim", "ja",  # Italian, French, Portuguese, German
    }
)  # fmt: skip
# a whole message asking for the person's data (normalised, give or take _FILLER words)
DATA_REQUESTS = (
    # English
    "send me my data", "give me my data", "export my data", "download my data", "my data",
    "send me my personal data", "i want my data", "what data do you have on me",
    "what data do you have about me", "what personal data do you have about me",
    # Spanish
    "mis datos", "envíame mis datos", "enviadme mis datos", "quiero mis datos",
    "qué datos tienen de mí", "mándame mis datos",
    # French
    "mes données", "envoyez-moi mes données", "envoie-moi mes données", "je veux mes données",
    "quelles données avez-vous sur moi",
    # Portuguese
    "meus dados", "me envie meus dados", "envie meus dados", "quero meus dados",
    "que dados vocês têm sobre mim",
    # German
    "meine daten", "schicken sie mir meine daten", "schick mir meine daten",
    "ich möchte meine daten", "welche daten haben sie über mich",
    # Italian
    "i miei dati", "inviami i miei dati", "mandami i miei dati", "voglio i miei dati",
    "quali dati avete su di me",
)  # fmt: skip
# Explicit requests for a human, the fast path (see the module docstring). A phrase of one or
# two words (give or take _FILLER) must be the whole message: "Human!", "a real person please";
# a longer one, a request with its verb, may stand in a short message ("can I talk to a human?")
# unless a negation comes just before it ("I don't want to talk to a human"). Left out, for the
# model: what also means something else ("person": "a table for one person"; "personne":
# nobody; "Mensch!": an exclamation; "customer service", "someone").
HANDOFF_PHRASES = (
    # English
    "human", "agent", "operator", "real person", "live agent", "human agent",
    "talk to a human", "talk to a person", "talk to a real person", "talk to an agent",
    "speak to a human", "speak to a person", "speak to a real person", "speak to an agent",
    "speak with a human", "speak with a person", "talk with a human", "talk with a person",
    "chat with a human",
    # Spanish
    "humano", "agente", "operador", "persona real",
    "hablar con una persona", "hablar con un humano", "hablar con un agente",
    "hablar con un operador",
    # French
    "humain", "conseiller", "vraie personne",
    "parler à une personne", "parler à un humain", "parler à un conseiller",
    "parler avec une personne", "parler avec un humain",
    # Portuguese
    "atendente", "pessoa real",
    "falar com uma pessoa", "falar com um humano", "falar com um atendente",
    "falar com um agente",
    # German
    "mitarbeiter", "echter mensch",
    "mit einem menschen sprechen", "mit einem mitarbeiter sprechen",
    "mit einer person sprechen", "mit einem menschen reden", "mit einem mitarbeiter reden",
    # Italian
    "operatore", "umano", "persona reale",
    "parlare con una persona", "parlare con un operatore", "parlare con un umano",
)  # fmt: skip
# the words just before a request that take it back, in the languages of the phrases
_NEGATIONS = frozenset(
    {
        "not", "don't", "dont", "never", "no", "without", "doesn't", "didn't", "won't",
        "nunca", "sin", "tampoco",  # Spanish ("no" above)
        "ne", "pas", "jamais", "sans",  # French
        "não", "nao", "sem",  # Portuguese
        "nicht", "kein", "keine", "keinen", "keinem", "nie", "niemals", "ohne",  # German
        "non", "mai", "senza",  # Italian
    }
)  # fmt: skip
_NEGATION_REACH = 3  # words before a request that can take it back
_WHOLE = 2  # a phrase of this many words or fewer (filler aside) is a whole message
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


# "answer in voice" and "text please" (VoiceReplies not off: memagent/turn/voice.py), whole
# messages in the languages of the fixed replies
VOICE_ON = (
    "answer in voice", "reply in voice", "voice please", "send voice notes", "voice notes please",
    "responde con voz", "respóndeme con audio", "audio por favor", "notas de voz por favor",
    "réponds en vocal", "répondez en vocal", "vocal stp", "messages vocaux svp",
    "responda em áudio", "responde em áudio", "áudio por favor", "mensagens de voz por favor",
    "antworte mit sprachnachricht", "sprachnachricht bitte", "sprachnachrichten bitte",
    "rispondi con un vocale", "vocale per favore", "messaggi vocali per favore",
)  # fmt: skip
VOICE_OFF = (
    "text please", "answer in text", "reply in text", "no voice notes", "text only",
    "texto por favor", "responde con texto", "sin audios",
    "texte svp", "texte s'il vous plaît", "réponds par écrit", "pas de vocal",
    "texto por favor", "responda por escrito", "sem áudio",
    "text bitte", "antworte schriftlich", "keine sprachnachrichten",
    "testo per favore", "rispondi per iscritto", "niente vocali",
)  # fmt: skip


class Words(Protocol):
    """The settings the keywords read (memagent.turn.settings.ConsumerSettings)."""

    # properties: the settings are frozen dataclasses, whose fields mypy reads as read-only
    @property
    def forget_keyword(self) -> str: ...
    @property
    def handoff_phrases(self) -> tuple[str, ...]: ...
    @property
    def opt_out_words(self) -> tuple[str, ...]: ...
    @property
    def voice_replies(self) -> str: ...
    @property
    def replies(self) -> Replies: ...


@dataclass(frozen=True)
class Keyword:
    """What the message being answered asks for. `erase`: the person confirmed "forget me"
    (a goodbye, then the erasure). Otherwise `reply` names the fixed answer, a text of
    memagent/turn/replies.toml (None: the model answers), and `flags` are the state flags
    stored with the reply."""

    erase: bool = False
    reply: str | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    handoff: bool = False  # the person asked for a human: `reply` is the handoff notice
    csat: tuple[str, int] | None = None  # the person rated a conversation: (its day, score)


@dataclass(frozen=True)
class Declared:
    """One keyword and what the turn asks of it.

    `matches`: the message (normalised), the person's state and the settings -> whether it is
    this keyword. `alone`: answered on its own, as when sent alone: it never joins a burst, nor
    lets the message before it wait. `in_handoff`: it keeps its meaning while a human has the
    chat. `answer`: the decision when it is the message answered (None: never answered, STOP);
    `flags` are those the message sets anyway (a pending "forget me" cancelled)."""

    name: str
    matches: Callable[[str, PersonState, Words], bool]
    alone: bool
    in_handoff: bool
    answer: Callable[[Memory, Words, dict[str, Any]], Keyword] | None
    text_only: bool = False  # a voice note's transcript never matches it


def _said(words: tuple[str, ...] | frozenset[str] | str) -> frozenset[str]:
    return frozenset(normalised(w) for w in ((words,) if isinstance(words, str) else words))


def _voice_choice(reply: str, choice: str, flags: dict[str, Any]) -> Keyword:
    """The person chose voice notes or text for the agent's replies: stored with the `reply`
    that says so."""
    return Keyword(reply=reply, flags={**flags, "voice_choice": choice})


KEYWORDS: tuple[Declared, ...] = (
    # first: a STOP ends everything, a pending "forget me" or a human's chat included
    Declared(
        "stop",
        matches=lambda said, state, words: said in _said((*STOP_WORDS, *words.opt_out_words)),
        alone=False,  # it joins no burst: it drops it (nothing is sent after a STOP)
        in_handoff=True,
        answer=None,
        text_only=True,
    ),
    Declared(
        "confirm forget",
        matches=lambda said, state, words: state.forget_pending and said in _said(CONFIRM_WORDS),
        alone=True,
        in_handoff=True,  # a person's rights do not wait for an operator
        answer=lambda memory, words, flags: Keyword(erase=True),
    ),
    Declared(
        "forget me",
        matches=lambda said, state, words: said == normalised(words.forget_keyword),
        alone=True,
        in_handoff=True,
        answer=lambda memory, words, flags: Keyword(
            reply="forget_question", flags={"forget_pending": True}
        ),
    ),
    Declared(
        "csat answer",
        matches=lambda said, state, words: csat_score(said, state, words) is not None,
        alone=True,
        in_handoff=False,  # a human has the chat again: theirs to read
        # the score and the day it rates: `keyword`, which has the message
        answer=lambda memory, words, flags: Keyword(reply="csat_thanks", flags=flags),
    ),
    Declared(
        "data request",
        matches=lambda said, state, words: asks_for_data(said),
        alone=True,
        in_handoff=False,  # the human who has the chat answers it
        answer=lambda memory, words, flags: Keyword(reply="data_request", flags=flags),
    ),
    Declared(
        "voice on",
        matches=lambda said, state, words: words.voice_replies != "off" and said in _said(VOICE_ON),
        alone=True,
        in_handoff=False,
        answer=lambda memory, words, flags: _voice_choice("voice_on", "voice", flags),
    ),
    Declared(
        "voice off",
        matches=lambda said, state, words: (
            words.voice_replies != "off" and said in _said(VOICE_OFF)
        ),
        alone=True,
        in_handoff=False,
        answer=lambda memory, words, flags: _voice_choice("voice_off", "text", flags),
    ),
    Declared(
        "handoff",
        matches=lambda said, state, words: asks_for_human(said, words.handoff_phrases),
        alone=True,
        in_handoff=False,
        answer=lambda memory, words, flags: Keyword(
            reply="handoff_notice", flags=flags, handoff=True
        ),
    ),
)


def words_of(text: str) -> list[str]:
    """The message's words: NFKC (a full-width STOP is "STOP"), case folded, punctuation
    and emoji dropped; an apostrophe inside a word stays ("quelqu'un")."""
    text = unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'")
    spaced = "".join(c if c.isalnum() or c == "'" else " " for c in text)
    return [w for w in (w.strip("'") for w in spaced.split()) if w]


def normalised(text: str) -> str:
    """The one form every keyword is matched in: "Stop!", "STOP." and "stop 🛑" are "stop"."""
    return " ".join(words_of(text))


def meaning(
    text: str, state: PersonState, settings: Words, *, text_message: bool = True
) -> Declared | None:
    """The keyword this message is (the first in KEYWORDS that matches), or None.
    `text_message`: False for a voice note's transcript or a photo's description."""
    said = normalised(text)
    return next(
        (
            k
            for k in KEYWORDS
            if (text_message or not k.text_only) and k.matches(said, state, settings)
        ),
        None,
    )


def is_stop(message: InboundMessage, text: str, settings: Words) -> bool:
    """The person opts out: a text message that is one of the opt-out words, alone."""
    found = meaning(text, PersonState(), settings, text_message=message.kind == "text")
    return found is not None and found.name == "stop"


def cancels_forget(text: str, state: PersonState) -> bool:
    """A "forget me" awaits its "yes", and this message is anything else: the memory stays."""
    return state.forget_pending and normalised(text) not in _said(CONFIRM_WORDS)


def asks_for_human(text: str, phrases: tuple[str, ...] = HANDOFF_PHRASES) -> bool:
    """Whether the person asks for a human in so many words (see HANDOFF_PHRASES)."""
    said = words_of(text)
    if not said or len(said) > _SHORT:
        return False
    bare = [w for w in said if w not in _FILLER]
    for phrase in phrases:
        wanted = words_of(phrase)
        if len([w for w in wanted if w not in _FILLER]) <= _WHOLE:
            if bare == [w for w in wanted if w not in _FILLER]:
                return True
            continue
        for at in range(len(said) - len(wanted) + 1):
            before = said[max(0, at - _NEGATION_REACH) : at]
            if said[at : at + len(wanted)] == wanted and not _NEGATIONS & set(before):
                return True
    return False


def asks_for_data(said: str) -> bool:
    """Whether the whole message (normalised) asks for the person's data (DATA_REQUESTS)."""
    bare = " ".join(w for w in said.split() if w not in _FILLER)
    return bare in _said(DATA_REQUESTS)


def keeps_its_meaning(text: str, state: PersonState, settings: Words) -> bool:
    """A message the agent still heeds while a human has the chat: STOP, "forget me" and its
    "yes" (a person's rights do not wait for an operator)."""
    found = meaning(text, state, settings)
    return found is not None and found.in_handoff


def csat_score(said: str, state: PersonState, words: Words) -> int | None:
    """The score a message (normalised) answers the CSAT question with: its option's number
    ("1"), its words in any language of the replies ("good", "bueno"), or both ("1 good"); None
    when no question awaits an answer (none sent, answered, or over CSAT_ANSWER_WINDOW ago)."""
    asked = state.csat_asked_at
    if not state.csat_day or asked is None or datetime.now(UTC) - asked > CSAT_ANSWER_WINDOW:
        return None
    texts = words.replies.texts
    for number, (name, score) in enumerate(CSAT_OPTIONS, 1):
        options = {normalised(t) for t in texts[name].values()}
        if said in {str(number), *options, *(f"{number} {o}" for o in options)}:
            return score
    return None


def keyword(text: str, memory: Memory, settings: Words) -> Keyword:
    """The decision for the message being answered (`text`: the burst's last message)."""
    # anything but its "yes" cancels a pending "forget me": the memory stays
    flags: dict[str, Any] = {"forget_pending": False} if memory.state.forget_pending else {}
    if memory.state.csat_day:  # anything but an answer leaves the rating question unanswered
        flags.update(csat_day=None, csat_asked_at=None, csat_address=None)
    found = meaning(text, memory.state, settings)
    if found is None or found.answer is None:
        return Keyword(flags=flags)
    decided = found.answer(memory, settings, flags)
    score = csat_score(normalised(text), memory.state, settings)
    if found.name == "csat answer" and score is not None and memory.state.csat_day:
        return dataclasses.replace(decided, csat=(memory.state.csat_day, score))
    return decided


def answered_alone(message: InboundMessage, settings: Words) -> bool:
    """A keyword that gets its own answer, as when sent alone ("forget me", "send me my data",
    "can I talk to a human?"): it never joins a burst, nor lets the
    message before it wait. (The consumer's look ahead: the state is not read yet.)"""
    if message.kind != "text" or not message.text:
        return False
    found = meaning(message.text, PersonState(), settings)
    return found is not None and found.alone


def waits(text: str, state: PersonState, settings: Words) -> bool:
    """Whether a message just stored can leave its answer to a later one of its burst."""
    found = meaning(text, state, settings)
    return found is None or not found.alone


def stopped_at(memory: Memory, settings: Words) -> datetime | None:
    """The time of the person's STOP message behind the opt-out in force, if we hold it. An
    opt-out learnt otherwise (whasp's 409) has no STOP time we trust: the next message lifts
    it, as before, and whasp refuses the reply if the block still holds."""
    state = memory.state
    if not state.opted_out or state.opted_out_at is None:
        return None
    opt_outs = _said((*STOP_WORDS, *settings.opt_out_words))
    stops = [t for t in memory.turns if t.role == "user" and normalised(t.text) in opt_outs]
    if stops and stops[-1].at <= state.opted_out_at:
        return stops[-1].at
    return None
