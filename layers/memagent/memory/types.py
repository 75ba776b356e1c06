"""The memory model, as plain data: what we keep per (agent, person).

Three layers: raw recent turns (`Turn`), one rolling `Summary` with the marker of the last turn
folded into it, and short durable `Fact`s. `PersonState` holds the counters and flags, each
classed by what it holds (`Kind`): the store's parser and what an erasure strips are derived
from that one definition (memagent/store/memory_store.py, memagent/store/erasure.py).
Storage lives in `memagent.store.memory_store`; these types know nothing about DynamoDB.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, Literal, NewType

Role = Literal["user", "assistant"]


@dataclass(frozen=True)
class Choices:
    """Options a reply offers the person to tap (issue 42): Meta's reply buttons (up to 3) or
    list (up to 10 rows) where interactive messages may go, numbered lines elsewhere. The
    reply's stored text already ends with the numbered lines (`numbered`), so memory, the
    context and a fold read what the person could choose from whatever the rendering."""

    options: tuple[str, ...]
    button: str = ""  # the label of a list's button, in the person's language

    @property
    def lines(self) -> str:
        return "\n".join(f"{n}. {option}" for n, option in enumerate(self.options, 1))

    def numbered(self, text: str) -> str:
        """`text` with the options as numbered lines (what a text-only rendering sends)."""
        return f"{text.rstrip()}\n\n{self.lines}"

    def body(self, text: str) -> str:
        """The reply's text without the numbered lines `numbered` added (an interactive
        message shows the options as buttons or rows instead)."""
        return text.removesuffix(self.lines).rstrip()


@dataclass(frozen=True)
class Turn:
    """One message of the conversation. `seq` is strictly increasing per person."""

    seq: int
    role: Role
    text: str
    at: datetime
    number: str | None = None  # the whasp number that carried it (audit), if known
    event_id: str | None = None  # the inbound whasp event id, for the person's messages
    author: str | None = None  # "human": an operator wrote this reply, not the agent
    tools: tuple[str, ...] = ()  # the agent's tool calls behind this reply, "name: summary"
    tokens: int = 0  # a model reply's tokens (input and output), counted at the next message
    choices: Choices | None = None  # the options this reply offered to tap (its text has them)
    # a reply sent as a voice note (issue 43): its text is what was spoken, and what memory keeps
    voice: bool = False

    @property
    def content(self) -> str:
        """The turn in a fold's transcript: a reply with what its tools did. (A turn's context
        gives the tools' lines apart, as their data: memagent.memory.context.)"""
        if not self.tools:
            return self.text
        return f"[tools used: {'; '.join(self.tools)}]\n{self.text}"


@dataclass(frozen=True)
class Fact:
    """A short durable line about the person. Data about them, never an instruction."""

    text: str
    at: datetime  # when it was learned
    confirmed_at: datetime | None = None  # when a fold last found it still true (None: never)
    key: str = ""  # its id in the store ("": derived from the text, memagent.memory.facts.fact_key)


@dataclass(frozen=True)
class Summary:
    """The earlier conversation in one paragraph; `marker` is the seq of the last folded turn."""

    text: str
    marker: int
    at: datetime | None = None


@dataclass(frozen=True)
class Handoff:
    """A human has the chat: the agent stores what the person writes and says nothing."""

    since: datetime
    reason: str  # "person" (they asked for a human) or "operator" (took it over)
    replied_at: datetime | None = None  # the operator's last reply
    waiting: int = 0  # the person's messages since the handoff or the operator's last reply
    by: str | None = None  # who took it over (an operator's username or an IAM ARN)

    def expired(self, now: datetime, timeout: timedelta) -> bool:
        """HandoffTimeoutHours without an operator reply: the agent takes the chat back."""
        return now >= max(self.since, self.replied_at or self.since) + timeout


# a time stored as epoch seconds (a Number: the TTL attribute), not ISO text
Epoch = NewType("Epoch", datetime)


