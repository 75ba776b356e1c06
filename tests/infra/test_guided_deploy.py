"""`sam deploy --guided`, question by question, as docs/deploy.md walks it.

The SAM CLI installed here runs its own guided prompts (samcli's GuidedContext) against
template.yaml and samconfig.toml; each question is answered as docs/deploy.md's table says. The
questions must be the table's, in its order, and so answered they must reach the deploy: no
"Security Constraints Not Satisfied!" at the webhook's routes, and parameters the template's
rules accept. Only what reaches AWS is stood in for: SAM's managed bucket (created after the
questions) and the image repositories (this template has no image function, so SAM asks none).
"""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest

from devstack import cfn
from devstack.resources import load_template
from tests.infra.test_template import ROOT

samcli = pytest.importorskip(
    "samcli", reason="the SAM CLI is not installed (pip install aws-sam-cli)"
)

DEPLOY_PAGE = ROOT / "docs" / "deploy.md"
SAMCONFIG = ROOT / "samconfig.toml"
# the table's row standing for every parameter not listed on a row of its own
OTHER_PARAMETERS = "Parameter …"


def walkthrough() -> list[tuple[str, str | None]]:
    """(question, answer typed or None for Enter) of each row of deploy.md's guided table."""
    page = DEPLOY_PAGE.read_text(encoding="utf-8")
    section = page.split("<!-- guided questions -->")[1].split("<!-- /guided questions -->")[0]
    rows = []
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[1].startswith("`"):
            continue
        question = re.sub(r" \[[^\]]*\]$", "", cells[1].strip("`"))
        typed = None if cells[2].startswith("Enter") else re.search(r"`([^`]+)`", cells[2])
        rows.append((question, typed if typed is None else typed.group(1)))
    return rows


class Asked:
    """Click's prompt and confirm, each question answered by the table's next row; every
    question asked is kept."""

    def __init__(self, rows: list[tuple[str, str | None]]):
        self.rows = rows
        self.position = 0
        self.own = {question for question, _ in rows if question.startswith("Parameter ")}
        self.questions: list[str] = []

    def _answer(self, question: str) -> str | None:
        while self.position < len(self.rows):
            listed, typed = self.rows[self.position]
            if listed == question:
                self.position += 1
                return typed
            if listed == OTHER_PARAMETERS and question.startswith("Parameter "):
                assert question not in self.own, f"{question!r} asked out of the table's order"
                return typed
            if listed == OTHER_PARAMETERS:  # the other parameters are done
                self.position += 1
                continue
            raise AssertionError(f"the CLI asks {question!r}; deploy.md's next row is {listed!r}")
        raise AssertionError(f"the CLI asks {question!r} after deploy.md's last row")

    def prompt(self, text: str, default: Any = None, **_: Any) -> Any:
        question = _plain(text)
        self.questions.append(question)
        typed = self._answer(question)
        return default if typed is None else typed

    def confirm(self, text: str, default: Any = False, **_: Any) -> bool:
        question = _plain(text)
        self.questions.append(question)
        typed = self._answer(question)
        return bool(default) if typed is None else typed.lower() in ("y", "yes")


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()


