"""The compaction benchmark's baseline: the reference design's two model calls per fold.

The reference design updates the summary with one call and extracts facts with another, each
sent the folded messages. Both requests are built here from the same inputs our single
structured call gets (the current summary, the facts already kept, the folded turns), so their
sizes can be compared message for message.
"""

from __future__ import annotations

from typing import Any

SUMMARY_PROMPT = """You keep a running summary of a conversation between a user and an AI companion.
Update the existing summary with the new messages below. Write one paragraph of under 200 words.
Keep names, plans, feelings and open questions; leave out small talk."""

FACTS_PROMPT = """You extract long-term facts about the user from a conversation.
List durable facts worth remembering weeks from now: name, job, family, pets, health,
preferences, plans with dates. One short line per fact, in the third person. Do not repeat facts
that are already known. Return a JSON array of strings; return [] if there are none."""


def transcript(turns: list[Any]) -> str:
    return "\n".join(f"{'User' if t.role == 'user' else 'Assistant'}: {t.text}" for t in turns)


def summary_request(model: str, summary: str, turns: list[Any]) -> dict[str, Any]:
    return {
        "model": model,
        "store": False,
        "instructions": SUMMARY_PROMPT,
        "input": f"Existing summary:\n{summary or '(none)'}\n\nNew messages:\n{transcript(turns)}",
    }


def facts_request(model: str, facts: list[str], turns: list[Any]) -> dict[str, Any]:
    known = "\n".join(f"- {fact}" for fact in facts) or "(none)"
    return {
        "model": model,
        "store": False,
        "instructions": FACTS_PROMPT,
        "input": f"Known facts:\n{known}\n\nConversation:\n{transcript(turns)}",
    }


def requests(model: str, summary: str, facts: list[str], turns: list[Any]) -> list[dict]:
    """The reference's two calls for one fold."""
    return [summary_request(model, summary, turns), facts_request(model, facts, turns)]