class Kind(Enum):
    """What a state attribute holds, and so whether an erasure strips it (`erased`)."""

    # what the person wrote, did or asked, and where their memory stands (seqs, marker)
    CONTENT = ("content", True)
    # the day's budget: numbers, not content, so an erasure keeps them ("forget me" three
    # times must not give three days' turns); the next message's count reads them as any day's
    COUNTER = ("counter", False)
    LINK = ("link", True)  # a key that reaches the person: erased with them
    MARK = ("mark", False)  # what an erasure leaves: its mark, and where the key now leads

    def __init__(self, label: str, erased: bool):
        self.label, self.erased = label, erased


def _held(kind: Kind, default: Any = None) -> Any:
    """A state attribute and its kind (every PersonState field has one: `classed`)."""
    return field(default=default, metadata={"kind": kind})


@dataclass(frozen=True)
class PersonState:
    """The person's STATE item. Each field is one attribute of that item (the handoff: the
    `handoff_*` attributes) and says what it holds: a field without its Kind fails the store's
    parser and the erasure at import, so no attribute survives a "forget me" by omission."""

    last_seq: int = _held(Kind.CONTENT, 0)  # seq of the newest stored turn (0: none yet)
    marker: int = _held(Kind.CONTENT, 0)  # seq of the newest turn folded into the summary
    compaction_due: bool = _held(Kind.CONTENT, False)  # the flag the stream filter matches
    last_number: str | None = _held(Kind.CONTENT)  # the whasp number the person last wrote to
    last_inbound_at: datetime | None = _held(Kind.CONTENT)  # when the person last wrote
    opted_out: bool = _held(Kind.CONTENT, False)
    opted_out_at: datetime | None = _held(Kind.CONTENT)
    # set by forget(); older events are never stored again
    erased_at: datetime | None = _held(Kind.MARK)
    # the person asked to be forgotten; we asked them to confirm
    forget_pending: bool = _held(Kind.CONTENT, False)
    # this identifier's person lives under another key (identity.py)
    alias_of: str | None = _held(Kind.LINK)
    # this partition's own identifier now reaches another person (a recycled phone, a retired
    # one): the memory here stays its person's, reached by their other identifiers; an
    # erasure keeps it (it routes the identifier's new owner)
    moved_to: str | None = _held(Kind.MARK)
    # the keys of the phone and the BSUID that reach the person now
    phone_key: str | None = _held(Kind.LINK)
    bsuid_key: str | None = _held(Kind.LINK)
    # the event ids of the person's messages stored since the last reply, oldest first: the
    # next reply answers all of them at once (a burst of lines gets one answer)
    awaiting: tuple[str, ...] = _held(Kind.CONTENT, ())
    handoff: Handoff | None = _held(
        Kind.CONTENT
    )  # a human has the chat (memagent.operator.reading)
    # OperatorConsole=true: the RecentIndex keys, where to open their chat (memagent.memory.recent)
    recent_shard: str | None = _held(Kind.CONTENT)
    recent_at: str | None = _held(Kind.CONTENT)
    recent_address: str | None = _held(Kind.CONTENT)
    # the person's day (UTC, of what they wrote) and its model turns and tokens, counted up to
    # the reply with seq `counted_seq` (a seq of this memory: erased with it); `notice_day`:
    # the day they were told of the limit
    budget_day: str | None = _held(Kind.COUNTER)
    day_turns: int = _held(Kind.COUNTER, 0)
    day_tokens: int = _held(Kind.COUNTER, 0)
    counted_seq: int = _held(Kind.CONTENT, 0)
    notice_day: str | None = _held(Kind.COUNTER)
    # the characters synthesized into the day's voice replies (memagent.turn.voice)
    day_voice_chars: int = _held(Kind.COUNTER, 0)
    # the tokens the compactor's folds have spent on this memory (it adds them as it commits),
    # and how many of them the day's count has taken in (memagent.memory.budget.counted); both go
    # with the memory they count (its seqs start again after an erasure)
    fold_tokens: int = _held(Kind.CONTENT, 0)
    counted_fold_tokens: int = _held(Kind.CONTENT, 0)
    # the language the person last wrote in, of those the fixed replies have (memagent.turn.replies:
    # "es"); not `language`, a DynamoDB reserved word
    language_code: str | None = _held(Kind.CONTENT)
    # what the person asked replies to be ("voice": "answer in voice"; "text": "text please");
    # None: the operator's VoiceReplies decides (memagent.turn.voice)
    voice_choice: str | None = _held(Kind.CONTENT)
    # the name on the person's WhatsApp profile, as the provider last gave it (Meta's
    # contacts[].profile.name): the console shows it; erased and exported with them
    profile_name: str | None = _held(Kind.CONTENT)
    # a marketing stop/resume (Meta's user_preferences) and when (memagent.turn.events)
    marketing: str | None = _held(Kind.CONTENT)
    marketing_at: datetime | None = _held(Kind.CONTENT)
    updated_at: datetime | None = _held(Kind.CONTENT)  # the last turn's or fold's write
    # the CSAT question (memagent/turn/csat.py): a hand-back that asks for it keeps where it
    # goes (the handoff's address) and the handoff it follows (its start, the question's id);
    # once sent, the day of the conversation it rates and when; an answer within
    # CSAT_ANSWER_WINDOW is recorded, any other message clears it
    csat_address: str | None = _held(Kind.CONTENT)
    csat_for: str | None = _held(Kind.CONTENT)
    csat_day: str | None = _held(Kind.CONTENT)
    csat_asked_at: datetime | None = _held(Kind.CONTENT)
    # the retention's end (InactiveRetentionDays after they last wrote): the TTL's attribute,
    # epoch seconds; a mark never expires (it refuses late redeliveries)
    expires_at: Epoch | None = _held(Kind.CONTENT)

    def retention_passed(self, now: datetime) -> bool:
        """Their retention has ended, whether or not DynamoDB's TTL has deleted the item yet
        ("typically within two days"; until then it "still show[s] up in reads")."""
        return self.expires_at is not None and self.expires_at <= now

    def handed_off(self, now: datetime, timeout: timedelta) -> bool:
        """Whether a human has the chat now: handed off, and not timed out."""
        return self.handoff is not None and not self.handoff.expired(now, timeout)

    @property
    def pending(self) -> int:
        """Turns stored after the summary marker."""
        return self.last_seq - self.marker


