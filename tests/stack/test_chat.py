"""`make chat`'s /prompt: what the model was sent for the last reply, with the persona and the
agent id taken from configuration (the template's AgentId and SystemPromptFile, or --agent-id
and --persona / AGENT_ID and PERSONA_FILE), driven through the chat's own command handler."""

from __future__ import annotations

import argparse
import io
import shutil
from types import SimpleNamespace

import pytest

from devstack.chat import Chat, persona_options, persona_parameters
from devstack.console import Console
from devstack.resources import ROOT, load_template
from devstack.stack import DevStack

MAYA = "+447700900123"
PERSONA = "You are Rosa, the receptionist of Smile Dental Clinic in Leeds, on WhatsApp."


@pytest.mark.xdist_group("chat-stack")
def test_prompt_shows_the_configured_persona_and_the_persons_last_message(tmp_path, monkeypatch):
    # given the clinic's persona beside the consumer's handler, chosen as make chat chooses it
    # (PERSONA_FILE), and a template whose AgentId default is the clinic's
    code = tmp_path / "consumer"
    shutil.copytree(ROOT / "functions" / "consumer", code)
    (code / "clinic.md").write_text(PERSONA + "\n", encoding="utf-8")
    template = load_template()
    template["Resources"]["ConsumerFunction"]["Properties"]["CodeUri"] = str(code)
    template["Parameters"]["AgentId"]["Default"] = "clinic"
    monkeypatch.setenv("PERSONA_FILE", "clinic.md")
    monkeypatch.delenv("AGENT_ID", raising=False)
    parser = argparse.ArgumentParser()
    persona_options(parser)
    args = parser.parse_args([])
    out = io.StringIO()
    with DevStack(
        env={},  # the offline model, whatever this shell's OPENAI_* say
        template=template,
        agent_id=args.agent_id,
        parameters=persona_parameters(args),
        console=Console(io.StringIO(), level="quiet"),
        log_path=tmp_path / "stack.log",
        warm=False,  # each function on its first invocation: the compactor never starts here
    ) as stack:
        chat = Chat(stack, Console(out), MAYA)
        # when nothing was asked yet, /prompt says so
        chat.command("/prompt")
        assert "has not been asked anything yet" in out.getvalue()
        # when Maya writes, then asks what the model saw
        chat.command("/phone " + MAYA)
        chat.write("Hi, I'm allergic to penicillin")
        out.seek(0), out.truncate()
        assert chat.command("/prompt") is True
        shown = out.getvalue()
    # then the memory is the clinic's, and /prompt shows the persona's text in the
    # instructions and her last message in the input
    assert stack.agent_id == "clinic"
    instructions, _, given = shown.partition("    input")
    assert PERSONA in instructions
    assert "[user] Hi, I'm allergic to penicillin" in given
    assert "tools:" in given


def test_prompt_with_a_real_model_server_says_it_cannot_see_the_requests():
    # given a stack whose model is a server outside it (OPENAI_BASE_URL): no stand-in recording
    out = io.StringIO()
    chat = Chat(SimpleNamespace(openai=None), Console(out), MAYA)  # type: ignore[arg-type]
    # when /prompt is asked for
    chat.command("/prompt")
    # then it says why it shows nothing, and how to see it
    assert "cannot see" in out.getvalue() and "offline model" in out.getvalue()


@pytest.mark.xdist_group("chat-stack")
def test_a_person_calls_a_declared_tool_by_name_through_the_offline_model(tmp_path):
    # given make chat's stack with the example booking tool declared (as `--parameter
    # ExampleBookingTool=true` or PARAMETERS=ExampleBookingTool=true gives it)
    with DevStack(
        env={},  # the offline model
        parameters={"FollowUps": "true", "ExampleBookingTool": "true"},
        console=Console(io.StringIO(), level="quiet"),
        log_path=tmp_path / "stack.log",
        warm=False,  # each function on its first invocation: the compactor never starts here
    ) as stack:
        chat = Chat(stack, Console(io.StringIO()), MAYA)
        # when the person types the documented phrase, naming a tool and its arguments
        assert chat.command('/tool list_free_slots {"day": "2026-12-03"}') is True
        replies = [reply["text"] for reply in stack.replies_to(MAYA)]
        called = [(p["tool"], p["arguments"]) for p in stack.lambda_api.invocations()]
    # then the example's function was invoked once with them, and the reply says what it answered
    assert called == [("list_free_slots", {"day": "2026-12-03"})]
    assert len(replies) == 1
    assert replies[0].startswith(
        '[offline model] list_free_slots answered: {"output": {"day": "2026-12-03", "free": ['
    )
