"""`make chat`: talk to the agent as a person, through the whole local pipeline.

    python -m devstack.chat [--phone +447700900123] [--level quiet|normal|verbose]

Type a message and the agent answers, as on WhatsApp. Commands:

    /phone +447700900123   write as another person (E.164)
    /memory                what is stored about the current person
    /days N                let N days pass (later messages are dated N days later)
    /clock +1d             AWS's clock moves on (+1d, +3h, +30m): follow-ups due by then fire
    /replace +14155550199  whasp replaces the business number (number.replaced)
    /optout                whasp opts the chat out (as after STOP); writing again lifts it
    /forget                the operator erases the person (memagent.lifecycle.rights.forget)
    /human                 the operator takes the chat over (the agent stays quiet)
    /say TEXT              the operator writes to the person, as the business
    /back                  the operator hands the chat back to the agent
    /prompt                what the model was sent for the last reply: instructions and input
    /tool NAME {json}      sent as your message: the offline model calls the declared tool NAME
    /help                  this list
    /quit                  stop the stack and leave (also Ctrl-D)

The person can also use the agent's own keywords: "forget me", "send me my data", "can I talk to
a human?".
Input can be piped: `printf 'Hi!\\n/memory\\n' | python -m devstack.chat`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import uuid
from datetime import timedelta
from typing import TextIO

from devstack.clock import SQS_CLOCK
from devstack.console import Console
from devstack.stack import LOG_PATH, DevStack

E164 = re.compile(r"^\+[1-9]\d{6,14}$")
DEFAULT_PHONE = "+447700900123"
REPLY_TIMEOUT_SECONDS = 180.0
COMMANDS = __doc__.split("Commands:\n\n", 1)[1].split("\n\n", 1)[0]


class Chat:
    def __init__(self, stack: DevStack, console: Console, phone: str):
        self.stack = stack
        self.console = console
        self.phone = phone

    # ------------------------------------------------------------------ input

    def run(self, lines: TextIO, *, interactive: bool) -> None:
        while True:
            if interactive:
                try:
                    line = input(self.console.style(f"{self.phone}> ", "cyan", "bold"))
                except EOFError:
                    self.console.print()
                    return
            else:
                line = lines.readline()
                if not line:
                    return
                line = line.rstrip("\n")
                self.console.print(self.console.style(f"{self.phone}> ", "cyan", "bold") + line)
            line = line.strip()
            if not line:
                continue
            if line.startswith("/"):
                if not self.command(line):
                    return
            else:
                self.write(line)

    def command(self, line: str) -> bool:
        """Run one /command; False to leave."""
        name, _, argument = line.partition(" ")
        argument = argument.strip()
        if name in ("/quit", "/exit", "/q"):
            return False
        handlers = {
            "/help": lambda: self.console.print(COMMANDS),
            "/phone": lambda: self.switch(argument),
            "/memory": self.memory,
            "/days": lambda: self.days(argument),
            "/clock": lambda: self.clock(argument),
            "/replace": lambda: self.replace(argument),
            "/optout": self.opt_out,
            "/forget": self.forget,
            "/human": lambda: self.operator("POST", "/handoff"),
            "/say": lambda: self.operator("POST", "/messages", argument),
            "/back": lambda: self.operator("DELETE", "/handoff"),
            "/prompt": self.prompt,
            # a message like any other: the offline model reads it as "call NAME with this"
            "/tool": lambda: self.write(line),
        }
        handler = handlers.get(name)
        if handler is None:
            self.console.note(f"unknown command {name}; /help lists them", style="red")
        else:
            handler()
        return True

    # ------------------------------------------------------------------ actions

    def write(self, text: str) -> None:
        before = len(self.stack.replies_to(self.phone))
        self.stack.send_message(self.phone, text)
        # Idle, not just "one reply": compaction then finishes before the next prompt.
        if not self.stack.wait_idle(timeout=REPLY_TIMEOUT_SECONDS):
            self.console.note("still working after 3 minutes; see the detailed log", style="red")
        replies = self.stack.replies_to(self.phone)[before:]
        for reply in replies:
            sender = (
                "" if reply["from"] == self.stack.business_number else f" (from {reply['from']})"
            )
            self.console.say(f"{self.stack.agent_id}{sender}", reply["text"], style="green")
        if not replies:
            view = self.stack.view(self.phone)
            why = "the chat is opted out" if view.opted_out else "see the detailed log"
            status, chat = self.stack.admin("GET", f"/people/{self.phone}/conversation")
            if status == 200 and chat["handoff"]["handed_off"]:
                why = "a human has the chat: stored for them; /say answers, /back hands back"
            self.console.note(f"(no reply sent: {why})")

    def operator(self, method: str, route: str, text: str | None = None) -> None:
        """The operator, through the local admin API: take over, write, hand back."""
        if text is not None and not text:
            self.console.note("what should the operator say? /say Hello, this is Sam", style="red")
            return
        body = {"text": text} if text else None
        key = {"Idempotency-Key": f"chat-{uuid.uuid4().hex}"} if text else {}
        status, answer = self.stack.admin(method, f"/people/{self.phone}{route}", body, **key)
        if status != 200:
            self.console.note(f"admin API {status}: {answer.get('error')}", style="red")
        elif text:
            self.console.say("operator", text, style="magenta")
        else:
            handed = answer["handoff"]["handed_off"]
            self.console.note("a human has the chat" if handed else "the agent has the chat again")

    def prompt(self) -> None:
        """The last request for a reply the model received (a compaction's fold, which follows
        a reply, is skipped): its instructions (persona, then the notes) and its input, as
        recorded by the local model stand-in. A real model's server is outside the stack, which
        sees no request it sends: then this says so."""
        from devstack.fake_openai import input_of

        if self.stack.openai is None:
            self.console.note(
                "/prompt shows what the offline model stand-in received; with OPENAI_BASE_URL or "
                "OPENAI_API_KEY the requests go straight to that server, which the stack cannot "
                "see (unset both, or put a logging proxy in front of your server)",
                style="red",
            )
            return
        replies = [
            call
            for call in self.stack.openai.calls()
            if ((call.get("text") or {}).get("format") or {}).get("type") != "json_schema"
        ]
        if not replies:
            self.console.note("the model has not been asked anything yet: write a message first")
            return
        request = replies[-1]
        tools = [tool.get("name") for tool in request.get("tools") or []]
        self.console.print(self.console.style("    instructions", "bold"))
        self.console.note(str(request.get("instructions") or "(none)"), style="italic")
        self.console.print(self.console.style("    input", "bold"))
        for role, text in input_of(request):
            self.console.note(f"[{role}] {text}", style="italic")
        self.console.note(f"model {request.get('model')}; tools: {', '.join(tools) or 'none'}")

    def switch(self, phone: str) -> None:
        if not E164.match(phone):
            self.console.note("a phone number in E.164, e.g. /phone +447700900123", style="red")
            return
        self.phone = phone
        self.console.note(f"you are now {phone}")

    def memory(self) -> None:
        view = self.stack.view(self.phone)
        rows = [
            ("person key", view.pk),
            ("turns stored (last_seq)", view.last_seq),
            ("summary marker", view.marker),
            ("pending after the marker", view.pending),
            ("raw turns held", len(view.turns)),
            ("compaction due", view.compaction_due),
            ("opted out", view.opted_out),
            ("last whasp number", view.last_number or "-"),
        ]
        if view.erased_at:
            rows.append(("erased at", view.erased_at))
        for label, value in rows:
            self.console.print(f"    {label:<26} {value}")
        self.console.print(self.console.style("    summary", "bold"))
        self.console.note(view.summary or "(none yet)", style="italic")
        self.console.print(self.console.style(f"    facts ({len(view.facts)})", "bold"))
        for fact in view.facts or ["(none yet)"]:
            self.console.note(f"- {fact}", style="italic")

    def days(self, argument: str) -> None:
        try:
            days = float(argument)
        except ValueError:
            self.console.note("how many days? e.g. /days 21", style="red")
            return
        self.stack.clock_offset += timedelta(days=days)
        now = f"{self.stack.now():%Y-%m-%d %H:%M}"
        self.console.note(f"{days:g} day(s) pass: your messages are now dated {now} UTC")

    def clock(self, argument: str) -> None:
        """AWS's clock here moves on: the schedules due by then fire (follow-ups), and what
        they send is shown."""
        step = re.fullmatch(r"\+(\d+)([dhm])", argument)
        if step is None:
            self.console.note("how far? e.g. /clock +1d, /clock +3h, /clock +30m", style="red")
            return
        seconds = int(step.group(1)) * {"d": 86400, "h": 3600, "m": 60}[step.group(2)]
        before = len(self.stack.replies_to(self.phone))
        SQS_CLOCK.advance(seconds)
        fired = self.stack.scheduler.fire_due() if self.stack.scheduler is not None else 0
        self.console.note(f"AWS's clock moved on {argument[1:]}: {fired} follow-up(s) due")
        self.stack.wait_idle(timeout=REPLY_TIMEOUT_SECONDS)
        for reply in self.stack.replies_to(self.phone)[before:]:
            self.console.say(self.stack.agent_id, reply["text"], style="green")

    def replace(self, number: str) -> None:
        if not E164.match(number):
            self.console.note(
                "the new business number in E.164, e.g. /replace +14155550199", style="red"
            )
            return
        if self.stack.meta:
            self.console.note("Meta has no number.replaced event; /replace is whasp only")
            return
        old = self.stack.business_number
        self.stack.replace_number(number)
        self.stack.wait_idle(timeout=60)
        self.console.note(
            f"number.replaced: {old} -> {number}; your next message arrives through it"
        )

    def opt_out(self) -> None:
        if self.stack.meta:
            self.console.note("Meta sends no opt-out event: write STOP instead")
            return
        self.stack.opt_out(self.phone)
        self.stack.wait_idle(timeout=60)
        self.console.note(
            f"chat.opted_out sent; opted out: {self.stack.view(self.phone).opted_out}. "
            "Writing again lifts it."
        )

    def forget(self) -> None:
        from memagent.lifecycle.rights import forget

        self.stack.wait_idle(timeout=60)
        receipt = forget(self.stack.store(), self.stack.agent_id, self.phone)
        left = self.stack.view(self.phone).items
        self.console.note(
            f"forgotten: {receipt.removed} item(s) removed; left: "
            + ", ".join(f"{item['sk']} {sorted(item)}" for item in left)
        )


def persona_options(parser: argparse.ArgumentParser) -> None:
    """--agent-id and --persona (AGENT_ID, PERSONA_FILE), for make chat and make demo: the
    template's AgentId and SystemPromptFile, whose defaults are used when neither is given."""
    parser.add_argument(
        "--agent-id",
        default=os.environ.get("AGENT_ID") or None,
        help="the AgentId parameter (default: AGENT_ID, else template.yaml's default)",
    )
    parser.add_argument(
        "--persona",
        default=os.environ.get("PERSONA_FILE") or None,
        help="the SystemPromptFile parameter: a file in functions/consumer/ such as clinic.md "
        "(default: PERSONA_FILE, else template.yaml's default, persona.md)",
    )


