"""The environment reader: typed, checked reads of environment variables and secrets, the one
piece every function's settings share. Each function reads its own settings class, in its own
wing (memagent.<wing>.settings), with an Environment, at cold start.

Each setting is declared once, as its settings class's field (`setting`: the variable, the
default, the bounds, the template Parameter that sets it); the class's fields so declared are
its table (`table_of`), which the cold start reads (`Environment.values`) and
tests/infra/test_settings_table.py holds template.yaml and the docs to.

The environment names are part of the public interface (docs/configuration.md, template.yaml). A
missing or bad setting raises ConfigurationError naming it (every problem at once, not just the
first). Each secret is given either as `<NAME>_PARAM` (the SSM Parameter Store SecureString name,
used in AWS) or as `<NAME>` (the plain value, for local runs; the stored one wins when both are
set); it is read lazily and cached, so a secret store outage fails the request (503/retry), not
the cold start. AWS endpoints come from boto3's standard AWS_ENDPOINT_URL.

A plain reader rather than a pydantic model: the webhook's cold start pays for every import on
its path, and a dozen typed environment variables do not need a validation framework.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from memagent.errors import ConfigurationError, SecretUnavailable

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.parameters.base import BaseProvider

_T = TypeVar("_T")

SECRET_MAX_AGE_SECONDS = 300
# The secret's read is on the webhook's path (cold start, then every SECRET_MAX_AGE_SECONDS):
# 2 attempts in all x (0.5 s connect + 1 s read) + one backoff under 1 s = 4 s at worst, so it
# and the SQS call (memagent.aws.queue.DEADLINE_CONFIG, 4 s) fit whasp's 10 s deadline.
SSM_CONFIG = {
    "connect_timeout": 0.5,
    "read_timeout": 1.0,
    "retries": {"total_max_attempts": 2, "mode": "standard"},
}

# `sam local invoke` sets AWS_SAM_LOCAL; the local stack and the tests set MEMAGENT_LOCAL_STACK.
LOCAL_STACK_FLAGS = ("MEMAGENT_LOCAL_STACK", "AWS_SAM_LOCAL")

_REQUIRED = object()
_AGENT_ID = re.compile(r"^[\w.-]{1,64}$")


def is_local_stack(env: Mapping[str, str]) -> bool:
    """True when the environment says this is a local run (never set in the deployed template)."""
    return any(env.get(name, "").lower() in ("1", "true") for name in LOCAL_STACK_FLAGS)


HMAC_BLOCK_BYTES = 64  # SHA-256's block: HMAC hashes a longer key, pads a shorter with NULs


def as_hmac_key(value: str | bytes) -> bytes:
    """The key HMAC-SHA256 actually uses for `value`: hashed when longer than a block, and
    padded with NULs to one, so keys that differ only by trailing NULs are the same key."""
    key = value.encode() if isinstance(value, str) else value
    if len(key) > HMAC_BLOCK_BYTES:
        key = hashlib.sha256(key).digest()
    return key.rstrip(b"\0")


def refuse_published(
    value: str | bytes, published: str | bytes, *, setting: str, what: str, local: bool
) -> None:
    """The one rule for a value published for local runs (the test-only signing secret, the
    local person key): anybody can read it, so it is refused unless the run is `local`
    (is_local_stack); so is any value that is the same HMAC key (the published one padded
    with NULs); the error names the setting, never the value."""
    if as_hmac_key(value) == as_hmac_key(published) and not local:
        raise ConfigurationError(
            f"{setting} is the published {what}; it is accepted only in a local run "
            f"({' or '.join(LOCAL_STACK_FLAGS)} set)"
        )


class Secret:
    """A secret given as a plain value (local runs) or as an SSM parameter name (AWS); with
    `secrets_manager`, as a Secrets Manager secret's ARN instead of a parameter."""

    def __init__(
        self,
        name: str,
        *,
        value: str | None,
        parameter: str | None,
        check: Callable[..., object] | None = None,
        secrets_manager: bool = False,
        config: Mapping[str, Any] = SSM_CONFIG,
    ):
        self.name = name
        self._value = value
        self._parameter = parameter
        self._secrets_manager = secrets_manager
        self._config = config
        # Powertools' provider: caches for SECRET_MAX_AGE_SECONDS
        self._provider: BaseProvider | None = None
        # check(value, setting=name) raises ConfigurationError: a plain value is checked now
        # (cold start), a stored one each time it is read (a 503, naming the parameter)
        self._check = check
        if check is not None and value is not None:
            check(value, setting=name)

    @classmethod
    def from_env(
        cls,
        name: str,
        env: Mapping[str, str],
        *,
        check: Callable[..., object] | None = None,
        **options: Any,
    ) -> Secret:
        where = "_SECRET_ARN" if options.get("secrets_manager") else "_PARAM"
        parameter = env.get(f"{name}{where}") or None
        plain = env.get(name) or None  # local runs (sam local invoke --env-vars)
        # the stored secret wins: a plain value left in a shell or an environment (a local
        # run's) never stands in for the stack's own
        value = None if parameter else plain
        if value is None and parameter is None:
            store = "Secrets Manager secret" if where == "_SECRET_ARN" else "SSM parameter name"
            raise ConfigurationError(f"set {name}{where} ({store}) or {name} (local)")
        return cls(name, value=value, parameter=parameter, check=check, **options)

    def get(self, *, fresh: bool = False) -> str:
        """The value; cached for SECRET_MAX_AGE_SECONDS unless `fresh` (e.g. after the
        provider refused the cached key: it may have been rotated since)."""
        if self._value is not None:
            return self._value
        try:
            if self._provider is None:
                import boto3
                from aws_lambda_powertools.utilities import parameters
                from botocore.config import Config

                # fail fast: a webhook must answer within whasp's deadline, a 503 beats a timeout.
                # boto3's default session, shared with the function's other clients, has loaded
                # botocore's data files already; a session of its own would load them again.
                kind: Literal["secretsmanager", "ssm"] = (
                    "secretsmanager" if self._secrets_manager else "ssm"
                )
                provider = (
                    parameters.SecretsProvider
                    if self._secrets_manager
                    else (parameters.SSMProvider)
                )
                self._provider = provider(
                    boto3_client=boto3.client(kind, config=Config(**self._config))
                )
            options: dict[str, Any] = {} if self._secrets_manager else {"decrypt": True}
            assert self._parameter is not None  # from_env gives a value or a parameter
            value = self._provider.get(
                self._parameter, max_age=SECRET_MAX_AGE_SECONDS, force_fetch=fresh, **options
            )
        except Exception as error:  # any failure of the secret store: fail closed, retry later
            raise SecretUnavailable(f"{self.name} could not be read") from error
        if not value:
            raise SecretUnavailable(f"{self.name} is empty")
        if self._check is not None:
            try:
                self._check(str(value), setting=f"{self.name}_PARAM ({self._parameter})")
            except ConfigurationError as error:
                raise SecretUnavailable(str(error)) from None
        return str(value)

    def renew(self) -> None:
        """Forget the SSM client and the cached value (after a SnapStart restore)."""
        self._provider = None

    def __repr__(self) -> str:  # never print the value
        return f"Secret({self.name})"