def classed(state_type: type = PersonState) -> list[tuple[dataclasses.Field, Kind]]:
    """Every field of the state with its Kind; a field without one is a TypeError."""
    fields = []
    for each in dataclasses.fields(state_type):
        kind = each.metadata.get("kind")
        if not isinstance(kind, Kind):
            raise TypeError(
                f"{state_type.__name__}.{each.name}: say what it holds (memagent.memory.types.Kind)"
            )
        fields.append((each, kind))
    return fields


@dataclass(frozen=True)
class Memory:
    """Everything one turn needs, as read in one query."""

    state: PersonState = field(default_factory=PersonState)
    summary: Summary | None = None
    turns: tuple[Turn, ...] = ()  # after the marker, chronological
    facts: tuple[Fact, ...] = ()  # oldest first
    leftovers: tuple[int, ...] = ()  # seqs at/below the marker that clean-up has yet to delete

    @property
    def next_seq(self) -> int:
        """The seq of the next message: past the state's counter (which covers the reply slot
        reserved with the last message) and past every turn held, whichever is further."""
        return max(self.state.last_seq, *(t.seq for t in self.turns), *self.leftovers, 0) + 1

    def reply_to(self, seq: int) -> Turn | None:
        """The reply stored for the message with this seq: the assistant turn in its slot."""
        return next((t for t in self.turns if t.seq == seq + 1 and t.role == "assistant"), None)