def persona_parameters(args: argparse.Namespace) -> dict[str, str]:
    return {"SystemPromptFile": args.persona} if args.persona else {}


def main(argv: list[str] | None = None, *, stdin: TextIO | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make chat", description=__doc__.split("\n\n")[0])
    parser.add_argument("--phone", default=DEFAULT_PHONE, help="who you are (E.164)")
    parser.add_argument("--level", choices=["quiet", "normal", "verbose"], default="normal")
    parser.add_argument("--log", default=str(LOG_PATH), help="detailed log (default %(default)s)")
    persona_options(parser)
    parser.add_argument(
        "--parameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a template parameter, e.g. ExampleBookingTool=true or ToolsFile=tools.json "
        "(repeatable; also PARAMETERS, space-separated)",
    )
    args = parser.parse_args(argv)
    if not E164.match(args.phone):
        parser.error("--phone must be E.164, e.g. +447700900123")
    overrides = os.environ.get("PARAMETERS", "").split() + args.parameter
    if bad := [o for o in overrides if "=" not in o]:
        parser.error(f"a parameter is NAME=VALUE, not {bad[0]}")

    stdin = stdin or sys.stdin
    console = Console(level=args.level)
    parameters = {"FollowUps": "true", **persona_parameters(args)}
    parameters.update(o.split("=", 1) for o in overrides)
    with DevStack(
        console=console, log_path=args.log, agent_id=args.agent_id, parameters=parameters
    ) as stack:
        console.print()
        console.model_banner(stack.model)
        console.note(
            f"{stack.provider} webhook: {stack.webhook_url} (secret: the documented test secret)"
        )
        console.note(f"you are {args.phone}; type a message, or /help")
        interactive = stdin is sys.stdin and sys.stdin.isatty()
        try:
            Chat(stack, console, args.phone).run(stdin, interactive=interactive)
        except KeyboardInterrupt:
            console.print()
        console.note("stopping the local stack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
