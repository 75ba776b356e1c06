"""A long, realistic-looking conversation for the benchmarks, and model stand-ins for it.

Deterministic (seeded), so two runs send the same texts. The person's messages vary from a word to
a paragraph and now and then say something durable ("I have a dog called Biscuit") that the
offline model's compaction picks up as a fact. The agent's replies are 200-400 characters, the
length of a real chat model's answer; the offline model's own replies are much shorter and would
flatter every size measured here.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

SHORT = ["ok", "haha yes", "thanks!", "true", "hmm maybe", "good morning", "night night", "lol"]
SMALL_TALK = [
    "Long shift today, the ward was chaos from the moment I walked in.",
    "Went for a run before work, only 4k but it felt good.",
    "Biscuit stole a whole sock this morning and ran around the garden with it.",
    "I keep thinking about whether I should sign up for the half marathon in October.",
    "My sister Jo is coming to stay this weekend, I need to tidy the spare room.",
    "Can't sleep. Night shifts mess with my head for days afterwards.",
    "Had the best coffee at the little place near the station, you'd love it.",
    "The new rota came out and I'm on nights again next week, ugh.",
    "Do you think it's normal to feel this nervous about something I actually want?",
    "Made a lasagne from scratch tonight, it took three hours but worth it.",
    "It rained the whole way home and my umbrella broke halfway.",
    "I finally booked the dentist appointment I've been avoiding for a year.",
    "Jo says I work too much. She's probably right but the money helps.",
    "Watched a documentary about octopuses, they are way smarter than I thought.",
    "Feeling a bit flat today, not sure why. Nothing bad happened.",
    "Ran 8k this morning! Legs are dead but I'm so proud.",
]
LONG = [
    "So the thing is, I've been a nurse for six years now and I love the patients but the "
    "system is exhausting, and this new job is a chance to do something different, more "
    "community based, with proper hours. But I'm scared I'll miss the ward and the people, "
    "and I don't know if I'm good enough for a team lead role.",
    "Okay long story: Biscuit got out of the garden yesterday because the gate latch broke, "
    "and I spent two hours walking around the park calling him, and in the end he was sitting "
    "outside the bakery on the corner like nothing happened. My heart is still racing a bit.",
    "I've been trying to plan the training for the half marathon: three runs a week, one long "
    "one on Sundays, building up by about ten percent a week. Does that sound sensible to you "
    "or am I going to injure myself again like last spring?",
    "Jo and I had a proper talk last night about mum, about how we split the visits and the "
    "money now that she needs more help. It went better than I feared but I still feel guilty "
    "that I live further away and can't do as much as Jo does.",
]
FACTS = [
    "My name is Maya, by the way.",
    "I work as a nurse at Leeds General.",
    "I have a dog called Biscuit, he's a beagle.",
    "I live in Leeds, near Hyde Park.",
    "I'm starting the new job at the community health team on the 3rd.",
    "I have a sister called Jo.",
]
QUESTIONS = [
    "Any tips for the first week?",
    "What would you do?",
    "How do I stop overthinking this?",
    "Is that silly?",
    "What should I eat before a long run?",
    "How do I say no to extra shifts without feeling bad?",
]

REPLY_SENTENCES = [
    "That sounds like a lot to carry, and it makes sense that you feel it.",
    "You've handled harder weeks than this one, and you did it with real care.",
    "One small step might be enough for today: pick the easiest thing and do just that.",
    "How are you sleeping at the moment? Night shifts can make everything feel heavier.",
    "I love that Biscuit keeps you on your toes, he sounds like a character.",
    "For the run, keep the long one easy enough that you could still chat.",
    "It might help to write down the two or three things that matter most this week.",
    "Being nervous about something you want usually means it matters to you.",
    "Jo sounds like a good sister to have in your corner.",
    "Would it help to plan something nice for after the shift, even something tiny?",
    "You don't have to decide all of it tonight; sleep on it and see how it feels.",
    "That's a real win, and it's worth noticing before you rush on to the next thing.",
    "What would you tell a friend in exactly your situation?",
    "Let me know how it goes, I'd like to hear.",
]


@dataclass(frozen=True)
class Said:
    text: str
    at: datetime


def conversation(turns: int, *, seed: int = 7, end: datetime | None = None) -> Iterator[Said]:
    """`turns` messages from the person, oldest first, the last one at `end` (default: a few
    minutes ago). 500 messages span about three weeks: the consumer skips events older than
    its dedupe ledger reaches back (LEDGER_TTL_DAYS, 30 by default)."""
    rng = random.Random(seed)
    gaps = []
    for index in range(turns):
        gap = rng.choice([2, 3, 5, 8, 15, 30, 60])
        if index and index % 60 == 0:
            gap = rng.randint(1, 2) * 24 * 60  # now and then the person is away for a day or two
        gaps.append(gap)
    end = end or datetime.now(UTC) - timedelta(minutes=5)
    at = end - timedelta(minutes=sum(gaps))
    facts = iter(FACTS)
    for index in range(turns):
        at += timedelta(minutes=gaps[index])
        roll = rng.random()
        if index % 45 == 1 and (fact := next(facts, None)):
            text = f"{fact} {rng.choice(SMALL_TALK)}"
        elif roll < 0.15:
            text = rng.choice(SHORT)
        elif roll < 0.25:
            text = rng.choice(LONG)
        elif roll < 0.65:
            text = rng.choice(SMALL_TALK)
        else:
            text = f"{rng.choice(SMALL_TALK)} {rng.choice(QUESTIONS)}"
        yield Said(text=text, at=at)


def iso(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def realistic_reply(request: dict[str, Any]) -> str:
    """200-400 characters, chosen by a hash of the request, so it is deterministic."""
    digest = hashlib.sha256(json.dumps(request.get("input"), sort_keys=True).encode()).digest()
    rng = random.Random(digest)
    target = rng.randint(200, 400)
    sentences: list[str] = []
    pool = list(REPLY_SENTENCES)
    rng.shuffle(pool)
    for sentence in pool:
        if len(" ".join([*sentences, sentence])) > 400:
            continue
        sentences.append(sentence)
        if len(" ".join(sentences)) >= target:
            break
    return " ".join(sentences)


FACT_BANK = [
    "Works long night shifts on a busy ward",
    "Is training for a half marathon in October",
    "Runs three times a week, a long run on Sundays",
    "Feels guilty about living further from her mother than Jo",
    "Has a beagle called Biscuit who escapes through a broken gate latch",
    "Loves the coffee at a small place near the station",
    "Has been a nurse for six years",
    "Finds it hard to say no to extra shifts",
    "Gets nervous before big changes she actually wants",
    "Cooks elaborate meals to unwind, lasagne from scratch",
    "Was injured last spring after increasing her running too fast",
    "Sleeps badly for days after night shifts",
    "Splits the care of her mother with her sister Jo",
    "Is starting a community health team lead role",
    "Booked a dentist appointment she had avoided for a year",
    "Enjoys nature documentaries, octopuses in particular",
]


def realistic_model(request: dict[str, Any]) -> str:
    """Replies of realistic length; compaction (structured output) as the offline model does,
    plus one fact from a bank per fold, so facts pile up as a real model's would (the offline
    model's patterns find only a few)."""
    from devstack.fake_openai import offline_model

    text_format = (request.get("text") or {}).get("format") or {}
    if text_format.get("type") != "json_schema":
        return realistic_reply(request)
    answer = json.loads(offline_model(request))
    if isinstance(answer, dict) and isinstance(answer.get("facts"), list):
        digest = hashlib.sha256(json.dumps(request.get("input")).encode()).digest()
        start = digest[0] % len(FACT_BANK)
        extra = [FACT_BANK[start]]
        suffix = f" (noted {digest[1:3].hex()})"  # distinct across folds, like real rewording
        answer["facts"] = [*answer["facts"], *(fact + suffix for fact in extra)]
    return json.dumps(answer)


def instant_model(request: dict[str, Any]) -> str:
    """The cheapest valid answer, for throughput runs."""
    text_format = (request.get("text") or {}).get("format") or {}
    if text_format.get("type") == "json_schema":
        return json.dumps({"summary": "Earlier: small talk.", "facts": []})
    return "ok"
