"""A function loads only the parts its stack uses (issue 30, item 8): a whasp stack never the
Meta adapter, a stack without tools never the tools module (but the consumer, for the built-in
request_human, unless HANDOFF_TOOL=false), Bedrock's key only with MODEL_PROVIDER=bedrock. Each
handler is loaded cold, in a process with none of memagent loaded, as Lambda would."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devstack.events import AGENT
from memagent.memory.person import LOCAL_PERSON_KEY
from tests.integration.test_webhook import TEST_SECRET

pytestmark = pytest.mark.xdist_group("cold-starts")  # one forker for the module: one worker

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/q.fifo"

# a whasp stack with the OpenAI API and no tools (the template's defaults)
ENV = {
    "PATH": "/usr/bin:/bin",
    "AGENT_ID": AGENT,
    "MEMAGENT_LOCAL_STACK": "1",
    "PERSON_KEY": LOCAL_PERSON_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "ASIAPROBEONLY0000000",
    "AWS_SECRET_ACCESS_KEY": "probe-only",
    "AWS_SESSION_TOKEN": "probe-only",
    "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
    "TABLE_NAME": "memory",
    "QUEUE_URL": QUEUE,
    "FAILURE_QUEUE_URL": QUEUE,
    "WEBHOOK_SECRET": TEST_SECRET,
    "WHASP_API_URL": "https://whasp.example",
    "WHASP_API_KEY": "whasp-test-key",
    "OPENAI_API_KEY": "sk-test",
    "OPENAI_MODEL": "gpt-6-luna",
    "SYSTEM_PROMPT": "You are Coach.",
}


# a Meta stack: Meta's settings in place of whasp's
META = {
    "PROVIDER": "meta",
    "META_APP_SECRET": "meta-app-secret",
    "META_VERIFY_TOKEN": "meta-verify-token",
    "META_ACCESS_TOKEN": "meta-access-token",
}


# One process imports what every function loads before its own code (boto3, Powertools), then
# forks a child per cold start: each child imports the function as Lambda would, with the
# environment it is given and none of memagent loaded yet, and reports what it loaded. The
# assertions are on memagent's modules; a fresh interpreter per function paid the third-party
# imports eight times over.
FORKER = """
import json, os, sys
import boto3, botocore.session, aws_lambda_powertools
for line in sys.stdin:
    request = json.loads(line)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.environ.clear()
        os.environ.update(request["env"])
        import importlib.util
        try:
            spec = importlib.util.spec_from_file_location("app", request["app"])
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            answer = {"modules": sorted(sys.modules)}
        except BaseException as error:
            answer = {"error": repr(error)}
        with os.fdopen(write, "w") as out:
            out.write(json.dumps(answer))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as answer:
        print(answer.read(), flush=True)
    os.waitpid(pid, 0)
"""


@pytest.fixture(scope="module")
def cold_start() -> Iterator[Callable[..., set[str]]]:
    forker = subprocess.Popen(  # noqa: S603 (our own interpreter and code)
        [sys.executable, "-c", FORKER],
        env={"PATH": ENV["PATH"]},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert forker.stdin is not None and forker.stdout is not None

    def loaded_modules(function: str, **changes: str) -> set[str]:
        app = FUNCTIONS / function / "app.py"
        env = {**ENV, **changes, "LAMBDA_TASK_ROOT": str(app.parent)}
        forker.stdin.write(json.dumps({"app": str(app), "env": env}) + "\n")
        forker.stdin.flush()
        answer = json.loads(forker.stdout.readline())
        assert "error" not in answer, answer.get("error")
        return set(answer["modules"])

    yield loaded_modules
    forker.stdin.close()
    forker.wait(timeout=30)


@pytest.mark.parametrize("function", ["webhook", "consumer", "compactor", "admin"])
def test_a_whasp_stack_without_tools_on_openai_loads_neither_meta_nor_tools_nor_bedrock(
    function, cold_start
):
    # given a whasp stack on the OpenAI API, without tools (nor the built-in request_human and
    # offer_choices, which the consumer offers by default); when a function starts cold
    modules = cold_start(function, HANDOFF_TOOL="false", CHOICES_TOOL="false")
    # then it loaded its own code (the probe saw the package) but not the parts it does not use
    assert "memagent.environment" in modules
    for unused in ("memagent.providers.meta", "memagent.model.tools", "memagent.model.bedrock"):
        assert unused not in modules, f"the {function} function imports {unused}"


def test_the_consumer_loads_the_tools_module_for_request_human_and_nothing_else_new(cold_start):
    # given the template's defaults, HANDOFF_TOOL unset: request_human is offered on every turn
    modules = cold_start("consumer")
    # then the tools module is loaded, and still no Meta adapter, no Bedrock key
    assert "memagent.model.tools" in modules
    assert "memagent.providers.meta" not in modules and "memagent.model.bedrock" not in modules


@pytest.mark.parametrize("function", ["webhook", "consumer", "admin"])
def test_a_meta_stack_loads_metas_adapter_and_never_whasps(function, cold_start):
    # given a Meta stack; when a function that speaks to the provider starts cold
    modules = cold_start(function, **META)
    # then whasp's adapter is not loaded (Meta's is, once a request or the consumer needs it)
    assert "memagent.environment" in modules
    assert "memagent.providers.whasp" not in modules, (
        f"the {function} function imports memagent.providers.whasp"
    )