KINDS = ("text", "integer", "number", "flag", "choice", "optional", "url")


@dataclass(frozen=True)
class Setting:
    """One environment variable a settings class reads, declared once: its default and bounds
    (the read refuses what they refuse), and the template Parameter that sets it, if any.
    tests/infra/test_settings_table.py holds template.yaml's parameters and the docs' rows to
    these declarations. `deployed`: the Parameter's default where the template's differs from
    the code's (a limit the code leaves off, say). `custom`: read by the class's own code
    (conditionally, or checked against another setting), still with this default and bounds."""

    name: str
    default: Any = _REQUIRED
    kind: str = "text"
    minimum: float | None = None
    maximum: float | None = None
    above: bool = False  # a number strictly above the minimum
    below: bool = False  # and strictly below the maximum
    choices: tuple[str, ...] = ()
    parameter: str | None = None
    deployed: Any = None
    custom: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.kind in ("integer", "number") and self.minimum is None:
            raise ValueError(f"{self.name}: a number needs its minimum")

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED


_SETTING = "setting"


def _kind_of(default: object, choices: tuple[str, ...]) -> str:
    if choices:
        return "choice"
    for kind, types in (
        ("flag", bool),
        ("integer", int),
        ("number", float),
        ("optional", type(None)),
    ):
        if isinstance(default, types):
            return kind
    return "text"


def setting(name: str, default: Any = _REQUIRED, *, kind: str | None = None, **rules: Any) -> Any:
    """A settings dataclass's field declared with its environment variable: its default is the
    field's, its kind (unless given) follows the default's type (bool: flag, int: integer, float:
    number, None: optional, str: text, with `choices`: choice)."""
    choices = tuple(rules.pop("choices", ()))
    declared = Setting(name, default, kind or _kind_of(default, choices), choices=choices, **rules)
    return declare(declared)


def declare(declared: Setting) -> Any:
    """A field for a Setting declared elsewhere (one read by several functions' classes)."""
    metadata = {_SETTING: declared}
    if declared.required:
        return dataclasses.field(metadata=metadata)
    return dataclasses.field(default=declared.default, metadata=metadata)


def table_of(cls: type) -> dict[str, Setting]:
    """A settings class's table: each field declared with its Setting, by field name."""
    return {f.name: f.metadata[_SETTING] for f in dataclasses.fields(cls) if _SETTING in f.metadata}


