"""`make demo`: the whole pipeline on this machine, a scripted conversation, checked as it goes.

    python -m devstack.demo [--level quiet|normal|verbose] [--log local/stack.log]
                            [--provider whasp|meta]        (make demo PROVIDER=meta)
                            [--model-provider openai|bedrock]  (make demo MODEL_PROVIDER=bedrock)

No AWS account, no network and no API key needed: the local stack (devstack.stack) runs the real
handlers behind moto, a local whasp and, unless OPENAI_BASE_URL or OPENAI_API_KEY is set, an
offline stand-in for the model that is not AI and says so in every reply. The demo shows, as it
happens: messages in and replies out; compaction firing once 40 turns are pending, with the
summary and facts it produced; the person returning three weeks later; a PDF price list whose
text the next answer uses; a replaced business number; an opt-out; Maya asking for a human, an
operator answering through the admin API and handing back; and an operator's forget that leaves
nothing of the person behind.

With the Meta provider the same story runs through Meta-shaped notifications and a local Graph
API stand-in, and step 4 is Meta's identity change instead: Maya's business-scoped user id
(BSUID) appears beside her phone, she then writes with the BSUID alone (a username), Meta
regenerates her BSUID, and she keeps one memory throughout; then she changes her number and the
carrier recycles the old one: its new owner is a stranger, Maya (from her new number) is not.

Each expectation is checked; the exit status is 1 if any failed. Checks that depend on the
wording of the reply are made only with the offline stand-in, whose replies are predictable.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from devstack.chat import persona_options, persona_parameters
from devstack.clock import SQS_CLOCK
from devstack.console import Console
from devstack.fake_openai import notes_of, turns_of
from devstack.ogg import opus_seconds
from devstack.pdf import pdf
from devstack.stack import LOG_PATH, DevStack

MAYA = "+447700900123"
MAYA_BSUID = "GB.13491208655302741918"
MAYA_NEW_BSUID = "GB.20571208655302749900"
# what Maya told in her first week, which her context must keep under any identifier
FIRST_WEEK = ("First week at the new job",)
MAYA_NEW_PHONE = "+447700900999"
STRANGER_BSUID = "GB.31415926535897932384"  # the recycled number's new owner
NEW_NUMBER = "+14155550199"
AGENT = "Coach"

# Three weeks ago: twenty messages, so that the agent's twentieth reply makes 40 pending turns.
FIRST_CONVERSATION = [
    "Hi! My name is Maya.",
    "I work as a nurse at St Mary's, mostly nights.",
    "I have a dog called Biscuit.",
    "I live in Leeds, near the park.",
    "Biscuit chewed my running shoes again this morning.",
    "Night shifts are exhausting this week.",
    "Any tips for sleeping during the day?",
    "Thanks, I'll try blackout curtains.",
    "Big news: I'm starting a new job on Monday, at the children's hospital!",
    "Day shifts at last, I can't wait.",
    "I'm a bit nervous about the new team though.",
    "My sister Jess says I'll be fine.",
    "We're going for a walk with Biscuit on Sunday.",
    "I still need to buy proper work shoes.",
    "Do you think I should bring cake on my first day?",
    "Good idea, lemon drizzle it is.",
    "Packing my bag tonight.",
    "Badge, lanyard, water bottle, snacks.",
    "Going to bed early for once.",
    "Night! Wish me luck.",
]


# Section 4: an opener, then three lines sent while the agent is still answering it.
BURST_OPENER = "Oh, one more thing about Saturday."
BURST = ["hey", "so about the park run tomorrow", "I can't make it at 9, can we do 10?"]


class Demo:
    def __init__(self, stack: DevStack, console: Console):
        self.stack = stack
        self.console = console
        self.check = console.check
        self.offline = stack.model.offline
        self.meta = stack.meta
        self.phone: str | None = MAYA  # who Maya is in the payloads (Meta: phone and/or BSUID)
        self.bsuid: str | None = None

    # ------------------------------------------------------------------ helpers

    @property
    def address(self) -> str:
        """Where replies to Maya go: her phone, else (Meta, username only) her BSUID."""
        return self.phone or self.bsuid or MAYA

    def talk(self, text: str, *, expect_reply: bool = True, at: Any = None) -> dict | None:
        """Maya writes; print her message and, once it came, the agent's reply."""
        address = self.address
        before = len(self.stack.replies_to(address))
        self.console.say("Maya", text, style="cyan")
        self.stack.send_message(self.phone, text, at=at, bsuid=self.bsuid)
        if expect_reply:
            if not self.stack.wait_for_replies(address, before + 1, timeout=120):
                self.check(False, "a reply arrived within 120 s")
                return None
        else:
            self.stack.wait_idle(timeout=120)
        replies = self.stack.replies_to(address)[before:]
        for reply in replies:
            self.console.say(AGENT, reply["text"], style="green")
        return replies[-1] if replies else None

    def model_calls(self) -> list[dict[str, Any]]:
        """What the offline stand-in received (the requests the real handlers made)."""
        return self.stack.openai.calls() if self.stack.openai is not None else []

    def _replies(self, since: int) -> list[dict[str, Any]]:
        """The reply requests (not compaction's) the stand-in received after the first `since`."""
        return [
            call for call in self.model_calls()[since:] if "format" not in (call.get("text") or {})
        ]

    def _check_context(
        self, before: int, words: tuple[str, ...], claim: str, *, holds: bool = True
    ) -> None:
        """With the offline model (whose requests we read): whether the input of the last model
        call since `before` holds any of `words`, as `claim` says (`holds`) or denies."""
        if not self.offline:
            return
        said = _last_input(self._replies(before))
        self.check(any(w in str(text) for text in said for w in words) == holds, claim)

    def _check_same_memory(self, pk_before: str) -> None:
        """Maya is still the person she was before her identifiers changed, summary and all."""
        view = self.stack.view(MAYA)
        self.check(view.pk == pk_before and bool(view.summary), "same person, same memory")

    # ------------------------------------------------------------------ the story

    def run(self) -> None:
        self.first_conversation()
        self.returning_after_weeks()
        self.burst()
        self.booking()
        self.reminder()
        self.price_list()
        if self.meta:
            self.voice_note()
            self.new_identifiers()
            self.recycled_number()
        else:
            self.replaced_number()
        self.opt_out()
        self.handoff()
        self.forget()

    def first_conversation(self) -> None:
        self.console.heading("1. Maya chats with the agent (three weeks ago)")
        self.console.note(
            f"Each message is signed like {'Meta' if self.meta else 'whasp'} signs it, POSTed to "
            "the local webhook, queued in Maya's FIFO group, remembered by the consumer and "
            "answered once."
        )
        # The last of them exactly three weeks (and a few minutes) before "now".
        start = self.stack.now() - timedelta(days=21, minutes=3 * len(FIRST_CONVERSATION))
        for index, text in enumerate(FIRST_CONVERSATION):
            self.talk(text, at=start + timedelta(minutes=3 * index))
        replies = self.stack.replies_to(MAYA)
        self.check(
            len(replies) == len(FIRST_CONVERSATION),
            f"{len(FIRST_CONVERSATION)} messages in, {len(replies)} replies out, one each",
        )

        self.console.heading("2. Compaction: 40 turns pending, the oldest folded away")
        self.stack.wait_idle(timeout=120)
        view = self.stack.view(MAYA)
        self.console.note(
            f"turns stored: {view.last_seq}; folded into the summary: 1-{view.marker}; "
            f"still raw: {len(view.turns)}"
        )
        self.check(view.marker > 0, f"the compactor fired and moved the marker to {view.marker}")
        self.check(
            all(seq > view.marker for seq, _, _ in view.turns),
            "the folded turns' raw text is deleted; the newest ones stay raw",
        )
        self.console.print(self.console.style("    Summary:", "bold"))
        self.console.note(view.summary or "(none)", style="italic")
        self.console.print(self.console.style("    Facts:", "bold"))
        for fact in view.facts or ["(none)"]:
            self.console.note(f"- {fact}", style="italic")
        self.check(bool(view.summary), "a summary stands in for the folded turns")
        if self.offline:
            self.check(
                any("Biscuit" in fact for fact in view.facts),
                "the durable facts were extracted (e.g. the dog's name)",
            )

    def returning_after_weeks(self) -> None:
        self.console.heading("3. Three weeks later, Maya writes again")
        if self.meta:
            self.bsuid = MAYA_BSUID
            self.console.note(
                "Meta now sends her business-scoped user id (BSUID) beside her phone: "
                "she is her BSUID from now on, and her memory follows"
            )
        before = len(self.model_calls())
        reply = self.talk("Hi again! First week at the new job is done.")
        calls = self._replies(before)
        if self.offline and calls:
            line = next((x for x in notes_of(calls[-1]).splitlines() if "last wrote" in x), "")
            self.console.note(f'the context told the model: "{line}"')
            self.check("21 days" in line, "the days-since line reached the model")
            self.check(
                reply is not None and "21 days" in reply["text"],
                "the (offline) reply picks the thread up with the gap",
            )
        before = len(self.model_calls())
        self.talk("What do you remember about me?")
        calls = self._replies(before)
        self.console.note("(the model answers that, with its notes about Maya in its instructions)")
        if self.offline:
            self.check(bool(calls), "the recall question reached the model")

    def burst(self) -> None:
        self.console.heading("4. A burst: three lines while the agent is still typing")
        self.console.note(
            "While one of Maya's messages is being answered, her next ones wait in her FIFO "
            "group and reach the consumer together: each line is remembered, and one reply "
            "answers all three, written after the model saw all of them."
        )
        self.stack.wait_idle(timeout=120)
        address, before = self.address, len(self.stack.replies_to(self.address))
        calls_before = len(self.model_calls())
        slow = self.stack.openai is not None and self.stack.queue_delivery is not None
        if slow:  # the offline model answers at once: give it a real model's pace for this turn
            self.stack.openai.delay_seconds = 2.0
        self.console.say("Maya", BURST_OPENER, style="cyan")
        self.stack.send_message(self.phone, BURST_OPENER, bsuid=self.bsuid)
        if slow:  # until the consumer has stored the opener and waits on the model
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not any(
                text == BURST_OPENER for _, _, text in self.stack.view(MAYA).turns
            ):
                time.sleep(0.05)
        for line in BURST:
            self.console.say("Maya", line, style="cyan")
            self.stack.send_message(self.phone, line, bsuid=self.bsuid)
        if slow:
            self.stack.openai.delay_seconds = 0.0
        if not self.stack.wait_for_replies(address, before + 2, timeout=120):
            self.check(False, "the replies arrived within 120 s")
            return
        self.stack.wait_idle(timeout=120)
        replies = self.stack.replies_to(address)[before:]
        for reply in replies:
            self.console.say(AGENT, reply["text"], style="green")
        turns = self.stack.view(MAYA).turns
        said = [text for _, role, text in turns if role == "user"][-len(BURST) :]
        self.check(said == BURST, "each of the three lines is remembered, in order")
        if not slow:
            return  # a real model's timing decides how the lines are batched: shown, not checked
        self.check(
            len(replies) == 2,
            f"{len(replies)} replies: one to the opener, one to the three lines behind it",
        )
        calls = self._replies(calls_before)
        self.check(
            len(calls) == 2 and _last_input(calls)[-3:] == BURST,
            "one model call for the burst, its input ending with all three lines in order",
        )

    def reminder(self) -> None:
        self.console.heading("5b. Maya asks for a reminder; the clock moves to 9:00 on her clock")
        self.console.note(
            "The model calls the built-in schedule_follow_up tool (FollowUps=true): a one-time "
            "EventBridge Scheduler schedule at 9:00 in her zone (moto's, fired here on AWS's "
            "clock). At 9:00 it puts the follow-up into her FIFO group; it runs as a turn, and "
            "the model, seeing her memory as it is then, writes the reminder."
        )
        scheduler = self.stack.scheduler
        before = len(self.stack.replies_to(self.address))
        self.talk("Remind me tomorrow at 9 to call the dentist")
        pending = scheduler.pending() if scheduler is not None else []
        if not self.offline and not pending:
            self.console.note("(the model chose not to schedule it: nothing more to show)")
            return
        self.check(len(pending) == 1, "one schedule, at 9:00 on her clock")
        if not pending:
            return
        local = datetime.fromisoformat(pending[0]["ScheduleExpression"][3:-1])
        zone = pending[0]["ScheduleExpressionTimezone"]
        nine = local.replace(tzinfo=ZoneInfo(zone)).astimezone(UTC)
        self.console.note(f"AWS's clock here moves on to {local:%a %d %b %H:%M} ({zone})")
        SQS_CLOCK.advance(nine.timestamp() - SQS_CLOCK.now() + 1)
        arrived = self.stack.wait_for_replies(self.address, before + 2, timeout=120)
        self.stack.wait_idle(timeout=120)
        replies = self.stack.replies_to(self.address)[before + 1 :]
        for reply in replies:
            self.console.say(AGENT, reply["text"], style="green")
        self.check(arrived and len(replies) == 1, "the reminder arrived, once")
        self.check(scheduler.pending() == [], "and its schedule deleted itself")
        if self.offline:
            calls = len(self.model_calls())
            self.talk("Done, I called them. Thanks!")
            # the reply's request (a fold the stream starts meanwhile is a model call too)
            replies = self._replies(calls)
            said = json.dumps(replies[-1].get("input")) if replies else ""
            self.check("Reminder, as you asked" in said, "her next turn's context holds it")

    def booking(self) -> None:
        self.console.heading(
            "5. Maya books a session: she picks a slot; the booking's answer is lost"
        )
        self.console.note(
            "The model calls the example booking tool (ExampleBookingTool=true) for the free "
            "slots, and offers them with the built-in offer_choices tool: "
            + ("a list she taps (Meta's interactive list)" if self.meta else "numbered lines")
            + ". Her choice comes back as her message, and the model books it. The booking's "
            "answer is lost on its way back, as if the consumer died just after the tool acted: "
            "the queue redelivers her message, and the booking is asked again under the same "
            "idempotency key."
        )
        api = self.stack.lambda_api
        before = len(self.stack.replies_to(self.address))
        offer = self.talk("Can you book me a session on 2026-12-03?")
        offered = (offer or {}).get("interactive") if self.meta else None
        if self.meta:
            rows = [
                r["title"]
                for s in (offered or {}).get("action", {}).get("sections", [])
                for r in s["rows"]
            ]
            self.console.note(f"the list's rows: {', '.join(rows) or '(none)'}")
            if self.offline:
                self.check(
                    (offered or {}).get("type") == "list" and "10:00" in rows,
                    "the free slots arrive as a list to tap (Meta's interactive message)",
                )
        elif self.offline:
            self.check(
                offer is not None and "\n2. 10:00" in offer["text"],
                "the free slots arrive as numbered lines (whasp sends text)",
            )
        if self.offline and offer is None:
            return
        api.lose_answers("book_appointment")  # one attempt a call: the queue's retry asks again
        self.console.say("Maya", "(taps 10:00)" if self.meta else "10:00", style="cyan")
        if self.offline:
            self.stack.tap(self.phone, "10:00", bsuid=self.bsuid)
        else:  # a real model may not have offered choices: she writes it
            self.stack.send_message(self.phone, "10:00 please", bsuid=self.bsuid)
        if not self.stack.wait_for_replies(self.address, before + 2, timeout=120):
            self.check(False, "a reply arrived within 120 s")
            return
        self.stack.wait_idle(timeout=120)
        reply = self.stack.replies_to(self.address)[-1]
        self.console.say(AGENT, reply["text"], style="green")
        mine = [text for _, role, text in self.stack.view(MAYA).turns if role == "user"]
        if self.offline:
            self.check(mine[-1:] == ["10:00"], "her choice came back as her message: 10:00")
        books = [p for p in api.invocations() if (p or {}).get("tool") == "book_appointment"]
        keys = {p["idempotency_key"] for p in books}
        self.check(
            len(books) > 1 and len(keys) == 1,
            f"the booking reached the tool {len(books)} times, under one idempotency key: "
            "booked once",
        )
        self.check(len(self.stack.replies_to(self.address)) == before + 2, "one reply each")
        if self.offline:
            self.check(
                "Booked: 2026-12-03 10:00" in reply["text"], "the reply says what was booked"
            )

    def price_list(self) -> None:
        self.console.heading(
            "5c. Maya sends the coach's price list, a PDF; the next answer uses it"
        )
        self.console.note(
            "The consumer reads the PDF's text (pypdf, no model call) and keeps it as her "
            "message; the file stays only in the media bucket, until its text is stored"
        )
        address = self.address
        before = len(self.stack.replies_to(address))
        self.console.say("Maya", "(prices.pdf: the coach's price list, 1 page)", style="cyan")
        self.stack.send_document(
            self.phone, pdf(PRICE_LIST), filename="prices.pdf", bsuid=self.bsuid
        )
        arrived = self.stack.wait_for_replies(address, before + 1, timeout=120)
        for reply in self.stack.replies_to(address)[before:]:
            self.console.say(AGENT, reply["text"], style="green")
        self.check(arrived and len(self.stack.replies_to(address)) == before + 1, "one reply")
        mine = [text for _, role, text in self.stack.view(MAYA).turns if role == "user"]
        self.check(
            bool(mine) and mine[-1].startswith("[sent ") and PRICE_LIST[1] in mine[-1],
            "memory keeps the document's text as her message",
        )
        calls = len(self.model_calls())
        answer = self.talk("How much is the long run plan?")
        self._check_context(
            calls, (PRICE_LIST[1],), "the next model request carries the price list"
        )
        if self.offline:
            self.check(
                answer is not None and "40 EUR" in answer["text"],
                "the answer uses the price list: 40 EUR a month",
            )

    def replaced_number(self) -> None:
        self.console.heading("6. WhatsApp bans the business number; whasp hands over a new one")
        old = self.stack.business_number
        pk_before = self.stack.view(MAYA).pk
        self.stack.replace_number(NEW_NUMBER)
        self.stack.wait_idle(timeout=60)
        self.console.note(f"number.replaced: {old} -> {NEW_NUMBER}; memory is keyed by the person")
        before = len(self.model_calls())
        first = self.talk("Is this still you? The chat looks different.")
        self.talk("Great. Talk tomorrow!")
        self.check(
            first is not None and first["from"] == NEW_NUMBER,
            "the reply comes from the new number, the one that carried her message",
        )
        self._check_same_memory(pk_before)
        if self.offline:
            from memagent.memory.context import NEW_NUMBER_LINE

            told = [NEW_NUMBER_LINE in notes_of(c) for c in self._replies(before)]
            self.check(told == [True, False], "the model is told about the new number once")

    def voice_note(self) -> None:
        self.console.heading("5b. Maya sends a voice note; the answer is a voice note")
        self.console.note("VoiceReplies=mirror: Polly speaks the reply, Meta's /media takes it")
        address = self.address
        before = len(self.stack.replies_to(address))
        said = "How long should my long run be on Sunday?"
        self.console.say("Maya", f"(voice note) {said}", style="cyan")
        self.stack.send_voice_note(self.phone, said, bsuid=self.bsuid)
        arrived = self.stack.wait_for_replies(address, before + 1, timeout=120)
        replies = self.stack.replies_to(address)[before:]
        for reply in replies:
            self.console.say(AGENT, reply["text"], style="green")
        notes = [r["audio"] for r in replies if r.get("audio")]
        self.check(arrived and len(replies) == 1 and len(notes) == 1, "one reply, a voice note")
        if notes:
            data, mime = notes[0]
            seconds = opus_seconds(data) or 0
            self.check(
                mime.startswith("audio/ogg") and seconds > 0,
                f"an Ogg/Opus voice note, {seconds:.0f} s long",
            )
        items = self.stack.store().everything(self.stack.view(MAYA).pk)
        answers = [i for i in items if i["sk"].startswith("MSG#") and i["role"] == "assistant"]
        last: dict[str, Any] = max(answers, key=lambda i: int(i["seq"])) if answers else {}
        self.check(
            bool(last.get("voice")) and bool(last.get("text")),
            "memory keeps the reply's text (marked as spoken)",
        )
        self.talk("Text please")
        self.check(
            not (self.stack.replies_to(address)[-1].get("audio")),
            '"Text please": the answer is text again',
        )

    def new_identifiers(self) -> None:
        self.console.heading("6. Maya takes a username, then Meta regenerates her BSUID")
        pk_before = self.stack.view(MAYA).pk
        self.phone = None
        self.console.note("with a username, her messages carry only her BSUID (no phone)")
        first = self.talk("I set up a WhatsApp username, can you still see our chat?")
        self.check(
            first is not None and first.get("field") == "recipient",
            "the reply goes to her BSUID (`recipient`), there being no phone",
        )
        self.stack.change_identity(
            "user_changed_user_id",
            {"from_user_id": MAYA_BSUID},
            user_id=MAYA_NEW_BSUID,
            previous_user_id=MAYA_BSUID,
        )
        self.stack.wait_idle(timeout=60)
        self.console.note("system message user_changed_user_id: her BSUID was regenerated")
        self.bsuid = MAYA_NEW_BSUID
        before = len(self.model_calls())
        reply = self.talk("Still me! How was my first week again?")
        self.check(
            reply is not None and reply["to"] == MAYA_NEW_BSUID,
            "the reply goes to her new BSUID",
        )
        self._check_same_memory(pk_before)
        self._check_context(before, FIRST_WEEK, "under her new id, the model has what she said")

    def recycled_number(self) -> None:
        self.console.heading("6b. Maya changes her number; the carrier recycles the old one")
        pk_before = self.stack.view(MAYA_NEW_BSUID).pk
        self.stack.change_identity(
            "user_changed_number", {"from": MAYA.lstrip("+")}, wa_id=MAYA_NEW_PHONE.lstrip("+")
        )
        self.stack.wait_idle(timeout=60)
        self.console.note("system message user_changed_number: her old phone is detached")
        before, line = len(self.model_calls()), "Hi, I just got this number. Who are you?"
        self.console.say("stranger", line, style="magenta")
        sent = len(self.stack.replies_to(MAYA))
        self.stack.send_message(MAYA, line, bsuid=STRANGER_BSUID)
        if self.stack.wait_for_replies(MAYA, sent + 1, timeout=120):
            self.console.say(AGENT, self.stack.replies_to(MAYA)[-1]["text"], style="green")
        self.check(self.stack.view(MAYA).pk != pk_before, "the old number reaches someone new")
        self._check_context(
            before,
            ("Biscuit", "nurse"),
            "the stranger's context holds nothing of Maya's",
            holds=False,
        )
        self.phone = MAYA_NEW_PHONE
        before = len(self.model_calls())
        self.talk("New number, same me. How is Biscuit doing, do you think?")
        self.check(self.stack.view(MAYA_NEW_PHONE).pk == pk_before, "her new number reaches her")
        self._check_context(before, FIRST_WEEK, "from her new number, the model has her memory")

    def opt_out(self) -> None:
        self.console.heading("7. Maya writes STOP")
        sent_before = len(self.stack.replies_to(self.address))
        self.talk("STOP", expect_reply=False)
        view = self.stack.view(self.address)
        if self.meta:
            self.console.note("Meta sends no opt-out event: the agent honours STOP itself")
        else:
            self.console.note("whasp unsubscribes the chat and sends chat.opted_out")
        self.check(
            len(self.stack.replies_to(self.address)) == sent_before and view.opted_out,
            "while opted out, nothing is sent (not even a reply to STOP)",
        )
        self.talk("Sorry, that was a mistake! Still here.")
        self.check(
            not self.stack.view(self.address).opted_out
            and len(self.stack.replies_to(self.address)) == sent_before + 1,
            "writing again lifts the opt-out, and the memory survived it",
        )

    def handoff(self) -> None:
        self.console.heading("8. Maya asks for a human; an operator answers, then hands back")
        reply = self.talk("Can I talk to a human, please?")
        self.check(
            reply is not None and "person from our team" in reply["text"],
            "one reply says a person will answer",
        )
        _, waiting = self.stack.admin("GET", "/handoffs")
        self.check(
            [h["address"] for h in waiting["handoffs"]] == [self.address],
            "GET /handoffs lists her as waiting for a human (an EventBridge event went out)",
        )
        sent, calls = len(self.stack.replies_to(self.address)), len(self.model_calls())
        for text in ("My new badge doesn't open the staff room.", "Who can fix it?"):
            self.talk(text, expect_reply=False)
        self.check(
            # a fold may run meanwhile (compaction's own call): no reply's call
            len(self.stack.replies_to(self.address)) == sent and not self._replies(calls),
            "while a human has the chat, her messages are stored: no model call, no reply",
        )
        words = "Hi Maya, Sam from the team here: the badge office on floor 2 fixes it today."
        for _ in range(2):  # the operator's client retries: the same Idempotency-Key
            self.stack.admin(
                "POST",
                f"/people/{self.address}/messages",
                {"text": words},
                **{"Idempotency-Key": "demo-sam-1"},
            )
        self.console.say("Sam", words, style="magenta")
        texts = [r["text"] for r in self.stack.replies_to(self.address)]
        self.check(texts.count(words) == 1, "the operator's reply went out once, retried or not")
        self.stack.admin("DELETE", f"/people/{self.address}/handoff")
        self.console.note("the operator hands the chat back (DELETE /people/{id}/handoff)")
        before = len(self.model_calls())
        self.talk("Thanks, that worked!")
        self._check_context(
            before, (words,), "the agent's next model call has the human's words in its context"
        )

    def forget(self) -> None:
        self.console.heading("9. Maya asks the operator to erase her (GDPR art. 17)")
        try:
            from memagent.lifecycle.rights import forget
            from memagent.store import KEPT_ON_ERASURE
        except ImportError:
            self.console.note(
                "memagent.lifecycle.rights.forget is not available in this version: skipped"
            )
            return
        self.stack.wait_idle(timeout=60)
        identifier = self.bsuid if self.meta else MAYA  # Meta: by her current BSUID
        assert identifier  # Meta's run gave her a BSUID three weeks in
        receipt = forget(self.stack.store(), self.stack.agent_id, identifier)
        self.console.note(f"forget(): {receipt.removed} items removed at {receipt.at:%H:%M:%S}")
        self.stack.wait_idle(timeout=60)
        identifiers = [MAYA, MAYA_BSUID, MAYA_NEW_BSUID, MAYA_NEW_PHONE] if self.meta else [MAYA]
        keys = {self.stack.person_key(i) for i in identifiers}
        everything = self.stack.scan()
        hers = [item for item in everything if item.get("pk") in keys]
        for item in hers:
            self.console.note(f"left: {dict(sorted(item.items()))}")
        # the mark, and what an erasure keeps (memagent.memory.Kind): where her old phone now
        # leads (moved_to: the stranger) and the day's budget counters, no content
        self.check(
            len(hers) == len(keys)
            and all("erased_at" in i and set(i) <= KEPT_ON_ERASURE for i in hers),
            "nothing of Maya remains but content-free erasure marks"
            + (" (one per identifier she used)" if self.meta else ""),
        )
        words = [MAYA, MAYA.lstrip("+"), "Biscuit", "Maya", "nurse", "Leeds"]
        if self.meta:
            words += [MAYA_BSUID, MAYA_NEW_BSUID]
        leftovers = [w for w in words if any(w in str(item) for item in everything)]
        self.check(not leftovers, "no item of the table mentions her number, name or stories")
        self.console.note(
            "Copies outside the table (stream records for 24 h, backups, logs with ids only) "
            "are listed in docs/privacy.md."
        )


