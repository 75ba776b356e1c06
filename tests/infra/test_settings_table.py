"""Each setting is declared once, in its settings class's table (memagent.environment.setting:
its variable, default, bounds and template Parameter). template.yaml's Parameters (Default,
AllowedValues, MinValue, MaxValue), the functions' environments and the configuration table's
rows (docs/configuration.md) are held to those tables here (docs/deploy.md's parameters are
written from the template: scripts/docs.py), so none of them drifts
from what the code reads."""

from __future__ import annotations

import re
from typing import Any

import pytest

from devstack.resources import load_template
from memagent.environment import Setting, table_of
from tests.infra.test_configuration import CONFIGURATION_TABLE, FUNCTION_SETTINGS
from tests.infra.test_template import references

# the doc's names for the functions
READERS = {
    "WebhookFunction": "webhook",
    "ConsumerFunction": "consumer",
    "CompactorFunction": "compactor",
    "AdminFunction": "admin",
}


def tables() -> dict[str, dict[str, Setting]]:
    """Each function's settings, by variable (its class's table, inherited rows included)."""
    return {
        function_id: {s.name: s for s in table_of(cls).values()}
        for function_id, cls in FUNCTION_SETTINGS.items()
    }


def declared_settings() -> dict[str, list[tuple[str, Setting]]]:
    """Every variable some table declares: (function, its Setting) for each reader."""
    found: dict[str, list[tuple[str, Setting]]] = {}
    for function_id, table in tables().items():
        for name, declared in table.items():
            found.setdefault(name, []).append((function_id, declared))
    return found


def as_text(value: Any) -> str:
    """A value as the template and the docs write it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, tuple):
        return ",".join(value)
    return "" if value is None else str(value)


def with_parameters() -> dict[str, Setting]:
    """Each setting a template Parameter sets, by the Parameter's name."""
    found: dict[str, Setting] = {}
    for readers in declared_settings().values():
        for _, declared in readers:
            if declared.parameter is not None:
                assert found.get(declared.parameter, declared) == declared, declared.parameter
                found[declared.parameter] = declared
    return found


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load_template()


def test_each_parameter_defaults_to_its_settings_default(template) -> None:
    # given every setting a Parameter sets; then the Parameter's Default is the code's (or the
    # one the table says the template chooses instead), so an unset variable and the deployed
    # default agree
    wrong = {}
    for parameter, declared in with_parameters().items():
        spec = template["Parameters"][parameter]
        if declared.required:
            continue  # the template's Default is the only one (AgentId, OpenAIModel)
        expected = declared.default if declared.deployed is None else declared.deployed
        if as_text(spec.get("Default", "")) != as_text(expected):
            wrong[parameter] = (spec.get("Default"), expected)
    assert wrong == {}


def test_each_parameters_bounds_are_its_settings(template) -> None:
    # then a value the deploy accepts is one the cold start accepts, and the bounds are written
    # the same: MinValue is the minimum, MaxValue the maximum where the code has one (the
    # template may cap what the code leaves open), AllowedValues are among the choices
    wrong = []
    for parameter, declared in with_parameters().items():
        spec = template["Parameters"][parameter]
        allowed = [as_text(v) for v in spec.get("AllowedValues", [])]
        if declared.kind == "choice" and set(allowed) != set(declared.choices):
            wrong.append(f"{parameter}: AllowedValues {allowed} != {declared.choices}")
        if declared.kind == "flag" and set(allowed) != {"true", "false"}:
            wrong.append(f"{parameter}: AllowedValues {allowed} != true, false")
        if declared.kind not in ("integer", "number"):
            continue
        if spec.get("Type") != "Number":
            wrong.append(f"{parameter}: a number's Parameter is a Number")
        if spec.get("MinValue") != declared.minimum:
            wrong.append(f"{parameter}: MinValue {spec.get('MinValue')} != {declared.minimum}")
        if declared.maximum is not None and spec.get("MaxValue") != declared.maximum:
            wrong.append(f"{parameter}: MaxValue {spec.get('MaxValue')} != {declared.maximum}")
    assert wrong == [], "\n".join(wrong)


def test_each_parameter_reaches_the_variable_its_table_names(template) -> None:
    # given each function's environment as written (the Globals' too)
    wrong = []
    parameters = set(template["Parameters"])
    shared = template["Globals"]["Function"]["Environment"]["Variables"]
    for function_id, table in tables().items():
        own = template["Resources"][function_id]["Properties"]["Environment"]["Variables"]
        for name, value in {**shared, **own}.items():
            declared = table.get(name)
            if declared is None:
                continue  # not a table's (a secret, a file): test_configuration's
            named = references(value) & parameters
            # then a variable set from a Parameter is set from the one its table declares,
            # and a Parameter the table declares is what sets it
            if named and declared.parameter not in named:
                wrong.append(f"{function_id} {name}: from {sorted(named)}, table says "
                             f"{declared.parameter}")  # fmt: skip
            if declared.parameter is not None and not named:
                wrong.append(f"{function_id} {name}: not from {declared.parameter}")
    assert wrong == [], "\n".join(wrong)


def rows(page: str) -> dict[str, list[str]]:
    """A page's table rows by the name in their first cell's backticks: their cells."""
    found = {}
    for line in page.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            for name in re.findall(r"`(\w+)`", cells[0]):
                found[name] = cells
    return found


def plain(cell: str) -> str:
    return cell.replace("`", "").replace('"', "")


def test_each_settings_row_says_its_default_and_who_reads_it() -> None:
    # given the configuration table's rows of the settings the tables declare
    table = rows(CONFIGURATION_TABLE.read_text(encoding="utf-8"))
    wrong = []
    for name, readers in declared_settings().items():
        if name not in table:
            continue  # test_configuration requires the row
        _, default, read_by, _ = table[name][:4]
        # then "read by" names functions whose settings read it (those where it matters: a
        # compactor parses HANDOFF_TIMEOUT_HOURS with the memory's settings, and never uses it)
        expected = {READERS[function_id] for function_id, _ in readers}
        if read_by not in ("all", "every function") and not set(read_by.split(", ")) <= expected:
            wrong.append(f"{name}: read by {read_by!r}, the tables: {sorted(expected)}")
        # and the default is the code's: one for all, or each function's ("none", "required"
        # and what a list stands for are said in words)
        valued = [
            (function_id, declared)
            for function_id, declared in readers
            if not declared.required and isinstance(declared.default, (bool, int, float, str))
        ]
        said = plain(default)
        for function_id, declared in valued:
            value = as_text(declared.default)
            if len(value) > 40:
                continue  # a text too long to quote (the prompt)
            if len({as_text(d.default) for _, d in valued}) > 1:
                value = f"{READERS[function_id]} {value}"
                if value not in said:
                    wrong.append(f"{name}: {default!r} does not say {value!r}")
            elif not re.match(re.escape(value) + r"\b", said):
                wrong.append(f"{name}: {default!r} does not start with {value!r}")
    assert wrong == [], "\n".join(wrong)
