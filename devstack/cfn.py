"""Just enough CloudFormation to run template.yaml's functions locally, as deployed.

The local stack reads each function's code location, handler, timeout, memory size, environment
and event sources from the template, resolving the intrinsics it uses (Ref, Fn::GetAtt, Fn::Sub,
Fn::If with the template's Conditions, Fn::Join, Fn::Split, Fn::Select) against the local
resources. A new
environment variable or a changed timeout in template.yaml therefore reaches the local run with no
second place to edit; an intrinsic this module cannot resolve raises `TemplateError` naming it.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devstack.aws import REGION

ACCOUNT_ID = "123456789012"
FUNCTION = "AWS::Serverless::Function"


class TemplateError(ValueError):
    """The template asks for something the local stack cannot provide."""


class _NoValue:
    """AWS::NoValue: the property is left out."""


NO_VALUE = _NoValue()


def parameter_values(template: dict[str, Any], overrides: Mapping[str, str]) -> dict[str, str]:
    """Every template parameter's value: the override, else its Default."""
    values: dict[str, str] = {}
    for name, spec in (template.get("Parameters") or {}).items():
        if name in overrides:
            values[name] = str(overrides[name])
        elif "Default" in spec:
            values[name] = as_text(spec["Default"])
    unknown = set(overrides) - set(template.get("Parameters") or {})
    if unknown:
        raise TemplateError(f"not parameters of the template: {', '.join(sorted(unknown))}")
    return values