# scene 5c's PDF: what the coach charges, one item a line
PRICE_LIST = [
    "Coaching price list",
    "Long run plan: 40 EUR a month",
    "Race day kit (with gels): 25 EUR",
    "One-to-one session: 60 EUR an hour",
]


def _last_input(calls: list[dict[str, Any]]) -> list[Any]:
    """What the last of these model calls was given: its turns' texts (not the notes)."""
    return [text for _, text in turns_of(calls[-1])] if calls else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--level", choices=["quiet", "normal", "verbose"], default="normal")
    parser.add_argument("--log", default=str(LOG_PATH), help="detailed log (default %(default)s)")
    parser.add_argument(
        "--provider",
        choices=["whasp", "meta"],
        default=os.environ.get("PROVIDER") or "whasp",
        help="the messaging provider to run the story through (default: PROVIDER, else whasp)",
    )
    parser.add_argument(
        "--model-provider",
        choices=["openai", "bedrock"],
        default=os.environ.get("MODEL_PROVIDER") or "openai",
        help="the ModelProvider parameter (default: MODEL_PROVIDER, else openai); bedrock runs "
        "offline against the stand-in at bedrock-runtime's path, with the roles' bearer token",
    )
    persona_options(parser)
    args = parser.parse_args(argv)

    console = Console(level=args.level)
    began = time.monotonic()
    console.heading(f"The local stack: the whole pipeline on this machine ({args.provider})")
    # the example booking tool is on: scene 5 books through it
    parameters = {
        "ModelProvider": args.model_provider,
        "ExampleBookingTool": "true",
        "FollowUps": "true",
        # scene 5b: a voice note answered with a voice note (Meta only: whasp sends text)
        **({"VoiceReplies": "mirror"} if args.provider == "meta" else {}),
        **persona_parameters(args),
    }
    with DevStack(
        console=console,
        log_path=args.log,
        provider=args.provider,
        agent_id=args.agent_id,
        parameters=parameters,
    ) as stack:
        console.model_banner(stack.model)
        Demo(stack, console).run()
        refused = stack.iam_refusals()
        console.check(
            not refused,
            "IAM allowed every AWS call the functions made (each checked against its role)"
            + "".join(
                f"; refused: {r['function']} {r['action']} on {r['resource']}" for r in refused[:5]
            ),
        )
        stats = {name: (pool.invocations, pool.cold_starts) for name, pool in stack.pools.items()}
    console.heading("Done")
    for name, (invocations, cold) in stats.items():
        if invocations:
            console.note(f"{name}: {invocations} invocations, {cold} cold start(s)")
    console.note(f"detailed log (the functions' JSON logs and metrics): {args.log}")
    elapsed = time.monotonic() - began
    if console.failed:
        console.print(
            console.style(
                f"  {len(console.failed)} check(s) failed in {elapsed:.0f} s:", "red", "bold"
            )
        )
        for text in console.failed:
            console.print(f"    - {text}")
        return 1
    console.print(
        console.style(f"  all {console.passed} checks passed in {elapsed:.0f} s", "green", "bold")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
