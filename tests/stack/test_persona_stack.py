"""A real persona on the local stack: a 20 KB system prompt shipped as a file beside the
consumer's handler (SystemPromptFile), as `sam build` ships functions/consumer/*.md, reaches the
model's instructions whole; the consumer's environment, which Lambda caps at 4 KB, holds only
its name."""

from __future__ import annotations

import re
import shutil

import pytest

from devstack.resources import ROOT, load_template
from devstack.stack import DevStack

MAYA = "+447700900123"
# what a business writes for its agent: who it is, its voice, its rules, its facts (some of
# them in the languages it answers in), about 20 KB
PERSONA = "\n\n".join(
    [
        "You are Ana, the running coach of Stride Club, on WhatsApp.",
        *(
            f"Rule {n}: when someone asks about week {n} of the plan, answer from the plan "
            "below, kindly, in their language (español, français, português), in two sentences."
            for n in range(1, 131)
        ),
    ]
)


@pytest.mark.slow  # a whole stack: make test-slow
@pytest.mark.xdist_group("persona-stack")
def test_a_20_kb_persona_reaches_the_models_instructions(tmp_path):
    # given the consumer's code with the operator's persona beside the handler, and the stack
    # deployed with SystemPromptFile naming it (a name the template's pattern accepts)
    code = tmp_path / "consumer"
    shutil.copytree(ROOT / "functions" / "consumer", code)
    (code / "coach.md").write_text(PERSONA + "\n", encoding="utf-8")
    template = load_template()
    template["Resources"]["ConsumerFunction"]["Properties"]["CodeUri"] = str(code)
    allowed = template["Parameters"]["SystemPromptFile"]["AllowedPattern"]
    assert re.fullmatch(allowed, "coach.md")
    assert len(PERSONA.encode()) >= 20_000
    with DevStack(
        env={},  # the offline model, whatever this shell's OPENAI_* say
        template=template,
        parameters={"SystemPromptFile": "coach.md"},
        level="quiet",
        log_path=tmp_path / "stack.log",
    ) as stack:
        # when Maya writes
        stack.send_message(MAYA, "Hi Ana! What is week 3 about?")
        assert stack.wait_for_replies(MAYA, 1, timeout=60)
        # then the model's instructions open with the whole persona, the notes after it
        [request] = stack.openai.calls()
        assert request["instructions"].startswith(PERSONA)
        # and the consumer's environment names the file, and holds no prompt
        environment = stack.functions["ConsumerFunction"].environment
        assert environment["SYSTEM_PROMPT_FILE"] == "coach.md"
        assert "SYSTEM_PROMPT" not in environment
        assert PERSONA[:60] not in "".join(environment.values())