class Environment:
    """Typed reads of environment variables. Each bad or missing value is noted under its name;
    `check()` raises one ConfigurationError listing them all. An empty value counts as unset."""

    def __init__(self, env: Mapping[str, str] | None = None):
        self._env = os.environ if env is None else env
        self.problems: list[str] = []

    @property
    def environment(self) -> Mapping[str, str]:
        return self._env

    def _raw(self, name: str) -> str | None:
        value = self._env.get(name)
        return value if value not in (None, "") else None

    def text(self, name: str, default: object = _REQUIRED) -> str:
        value = self._raw(name)
        if value is None:
            if default is _REQUIRED:
                self.problems.append(f"{name}: required")
                return ""
            return default  # type: ignore[return-value]
        return value

    def _parsed(self, name: str, convert: Callable[[str], _T], what: str) -> _T | None:
        """The value converted; None when unset, or when it is not `what` (noted)."""
        raw = self._raw(name)
        if raw is None:
            return None
        try:
            return convert(raw)
        except ValueError:
            self.problems.append(f"{name}: must be {what}")
            return None

    def optional(self, name: str) -> str | None:
        return self._raw(name)

    def matching(self, name: str, pattern: re.Pattern[str], hint: str) -> str:
        value = self.text(name)
        if value and not pattern.match(value):
            self.problems.append(f"{name}: {hint}")
        return value

    def choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.text(name, default)
        if value not in choices:
            self.problems.append(f"{name}: must be one of {', '.join(choices)}")
        return value

    def url(self, name: str) -> str:
        value = self.text(name)
        if value and not value.startswith(("https://", "http://")):
            self.problems.append(f"{name}: must be an http(s) URL")
        return value.rstrip("/")

    def integer(
        self, name: str, default: int, *, minimum: float, maximum: float | None = None
    ) -> int:
        value = self._parsed(name, int, "a whole number")
        if value is None:
            return default
        if value < minimum:
            self.problems.append(f"{name}: must be at least {minimum}")
        elif maximum is not None and value > maximum:
            self.problems.append(f"{name}: must be at most {maximum}")
        return value

    def number(
        self,
        name: str,
        default: float,
        *,
        minimum: float,
        above: bool = False,
        maximum: float | None = None,
        below: bool = False,
    ) -> float:
        """A finite number >= minimum (> with `above`), <= maximum (< with `below`)."""
        value = self._parsed(name, float, "a number")
        if value is None:
            return default
        if value != value or value in (float("inf"), float("-inf")):  # nan, inf
            self.problems.append(f"{name}: must be a finite number")
        elif value < minimum or (above and value == minimum):
            self.problems.append(f"{name}: must be {'above' if above else 'at least'} {minimum}")
        elif maximum is not None and (value > maximum or (below and value == maximum)):
            self.problems.append(f"{name}: must be {'below' if below else 'at most'} {maximum}")
        return value

    def flag(self, name: str, default: bool) -> bool:
        raw = self._raw(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in ("true", "1", "yes", "on"):
            return True
        if value in ("false", "0", "no", "off"):
            return False
        self.problems.append(f"{name}: must be true or false")
        return default

    def value(self, declared: Setting) -> Any:
        """A declared setting's value, read with its default and bounds."""
        name, default = declared.name, declared.default
        if declared.kind == "text":
            return self.text(name, default)
        if declared.kind == "optional":
            return self.optional(name)
        if declared.kind == "flag":
            return self.flag(name, default)
        if declared.kind == "choice":
            return self.choice(name, declared.choices, default)
        if declared.kind == "url":
            return self.url(name) if declared.required or self._raw(name) else default
        minimum, maximum = declared.minimum, declared.maximum
        assert minimum is not None  # Setting requires it of a number
        if declared.kind == "integer":
            return self.integer(name, default, minimum=minimum, maximum=maximum)
        return self.number(
            name,
            default,
            minimum=minimum,
            above=declared.above,
            maximum=maximum,
            below=declared.below,
        )

    def values(self, cls: type) -> dict[str, Any]:
        """Every field of a settings class its table declares, read (but the custom ones)."""
        return {
            field: self.value(declared)
            for field, declared in table_of(cls).items()
            if not declared.custom
        }

    def secret(self, name: str, check: Callable[..., object] | None = None) -> Secret:
        try:
            return Secret.from_env(name, self._env, check=check)
        except ConfigurationError as error:
            self.problems.append(str(error))
            return Secret(name, value=None, parameter=None)

    def check(self) -> None:
        if self.problems:
            raise ConfigurationError("invalid configuration: " + "; ".join(self.problems))


def secrets_of(settings: object) -> list[Secret]:
    """Every secret a settings object holds (to drop their caches after a SnapStart restore)."""
    return [value for value in vars(settings).values() if isinstance(value, Secret)]


def agent_id(env: Environment) -> str:
    """AGENT_ID: the agent's name, in every function's settings and every person key."""
    return env.matching("AGENT_ID", _AGENT_ID, "1 to 64 letters, digits, '_', '.' or '-'")


def off(value: str) -> str | None:
    """A setting's value, or None where it says "off"."""
    return None if value == "off" else value