@pytest.fixture(scope="module")
def guided() -> tuple[Any, Asked]:
    from samcli.commands._utils.template import get_template_parameters
    from samcli.commands.deploy import guided_context

    template = load_template()
    images = [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if (resource.get("Properties") or {}).get("PackageType") == "Image"
    ]
    assert images == [], "an image function: SAM would ask about ECR repositories too"
    config = tomllib.loads(SAMCONFIG.read_text(encoding="utf-8"))["default"]
    deploy = {**config["global"]["parameters"], **config["deploy"]["parameters"]}
    asked = Asked(walkthrough())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(guided_context, "prompt", asked.prompt)
        patch.setattr(guided_context, "confirm", asked.confirm)
        # what reaches AWS: SAM's managed bucket, looked up (or created) after the questions
        patch.setattr(guided_context, "manage_stack", lambda **_: "aws-sam-cli-managed-bucket")
        patch.setattr(guided_context, "print_managed_s3_bucket_info", lambda _: None)
        patch.setattr(guided_context.GuidedContext, "prompt_image_repository", lambda *_, **__: {})
        patch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        context = guided_context.GuidedContext(
            template_file=str(ROOT / "template.yaml"),
            stack_name=deploy["stack_name"],
            s3_bucket=None,
            image_repository=None,
            image_repositories=None,
            s3_prefix=deploy.get("s3_prefix"),
            resolve_s3=deploy.get("resolve_s3", False),
            confirm_changeset=deploy.get("confirm_changeset"),
            # as the CLI's option parses samconfig's "CAPABILITY_IAM": a tuple
            capabilities=tuple(deploy.get("capabilities", "").split()),
            disable_rollback=deploy.get("disable_rollback"),
        )
        context.guided_prompts(get_template_parameters(str(ROOT / "template.yaml")))
    return context, asked


def test_the_guided_deploy_asks_what_deploy_md_walks_in_its_order(guided) -> None:
    # given `sam deploy --guided`, answered as deploy.md's table says
    _, asked = guided
    listed = [question for question, _ in walkthrough()]
    # then it asks the table's questions in the table's order, the parameters in
    # template.yaml's (the "other parameters" row standing for those without a row of their own)
    template = load_template()
    expected: list[str] = []
    for question in listed:
        if question == OTHER_PARAMETERS:
            own = {q.removeprefix("Parameter ") for q in listed if q.startswith("Parameter ")}
            expected += [f"Parameter {p}" for p in template["Parameters"] if p not in own]
        else:
            expected.append(question)
    assert asked.questions == expected
    # and the webhook's routes are the only ones without authentication: once per route
    unauthenticated = [q for q in asked.questions if "has no authentication" in q]
    assert unauthenticated == ["WebhookFunction has no authentication. Is this okay?"] * 2


def test_answered_as_deploy_md_says_the_guided_deploy_reaches_aws_with_legal_parameters(
    guided,
) -> None:
    # given the guided deploy answered as deploy.md says (it raised nothing: every "has no
    # authentication" question was answered y)
    context, _ = guided
    template = load_template()
    parameters = {k: v["Value"] for k, v in context.guided_parameter_overrides.items()}
    # then the stack it deploys is named, in a Region, with the IAM capability and SAM's bucket
    assert context.guided_stack_name == "whasp-agent" and context.guided_region == "eu-west-1"
    assert context.guided_capabilities == ("CAPABILITY_IAM",)
    assert context.guided_s3_bucket and context.confirm_changeset
    # and its parameters meet the template's rules (WhaspApiUrl, with Provider whasp)
    resolver = cfn.Resolver(template, cfn.parameter_values(template, parameters))
    for name, rule in template["Rules"].items():
        if "RuleCondition" in rule and not resolver.resolve(rule["RuleCondition"]):
            continue
        for assertion in rule["Assertions"]:
            assert resolver.resolve(assertion["Assert"]), name
    # and each is a value its parameter takes
    for name, value in parameters.items():
        spec = template["Parameters"][name]
        if "AllowedValues" in spec:
            assert value in [cfn.as_text(v) for v in spec["AllowedValues"]], name
        if "AllowedPattern" in spec:
            assert re.fullmatch(spec["AllowedPattern"], value), name


def test_the_parameters_table_is_in_the_order_the_guided_deploy_asks() -> None:
    # the walkthrough sends the reader to the table for the questions it does not list
    page = DEPLOY_PAGE.read_text(encoding="utf-8").split("## Parameters\n", 1)[1]
    page = page.split("\n## ", 1)[0]
    rows = [line.split("|")[1] for line in page.splitlines() if line.startswith("| `")]
    listed = [name for row in rows for name in re.findall(r"`(\w+)`", row)]
    assert listed == list(load_template()["Parameters"])
