"""The template, the settings and the configuration table cannot drift apart: every environment
variable the template sets for a function is read by that function's settings (a typo would
deploy with the default), and every setting has its row in the configuration table."""

from __future__ import annotations

import re
from typing import Any

import pytest

from devstack.cfn import variables_read
from memagent.compaction import CompactorSettings
from memagent.environment import table_of
from memagent.operator import AdminSettings
from memagent.turn import ConsumerSettings
from memagent.webhook import WebhookSettings
from tests.infra.conftest import OPERATOR_TOOL_VARIABLES
from tests.infra.test_iam import SHAPES
from tests.infra.test_template import PARAMETERS, ROOT, Template, resolve_all, sam_transform

CONFIGURATION_TABLE = ROOT / "docs" / "configuration.md"
PACKAGE = ROOT / "layers" / "memagent"
# each wing's settings module, the person key's reader and the environment reader
SETTINGS_SOURCES = [
    PACKAGE / "environment.py",
    PACKAGE / "memory" / "person.py",
    *sorted(PACKAGE.glob("*/settings.py")),
]
FUNCTION_SETTINGS = {
    "WebhookFunction": WebhookSettings,
    "ConsumerFunction": ConsumerSettings,
    "CompactorFunction": CompactorSettings,
    "AdminFunction": AdminSettings,
}
# read by Powertools (Logger, Metrics) or boto3, not by our settings
LIBRARY_VARIABLES = {
    "AWS_ENDPOINT_URL",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}
# set by Lambda itself (or the SAM CLI's local runs), never by the template or an operator
RUNTIME_VARIABLES = {"AWS_REGION", "AWS_DEFAULT_REGION", "LAMBDA_TASK_ROOT", "AWS_SAM_LOCAL"}


def environment(function: dict[str, Any], cfn: Template, parameters: dict) -> dict[str, str]:
    """A function's environment as this shape of the stack sets it: references to the stack's
    own resources stand in as names (their values are the stack's, not the operator's)."""
    variables = function["Properties"].get("Environment", {}).get("Variables", {})
    resolved = resolve_all(cfn, variables, parameters) or {}
    return {
        name: value if isinstance(value, str) else f"stack-{name.lower()}"
        for name, value in resolved.items()
        if value is not None
    }


@pytest.fixture(scope="module")
def shapes(sam_template: Template) -> list[tuple[Template, dict[str, str]]]:
    found = []
    for shape in SHAPES.values():
        parameters = {**PARAMETERS, **shape}
        found.append((sam_transform(sam_template, parameters), parameters))
    return found


def test_every_variable_the_template_sets_is_read_by_its_functions_settings(shapes) -> None:
    set_by_template: dict[str, set[str]] = {name: set() for name in FUNCTION_SETTINGS}
    read_by_settings: dict[str, set[str]] = {name: set() for name in FUNCTION_SETTINGS}
    for cfn, parameters in shapes:
        for function_id, settings in FUNCTION_SETTINGS.items():
            values = environment(cfn["Resources"][function_id], cfn, parameters)
            set_by_template[function_id] |= set(values)
            # the function's code, where its TOOLS_FILE is read from
            code = ROOT / "functions" / function_id.removesuffix("Function").lower()
            env = {**values, "LAMBDA_TASK_ROOT": str(code)}
            # a stand-in value refused: its name was read all the same
            read_by_settings[function_id] |= variables_read(settings, env)
    unread = {
        function_id: sorted(
            names - read_by_settings[function_id] - LIBRARY_VARIABLES - OPERATOR_TOOL_VARIABLES
        )
        for function_id, names in set_by_template.items()
    }
    assert {f: names for f, names in unread.items() if names} == {}


def test_a_variable_no_settings_class_reads_is_caught(shapes) -> None:
    # given the consumer's environment with a misspelt name, as a typo in the template would be
    cfn, parameters = shapes[0]
    values = environment(cfn["Resources"]["ConsumerFunction"], cfn, parameters)
    env = {**values, "OPT_OUT_POLICI": "erase"}
    # then the settings never read it: the check above names it
    assert "OPT_OUT_POLICI" in set(env) - variables_read(ConsumerSettings, env)


def settings_read() -> set[str]:
    """Every environment variable the settings' tables declare, or their code names."""
    pattern = r'"([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+|PROVIDER)"'
    names = {name for path in SETTINGS_SOURCES for name in re.findall(pattern, path.read_text())}
    declared = {s.name for cls in FUNCTION_SETTINGS.values() for s in table_of(cls).values()}
    return (names | declared) - RUNTIME_VARIABLES


def documented() -> set[str]:
    """The variables of the configuration table: a row names its variable in its first cell."""
    table = CONFIGURATION_TABLE.read_text(encoding="utf-8")
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {m.group(1) for row in rows if (m := re.match(r"\| `([A-Z][A-Z0-9_]+)` \|", row))}


def test_the_settings_are_read_in_each_wings_settings_module() -> None:
    assert {p.parent.name for p in SETTINGS_SOURCES[2:]} >= {
        "webhook",
        "turn",
        "compaction",
        "operator",
    }
    assert not (PACKAGE / "settings.py").exists()


def documented_by_parameters() -> set[str]:
    """The variables a template Parameter sets: its Description documents them (docs/deploy.md's
    parameters table is written from the Descriptions: scripts/docs.py)."""
    tables = [table_of(cls).values() for cls in FUNCTION_SETTINGS.values()]
    return {s.name for table in tables for s in table if s.parameter is not None}


def test_every_setting_has_its_row_in_the_configuration_table() -> None:
    # a setting a Parameter sets has its row in the deploy page's parameters instead (or both)
    assert "AGENT_ID" in documented_by_parameters() and "PROVIDER" in settings_read()
    missing = settings_read() - documented() - documented_by_parameters()
    assert sorted(missing) == []


def test_the_deploy_pages_parameters_are_the_templates() -> None:
    # given docs/deploy.md's parameters table, written by `make docs` from template.yaml; then
    # it is what the template says now: every parameter, its Default and its Description
    from scripts.docs import stale

    assert [str(path.relative_to(ROOT)) for path in stale()] == [], "run `make docs`"


def test_every_row_of_the_configuration_table_is_a_setting_the_code_reads() -> None:
    # a row left behind by a removed or renamed setting would send an operator to set nothing
    read = settings_read()
    # a secret is read as <NAME>_PARAM (SSM) or <NAME>_SECRET_ARN (Secrets Manager) beside <NAME>
    stored = {f"{name}{suffix}" for name in read for suffix in ("_PARAM", "_SECRET_ARN")}
    stale = documented() - read - stored - LIBRARY_VARIABLES
    assert sorted(stale) == []