@dataclass
class Resolver:
    """Resolves intrinsic functions against local values.

    `refs` maps a logical id to what `Ref` returns (a queue URL, a table name ...);
    `attributes` maps (logical id, attribute) to what `Fn::GetAtt` returns.
    """

    template: dict[str, Any]
    parameters: dict[str, str]
    refs: dict[str, str] = field(default_factory=dict)
    attributes: dict[tuple[str, str], str] = field(default_factory=dict)
    _conditions: dict[str, bool] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": "local",
            "AWS::StackId": f"arn:aws:cloudformation:{REGION}:{ACCOUNT_ID}:stack/local/0",
        }

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            conditions = self.template.get("Conditions") or {}
            if name not in conditions:
                raise TemplateError(f"unknown condition {name}")
            self._conditions[name] = bool(self.resolve(conditions[name]))
        return self._conditions[name]

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            return [v for v in (self.resolve(item) for item in value) if v is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            (key, argument), *_ = value.items()
            if key == "Ref":
                return self._ref(argument)
            if key == "Condition":
                return self.condition(argument)
            if key.startswith("Fn::"):
                return self._function(key, argument)
        return {
            k: v for k, v in ((k, self.resolve(v)) for k, v in value.items()) if v is not NO_VALUE
        }

    def _ref(self, name: str) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        for table in (self.parameters, self.pseudo, self.refs):
            if name in table:
                return table[name]
        raise TemplateError(f"the local stack has no value for Ref {name}")

    def _get_att(self, logical_id: str, attribute: str) -> str:
        try:
            return self.attributes[(logical_id, attribute)]
        except KeyError:
            raise TemplateError(
                f"the local stack has no value for Fn::GetAtt {logical_id}.{attribute}"
            ) from None

    def _function(self, name: str, argument: Any) -> Any:
        if name == "Fn::GetAtt":
            parts = argument.split(".", 1) if isinstance(argument, str) else argument
            return self._get_att(parts[0], parts[1])
        if name == "Fn::Sub":
            text, variables = (argument, {}) if isinstance(argument, str) else argument
            variables = {k: self.resolve(v) for k, v in variables.items()}
            return re.sub(
                r"\$\{([^}!]+)\}", lambda m: as_text(self._sub(m.group(1), variables)), text
            )
        if name == "Fn::If":
            condition, when_true, when_false = argument
            return self.resolve(when_true if self.condition(condition) else when_false)
        if name == "Fn::Equals":
            left, right = (self.resolve(v) for v in argument)
            return as_text(left) == as_text(right)
        if name == "Fn::Not":
            return not self.resolve(argument[0])
        if name == "Fn::And":
            return all(self.resolve(v) for v in argument)
        if name == "Fn::Or":
            return any(self.resolve(v) for v in argument)
        if name == "Fn::Join":
            separator, items = argument
            return separator.join(as_text(v) for v in self.resolve(items))
        if name == "Fn::Split":
            separator, text = argument
            return as_text(self.resolve(text)).split(separator)
        if name == "Fn::Select":
            index, items = argument
            return self.resolve(items)[int(self.resolve(index))]
        raise TemplateError(f"the local stack does not resolve {name}")

    def _sub(self, name: str, variables: dict[str, Any]) -> Any:
        if name in variables:
            return variables[name]
        if "." in name and name.split(".", 1)[0] in (self.template.get("Resources") or {}):
            return self._get_att(*name.split(".", 1))
        return self._ref(name)


def as_text(value: Any) -> str:
    """A template's scalar as CloudFormation passes it on: booleans as true / false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# --------------------------------------------------------------------------- functions


@dataclass(frozen=True)
class FunctionSpec:
    """A function of the template, as the local stack runs it."""

    logical_id: str
    code: Path  # the handler's source file, e.g. functions/consumer/app.py
    handler: str  # the attribute to call, e.g. "handler"
    timeout: int  # seconds
    memory: int  # MB
    environment: dict[str, str]
    events: dict[str, dict[str, Any]]  # name -> {"Type": ..., "Properties": {...}}, unresolved

    def event_of_type(self, kind: str) -> dict[str, Any]:
        for event in self.events.values():
            if event.get("Type") == kind:
                return event.get("Properties") or {}
        raise TemplateError(f"{self.logical_id} has no {kind} event")


def functions(template: dict[str, Any], resolver: Resolver, root: Path) -> dict[str, FunctionSpec]:
    """Every AWS::Serverless::Function, keyed by logical id, with Globals applied."""
    globals_ = (template.get("Globals") or {}).get("Function") or {}
    specs = {}
    for logical_id, resource in (template.get("Resources") or {}).items():
        if resource.get("Type") != FUNCTION:
            continue
        if "Condition" in resource and not resolver.condition(resource["Condition"]):
            continue  # not in this shape of the stack (e.g. the example tool, off)
        props = resource.get("Properties") or {}
        merged = {**globals_, **props}
        variables = {
            **((globals_.get("Environment") or {}).get("Variables") or {}),
            **((props.get("Environment") or {}).get("Variables") or {}),
        }
        environment = {}
        for name, value in variables.items():
            resolved = resolver.resolve(value)
            if resolved is not NO_VALUE:
                environment[name] = as_text(resolved)
        module, _, attribute = str(merged.get("Handler", "app.handler")).rpartition(".")
        code_uri = resolver.resolve(merged.get("CodeUri", "."))
        specs[logical_id] = FunctionSpec(
            logical_id=logical_id,
            code=root / str(code_uri) / f"{module.replace('.', '/')}.py",
            handler=attribute,
            timeout=int(resolver.resolve(merged.get("Timeout", 3))),
            memory=int(resolver.resolve(merged.get("MemorySize", 128))),
            environment=environment,
            events=dict(props.get("Events") or {}),
        )
    return specs


class _Recording(dict[str, str]):
    """An environment that notes every name read from it."""

    def __init__(self, values: Mapping[str, str]):
        super().__init__(values)
        self.read: set[str] = set()

    def get(self, name: Any, default: Any = None) -> Any:
        self.read.add(name)
        return super().get(name, default)

    def __getitem__(self, name: Any) -> Any:
        self.read.add(name)
        return super().__getitem__(name)

    def __contains__(self, name: Any) -> bool:
        self.read.add(name)
        return super().__contains__(name)


def variables_read(settings: Any, environment: Mapping[str, str]) -> set[str]:
    """The names a function's settings class (`settings.from_env`) reads of `environment`,
    whatever it makes of their values (a value it refuses was read all the same): what its
    Environment in template.yaml may set (tests/infra/test_configuration.py) and which of its
    secrets it reads (make smoke)."""
    from memagent.errors import ConfigurationError

    recording = _Recording(environment)
    with contextlib.suppress(ConfigurationError):
        settings.from_env(recording)
    return recording.read


def logical_id_of(value: Any) -> str:
    """The logical id that a `!Ref X` or `!GetAtt X.Attr` points at."""
    if isinstance(value, dict) and "Ref" in value:
        return value["Ref"]
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        return (target.split(".", 1) if isinstance(target, str) else target)[0]
    raise TemplateError(f"expected a Ref or Fn::GetAtt, got {value!r}")
