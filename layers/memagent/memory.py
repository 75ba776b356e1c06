"""The memory model, as plain data: what we keep per (agent, person).

Three layers: raw recent turns (`Turn`), one rolling `Summary` with the marker of the last turn
folded into it, and short durable `Fact`s. `PersonState` holds the counters and flags.
Storage lives in `memagent.store`; these types know nothing about DynamoDB.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

Role = Literal["user", "assistant"]


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

    @property
    def content(self) -> str:
        """The turn in a fold's transcript: a reply with what its tools did. (A turn's context
        gives the tools' lines apart, as their data: memagent.context.)"""
        if not self.tools:
            return self.text
        return f"[tools used: {'; '.join(self.tools)}]\n{self.text}"


@dataclass(frozen=True)
class Fact:
    """A short durable line about the person. Data about them, never an instruction."""

    text: str
    at: datetime  # when it was learned
    confirmed_at: datetime | None = None  # when a fold last found it still true (None: never)
    key: str = ""  # its id in the store ("": derived from the text, memagent.facts.fact_key)


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

    def expired(self, now: datetime, timeout: timedelta) -> bool:
        """HandoffTimeoutHours without an operator reply: the agent takes the chat back."""
        return now >= max(self.since, self.replied_at or self.since) + timeout


@dataclass(frozen=True)
class PersonState:
    last_seq: int = 0  # seq of the newest stored turn (0: none yet)
    marker: int = 0  # seq of the newest turn folded into the summary (0: none)
    compaction_due: bool = False  # the flag the stream filter matches
    last_number: str | None = None  # the whasp number the person last wrote to
    last_inbound_at: datetime | None = None  # when the person last wrote
    opted_out: bool = False
    opted_out_at: datetime | None = None
    erased_at: datetime | None = None  # set by forget(); older events are never stored again
    forget_pending: bool = False  # the person asked to be forgotten; we asked them to confirm
    alias_of: str | None = None  # this identifier's person lives under another key (identity.py)
    # this partition's own identifier now reaches another person (a recycled phone, a retired
    # one): the memory here stays its person's, reached by their other identifiers
    moved_to: str | None = None
    phone_key: str | None = None  # the keys of the phone and the BSUID that reach the person now
    bsuid_key: str | None = None
    # the event ids of the person's messages stored since the last reply, oldest first: the
    # next reply answers all of them at once (a burst of lines gets one answer)
    awaiting: tuple[str, ...] = ()
    handoff: Handoff | None = None  # a human has the chat (memagent.operator)
    # the person's day (UTC, of what they wrote) and its model turns and tokens, counted up to
    # the reply with seq `counted_seq`; `notice_day`: the day they were told of the limit
    budget_day: str | None = None
    day_turns: int = 0
    day_tokens: int = 0
    counted_seq: int = 0
    notice_day: str | None = None

    def handed_off(self, now: datetime, timeout: timedelta) -> bool:
        """Whether a human has the chat now: handed off, and not timed out."""
        return self.handoff is not None and not self.handoff.expired(now, timeout)

    @property
    def pending(self) -> int:
        """Turns stored after the summary marker."""
        return self.last_seq - self.marker


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
