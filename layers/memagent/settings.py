"""Configuration: one validated settings object per function, read from the environment at cold
start.

The environment names are part of the public interface (README, template.yaml). A missing or bad
setting raises ConfigurationError naming it (every problem at once, not just the first). Each
secret is given either as `<NAME>_PARAM` (the SSM Parameter Store SecureString name, used in AWS)
or as `<NAME>` (the plain value, for local runs; the stored one wins when both are set); it is
read lazily and cached, so a secret store outage fails the request (503/retry), not the cold
start. AWS endpoints come from boto3's standard AWS_ENDPOINT_URL.

A plain reader rather than a pydantic model: the webhook's cold start pays for every import on
its path, and a dozen typed environment variables do not need a validation framework.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any, ClassVar, TypeVar

from memagent.errors import ConfigurationError, SecretUnavailable
from memagent.providers import (
    check_signing_secrets,
    is_local_stack,
    parse_media_origins,
    parse_origins,
    refuse_published,
)

_T = TypeVar("_T")

SECRET_MAX_AGE_SECONDS = 300
# The person key of the tests, the local stack and `sam local` (memagent.memory.person, which
# re-exports it): published, so never one a deployed stack may keep (refuse_published)
LOCAL_PERSON_KEY = "memagent-local-person-key-published-never-use-in-aws"
# The secret's read is on the webhook's path (cold start, then every SECRET_MAX_AGE_SECONDS):
# 2 attempts in all x (0.5 s connect + 1 s read) + one backoff under 1 s = 4 s at worst, so it
# and the SQS call (memagent.aws.queue.DEADLINE_CONFIG, 4 s) fit whasp's 10 s deadline.
SSM_CONFIG = {
    "connect_timeout": 0.5,
    "read_timeout": 1.0,
    "retries": {"total_max_attempts": 2, "mode": "standard"},
}

DEFAULT_BUDGET_NOTICE = (
    "We've talked a lot today, so I'm taking a break until tomorrow. I've kept everything you "
    "wrote and will pick it up then."
)
DEFAULT_SYSTEM_PROMPT = (
    "You are a warm, concise companion who chats with people on WhatsApp. "
    "Write short, natural messages. Pick up earlier threads when it helps the person."
)

# OpenAI's current transcription model; the older names (whisper-1, gpt-4o-transcribe,
# gpt-4o-mini-transcribe) are still accepted, as is any name an OpenAI-compatible server knows
DEFAULT_TRANSCRIPTION_MODEL = "gpt-transcribe"

_REQUIRED = object()
_AGENT_ID = re.compile(r"^[\w.-]{1,64}$")


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
        config: Mapping[str, object] = SSM_CONFIG,
    ):
        self.name = name
        self._value = value
        self._parameter = parameter
        self._secrets_manager = secrets_manager
        self._config = config
        self._provider = None  # Powertools' provider: caches for SECRET_MAX_AGE_SECONDS
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
                kind = "secretsmanager" if self._secrets_manager else "ssm"
                provider = (
                    parameters.SecretsProvider
                    if self._secrets_manager
                    else (parameters.SSMProvider)
                )
                self._provider = provider(
                    boto3_client=boto3.client(kind, config=Config(**self._config))
                )
            options = {} if self._secrets_manager else {"decrypt": True}
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

    def integer(self, name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
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

    def secret(self, name: str, check: Callable[..., object] | None = None) -> Secret:
        try:
            return Secret.from_env(name, self._env, check=check)
        except ConfigurationError as error:
            self.problems.append(str(error))
            return Secret(name, value=None, parameter=None)

    def person_key(self) -> Secret:
        """The stack's key for person keys (memagent.memory.person), required by every function."""
        try:
            return person_key_secret(self._env)
        except ConfigurationError as error:
            self.problems.append(str(error))
            return Secret("PERSON_KEY", value=None, parameter=None)

    def check(self) -> None:
        if self.problems:
            raise ConfigurationError("invalid configuration: " + "; ".join(self.problems))


# The person key's read, on the webhook's cold path after the signing secret's: one attempt
# (1.5 s at worst), so both reads and the SQS call (4 s each) still fit whasp's 10 s deadline.
PERSON_KEY_CONFIG = {**SSM_CONFIG, "retries": {"total_max_attempts": 1, "mode": "standard"}}
PERSON_KEY_MIN_CHARS = 32


def _check_person_key(value: str, *, setting: str, local: bool) -> None:
    if len(value) < PERSON_KEY_MIN_CHARS:
        raise ConfigurationError(f"{setting}: at least {PERSON_KEY_MIN_CHARS} characters")
    # the tests' and the local stack's key is in the README: under it anybody can compute a
    # phone's key, so a deployed stack refuses it as it refuses the test-only signing secret
    refuse_published(value, LOCAL_PERSON_KEY, setting=setting, what="local key", local=local)


def person_key_secret(env: Mapping[str, str]) -> Secret:
    """PERSON_KEY_SECRET_ARN (the template's generated secret), else PERSON_KEY (local runs
    only when it is the published LOCAL_PERSON_KEY)."""
    return Secret.from_env(
        "PERSON_KEY",
        env,
        check=partial(_check_person_key, local=is_local_stack(env)),
        secrets_manager=True,
        config=PERSON_KEY_CONFIG,
    )


def _off(value: str) -> str | None:
    return None if value == "off" else value


def _time_zone(read: Environment) -> str:
    from memagent.memory import is_zone

    name = read.text("TIME_ZONE", "UTC")
    if name.upper() != "UTC" and not is_zone(name):
        read.problems.append(f"TIME_ZONE: {name!r} is not a time zone (e.g. Europe/London)")
    return name


PROVIDERS = ("whasp", "meta")
# Where the model runs: OpenAI (or any server speaking the Responses API, OPENAI_BASE_URL) with an
# API key, or Amazon Bedrock's bedrock-runtime in this account with the role's bearer token
MODEL_PROVIDERS = ("openai", "bedrock")
DEFAULT_META_GRAPH_URL = "https://graph.facebook.com/v26.0"


def secrets_of(settings: object) -> list[Secret]:
    """Every secret a settings object holds (to drop their caches after a SnapStart restore)."""
    return [value for value in vars(settings).values() if isinstance(value, Secret)]


def _agent_id(env: Environment) -> str:
    return env.matching("AGENT_ID", _AGENT_ID, "1 to 64 letters, digits, '_', '.' or '-'")


@dataclass(frozen=True, kw_only=True)
class WebhookSettings:
    agent_id: str
    provider: str = "whasp"
    queue_url: str
    max_body_bytes: int = 256 * 1024
    tolerance_seconds: int = 300
    # whasp signs with the webhook secret; Meta with the app secret, and checks the callback
    # with a verify token. Only the configured provider's secrets are required.
    webhook_secret: Secret | None = field(default=None, repr=False)
    meta_app_secret: Secret | None = field(default=None, repr=False)
    meta_verify_token: Secret | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        read = Environment(env)
        provider = read.choice("PROVIDER", PROVIDERS, "whasp")
        meta = provider == "meta"
        check = None
        if not meta:
            check = partial(
                check_signing_secrets, allow_test_secret=is_local_stack(read.environment)
            )
        settings = cls(
            agent_id=_agent_id(read),
            provider=provider,
            queue_url=read.text("QUEUE_URL"),
            max_body_bytes=read.integer("WEBHOOK_MAX_BODY_BYTES", 256 * 1024, minimum=1),
            tolerance_seconds=read.integer("WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1),
            webhook_secret=None if meta else read.secret("WEBHOOK_SECRET", check),
            meta_app_secret=read.secret("META_APP_SECRET") if meta else None,
            meta_verify_token=read.secret("META_VERIFY_TOKEN") if meta else None,
        )
        read.person_key()  # checked here, read by memagent.memory.person on first use
        read.check()
        return settings


@dataclass(frozen=True, kw_only=True)
class MemorySettings:
    """What every function that reads or writes memory needs."""

    agent_id: str
    table_name: str
    compact_threshold: int = 40
    compact_keep: int = 20
    ledger_ttl_days: int = 30
    # a person silent this long is forgotten (TTL on their state item); 0 keeps them until erased
    inactive_retention_days: int = 365
    # memory a stack before keyed person keys kept is looked up (and moved:
    # memagent.lifecycle.upgrade)
    legacy_person_keys: bool = True
    max_facts: int = 200
    max_fact_chars: int = 160
    archive_bucket: str | None = None
    media_bucket: str | None = None  # voice notes and photos kept between attempts
    # the compactor works on keys it is given (the stream's), never derives one
    reads_person_keys: ClassVar[bool] = True
    # a chat handed to a human goes back to the agent after this long without an operator reply
    handoff_timeout_hours: int = 24
    operator_event_bus: str | None = None  # EventBridge bus for handoff notifications
    # the agent's zone (IANA name): the person's own when their phone's country has one zone
    time_zone: str = "UTC"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None):
        read = Environment(env)
        settings = cls(**cls._read(read))
        read.check()
        return settings

    @classmethod
    def _read(cls, read: Environment) -> dict:
        threshold = read.integer("COMPACT_THRESHOLD", 40, minimum=2)
        keep = read.integer("COMPACT_KEEP", 20, minimum=1)
        if keep >= threshold:
            read.problems.append("COMPACT_KEEP: must be smaller than COMPACT_THRESHOLD")
        if cls.reads_person_keys:
            read.person_key()  # checked here, read by memagent.memory.person on first use
        return {
            "agent_id": _agent_id(read),
            "table_name": read.text("TABLE_NAME"),
            "compact_threshold": threshold,
            "compact_keep": keep,
            "ledger_ttl_days": read.integer("LEDGER_TTL_DAYS", 30, minimum=7),
            "inactive_retention_days": read.integer("INACTIVE_RETENTION_DAYS", 365, minimum=0),
            "legacy_person_keys": read.flag("LEGACY_PERSON_KEYS", True),
            "max_facts": read.integer("MAX_FACTS", 200, minimum=1),
            "max_fact_chars": read.integer("MAX_FACT_CHARS", 160, minimum=20),
            "archive_bucket": read.optional("ARCHIVE_BUCKET"),
            "media_bucket": read.optional("MEDIA_BUCKET"),
            "handoff_timeout_hours": read.integer(
                "HANDOFF_TIMEOUT_HOURS", 24, minimum=1, maximum=24 * 30
            ),
            "operator_event_bus": read.optional("OPERATOR_EVENT_BUS"),
            "time_zone": _time_zone(read),
        }


@dataclass(frozen=True, kw_only=True)
class ModelSettings(MemorySettings):
    """Settings of the functions that call the model (consumer, compactor)."""

    openai_model: str
    model_provider: str = "openai"
    openai_base_url: str | None = None  # with bedrock: the region's bedrock-runtime by default
    openai_timeout_seconds: float = 25.0
    openai_max_retries: int = 2
    openai_api_key: Secret | None = field(default=None, repr=False)  # never read with bedrock
    bedrock_region: str | None = None  # with bedrock: the region the bearer token is signed for
    max_reply_tokens: int = 1024  # sent as max_output_tokens with every reply
    # prompt_cache_key, safety_identifier and the cache retention: off for a server that
    # rejects fields it does not know
    openai_cache_fields: bool = True
    openai_cache_retention: str | None = "24h"
    # the stack's model tokens a day, replies, descriptions, transcriptions and folds alike
    # (memagent.memory.budget.StackBudget): 0, none (StackTokenBudgetAlarm still watches)
    stack_daily_tokens_hard_limit: int = 0

    @classmethod
    def _read(cls, read: Environment) -> dict:
        provider = read.choice("MODEL_PROVIDER", MODEL_PROVIDERS, "openai")
        model = read.text("OPENAI_MODEL")
        base_url = read.optional("OPENAI_BASE_URL")
        region = None
        if provider == "bedrock":
            from memagent.model import is_bedrock_runtime, runtime_url

            region = read.optional("AWS_REGION") or read.text("AWS_DEFAULT_REGION")
            if (
                base_url
                and not is_bedrock_runtime(base_url)
                and not is_local_stack(read.environment)
            ):
                # the role's bearer token goes wherever this points: only to bedrock-runtime,
                # over TLS (a local stand-in only in a local run)
                read.problems.append(
                    "OPENAI_BASE_URL: with MODEL_PROVIDER=bedrock it must be bedrock-runtime's "
                    f"https URL ({runtime_url(region)}) or be left unset; the function role's "
                    "bearer token is sent there"
                )
            base_url = base_url or runtime_url(region)
            if ":application-inference-profile/" in model:  # bedrock-runtime answers 400
                read.problems.append(
                    "OPENAI_MODEL: bedrock-runtime's Responses API takes no application "
                    "inference profile; name a system one (us.openai.gpt-6-luna)"
                )
        return {
            **super()._read(read),
            "openai_model": model,
            "model_provider": provider,
            "openai_base_url": base_url,
            "openai_timeout_seconds": read.number(
                "OPENAI_TIMEOUT_SECONDS", 25.0, minimum=0, above=True
            ),
            "openai_max_retries": read.integer("OPENAI_MAX_RETRIES", 2, minimum=0),
            "stack_daily_tokens_hard_limit": read.integer(
                "STACK_DAILY_TOKENS_HARD_LIMIT", 0, minimum=0
            ),
            "openai_api_key": None if provider == "bedrock" else read.secret("OPENAI_API_KEY"),
            "bedrock_region": region,
            "max_reply_tokens": read.integer("MAX_REPLY_TOKENS", 1024, minimum=16),
            "openai_cache_fields": read.flag("OPENAI_CACHE_FIELDS", True),
            "openai_cache_retention": _off(
                read.choice("OPENAI_CACHE_RETENTION", ("24h", "in_memory", "off"), "24h")
            ),
        }


@dataclass(frozen=True, kw_only=True)
class ProviderSettings:
    """What a function that sends through the provider needs (the consumer, the admin API's
    operator replies)."""

    provider: str = "whasp"
    whasp_api_url: str | None = None
    meta_graph_url: str = DEFAULT_META_GRAPH_URL
    typing_indicator: bool = True
    # Where media may be fetched from (origins, space- or comma-separated); empty = the origin
    # of WHASP_API_URL. The API key is only ever sent to WHASP_API_URL's origin.
    whasp_media_origins: str | None = None
    # Provider meta: media hosts besides Meta's own (lookaside.fbsbx.com), https only
    meta_media_origins: str | None = None
    # One download, redirects included, however slowly the host sends
    media_deadline_seconds: float = 30.0
    whasp_timeout_seconds: float = 10.0
    whasp_api_key: Secret | None = field(default=None, repr=False)
    meta_access_token: Secret | None = field(default=None, repr=False)

    @staticmethod
    def _provider(read: Environment) -> dict:
        provider = read.choice("PROVIDER", PROVIDERS, "whasp")
        meta = provider == "meta"
        meta_graph_url = DEFAULT_META_GRAPH_URL
        if read.optional("META_GRAPH_URL"):
            meta_graph_url = read.url("META_GRAPH_URL")
        return {
            "provider": provider,
            # whasp needs its API's URL and key; Meta an access token (the Graph URL defaults)
            "whasp_api_url": None if meta else read.url("WHASP_API_URL"),
            "whasp_api_key": None if meta else read.secret("WHASP_API_KEY"),
            "meta_graph_url": meta_graph_url,
            "meta_access_token": read.secret("META_ACCESS_TOKEN") if meta else None,
            "typing_indicator": read.flag("TYPING_INDICATOR", True),
            "whasp_media_origins": _media_origins(read),
            "meta_media_origins": _media_origins(read, "META_MEDIA_ORIGINS", https_only=True),
            "media_deadline_seconds": read.number(
                "MEDIA_DEADLINE_SECONDS", 30.0, minimum=0, above=True
            ),
            "whasp_timeout_seconds": read.number(
                "WHASP_TIMEOUT_SECONDS", 10.0, minimum=0, above=True
            ),
        }

    @property
    def media_origins(self) -> frozenset[tuple[str, str, int]]:
        """whasp media may come only from these origins (memagent.providers.origins.Origin)."""
        return parse_media_origins(self.whasp_media_origins, self.whasp_api_url or "")


@dataclass(frozen=True, kw_only=True)
class AdminSettings(MemorySettings, ProviderSettings):
    """The admin API: memory, and the provider for the operator's replies. The template always
    sets PROVIDER; without it the admin API sends nothing (`sends` is false: an operator reply
    answers 503 saying so) and needs no provider settings."""

    sends: bool = True

    @classmethod
    def _read(cls, read: Environment) -> dict:
        if read.optional("PROVIDER") is None:
            return {**super()._read(read), "sends": False}
        return {**super()._read(read), **cls._provider(read)}


@dataclass(frozen=True, kw_only=True)
class ConsumerSettings(ModelSettings, ProviderSettings):
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    transcription_model: str = DEFAULT_TRANSCRIPTION_MODEL
    # Voice notes go to an OpenAI-compatible /audio/transcriptions: by default the model's own
    # endpoint with ModelProvider=openai; with bedrock, only this one if set (else not transcribed)
    transcription_base_url: str | None = None
    transcription_api_key: Secret | None = field(default=None, repr=False)
    context_max_messages: int = 60
    context_max_chars: int = 12_000
    context_max_facts: int = 30
    media_max_bytes: int = 10 * 1024 * 1024
    opt_out_policy: str = "keep"
    forget_keyword: str = "forget me"
    handoff_phrases: tuple[str, ...] = ()  # memagent.turn.keywords.HANDOFF_PHRASES unless set
    handoff_notice: str = ""
    opt_out_words: tuple[str, ...] = ()  # memagent.turn.keywords.OPT_OUT_WORDS unless set
    parking_queue_url: str | None = None
    record_time_budget_seconds: float = 0
    # retries: a failed record comes back after a backoff we set on the event queue (QUEUE_URL);
    # without it, after the queue's visibility timeout
    queue_url: str | None = None
    retry_base_seconds: float = 10
    retry_max_seconds: float = 900
    retry_jitter: float = 0.2
    defer_seconds: int = 2
    # this long before the invocation's deadline, handled records are deleted and the rest
    # postponed on the backoff (0: no watchdog)
    watchdog_seconds: float = 0
    # one reply to a burst of lines a person sent while their previous turn was answered
    coalesce_bursts: bool = True
    whasp_api_key: Secret | None = field(default=None, repr=False)
    meta_access_token: Secret | None = field(default=None, repr=False)
    # the operator's tools (TOOLS_FILE, memagent/model/tools.py) and the bounds of a turn with them
    tools: tuple = ()
    tool_max_rounds: int = 3
    tool_max_calls: int = 6
    tool_output_max_chars: int = 4000
    tool_timeout_seconds: float = 30.0  # a Lambda tool's answer (the SDK's read timeout)
    # budgets (memagent/memory/budget.py): a longer reply is shortened to this many messages, longer
    # voice notes are not transcribed, and past a daily limit a person gets one notice a day
    max_reply_parts: int = 3
    max_audio_seconds: int = 300
    person_daily_turns: int = 0  # 0: no limit
    person_daily_tokens: int = 0  # 0: no limit
    budget_notice: str = DEFAULT_BUDGET_NOTICE
    # the built-in "hand to a human" tool: on by default where tools are declared (HANDOFF_TOOL)
    handoff_tool: bool = False

    @classmethod
    def _read(cls, read: Environment) -> dict:
        return {
            **super()._read(read),
            **cls._provider(read),
            "system_prompt": read.text("SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT),
            "transcription_model": read.text("TRANSCRIPTION_MODEL", DEFAULT_TRANSCRIPTION_MODEL),
            **_transcription_endpoint(read),
            "context_max_messages": read.integer("CONTEXT_MAX_MESSAGES", 60, minimum=1),
            "context_max_chars": read.integer("CONTEXT_MAX_CHARS", 12_000, minimum=100),
            "context_max_facts": read.integer("CONTEXT_MAX_FACTS", 30, minimum=0),
            "media_max_bytes": read.integer("MEDIA_MAX_BYTES", 10 * 1024 * 1024, minimum=1),
            "opt_out_policy": read.choice("OPT_OUT_POLICY", ("keep", "erase"), "keep"),
            "forget_keyword": read.text("FORGET_KEYWORD", "forget me"),
            **_handoff(read),
            "parking_queue_url": read.optional("PARKING_QUEUE_URL"),
            "record_time_budget_seconds": read.number("RECORD_TIME_BUDGET_SECONDS", 0, minimum=0),
            "queue_url": read.optional("QUEUE_URL"),
            "retry_base_seconds": read.number("RETRY_BASE_SECONDS", 10, minimum=1),
            "retry_max_seconds": read.number("RETRY_MAX_SECONDS", 900, minimum=1, maximum=43_200),
            "retry_jitter": read.number("RETRY_JITTER", 0.2, minimum=0, maximum=1, below=True),
            "defer_seconds": read.integer("DEFER_SECONDS", 2, minimum=0, maximum=900),
            "watchdog_seconds": read.number("WATCHDOG_SECONDS", 0, minimum=0),
            "coalesce_bursts": read.flag("COALESCE_BURSTS", True),
            **_tools(read),
            "max_reply_parts": read.integer("MAX_REPLY_PARTS", 3, minimum=1, maximum=100),
            "max_audio_seconds": read.integer("MAX_AUDIO_SECONDS", 300, minimum=1),
            "person_daily_turns": read.integer("PERSON_DAILY_TURNS", 0, minimum=0),
            "person_daily_tokens": read.integer("PERSON_DAILY_TOKENS", 0, minimum=0),
            "budget_notice": read.text("BUDGET_NOTICE", DEFAULT_BUDGET_NOTICE),
            "handoff_tool": read.flag("HANDOFF_TOOL", bool(read.optional("TOOLS_FILE"))),
        }

    @property
    def retention(self) -> timedelta | None:
        """How long a silent person is kept (None: until erased)."""
        days = self.inactive_retention_days
        return timedelta(days=days) if days else None


def _tools(read: Environment) -> dict:
    """TOOLS_FILE, relative to the function's code (LAMBDA_TASK_ROOT), read and checked now."""
    path = read.optional("TOOLS_FILE")
    if not path:
        return {}
    from pathlib import Path

    from memagent.model import load_tools, tool_hosts

    try:
        hosts = tool_hosts(read.optional("TOOL_HOSTS"))
    except ValueError as error:
        read.problems.append(f"TOOL_HOSTS: {error}")
        return {}
    root = Path(read.optional("LAMBDA_TASK_ROOT") or ".")
    try:
        tools = load_tools(
            root / path,
            hosts=hosts,
            environ=read.environment,
            secret=lambda label, parameter: Secret(label, value=None, parameter=parameter),
        )
    except ConfigurationError as error:
        read.problems.append(str(error))
        return {}
    return {
        "tools": tools,
        "tool_max_rounds": read.integer("TOOL_MAX_ROUNDS", 3, minimum=1, maximum=10),
        "tool_max_calls": read.integer("TOOL_MAX_CALLS", 6, minimum=1, maximum=50),
        "tool_output_max_chars": read.integer(
            "TOOL_OUTPUT_MAX_CHARS", 4000, minimum=200, maximum=100_000
        ),
        # longer than the tool functions' own Timeout, so their timeout is what answers
        "tool_timeout_seconds": read.number(
            "TOOL_TIMEOUT_SECONDS", 30, minimum=0, above=True, maximum=900
        ),
    }


def _handoff(read: Environment) -> dict:
    """HANDOFF_PHRASES: comma-separated phrases that ask for a human ("off": none); unset, the
    defaults in several languages (memagent.turn.keywords)."""
    from memagent.turn import HANDOFF_NOTICE, HANDOFF_PHRASES

    raw = read.optional("HANDOFF_PHRASES")
    if raw is None:
        phrases = HANDOFF_PHRASES
    elif raw.strip().lower() == "off":
        phrases = ()
    else:
        phrases = tuple(p.strip() for p in raw.split(",") if p.strip())
        if not phrases:
            read.problems.append('HANDOFF_PHRASES: comma-separated phrases, or "off"')
    return {
        "handoff_phrases": phrases,
        "handoff_notice": read.text("HANDOFF_NOTICE", HANDOFF_NOTICE),
        "opt_out_words": _opt_out_words(read),
    }


def _opt_out_words(read: Environment) -> tuple[str, ...]:
    """OPT_OUT_WORDS: comma-separated messages that opt the person out, each a whole message
    (never a word inside a sentence); unset, the defaults in the languages of the handoff
    phrases (memagent.turn.keywords.OPT_OUT_WORDS). "stop" and "unsubscribe" always count."""
    from memagent.turn import OPT_OUT_WORDS, STOP_WORDS, normalised

    raw = read.optional("OPT_OUT_WORDS")
    if raw is None:
        return OPT_OUT_WORDS
    chosen = tuple(w.strip() for w in raw.split(",") if w.strip())
    if not chosen or not all(normalised(w) for w in chosen):
        read.problems.append("OPT_OUT_WORDS: comma-separated words or phrases, each with a letter")
    return tuple(dict.fromkeys((*STOP_WORDS, *chosen)))


def _transcription_endpoint(read: Environment) -> dict:
    if not read.optional("TRANSCRIPTION_BASE_URL"):
        return {}
    return {
        "transcription_base_url": read.url("TRANSCRIPTION_BASE_URL"),
        "transcription_api_key": read.secret("TRANSCRIPTION_API_KEY"),
    }


def _media_origins(
    read: Environment, name: str = "WHASP_MEDIA_ORIGINS", *, https_only: bool = False
) -> str | None:
    value = read.optional(name)
    if value is not None:
        try:  # names the bad entry
            parse_origins(value, https_only=https_only)
        except ValueError as error:
            read.problems.append(f"{name}: {error}")
    return value


@dataclass(frozen=True, kw_only=True)
class CompactorSettings(ModelSettings):
    reads_person_keys: ClassVar[bool] = False
    # CompactionFailureQueue (memagent.compaction.retry): a failed stream batch's jobs are queued
    # there to run after retry_base_seconds, and a job that fails again comes back on a backoff
    # doubling from there up to retry_max_seconds; without it, they wait for the visibility timeout
    failure_queue_url: str | None = None
    retry_base_seconds: int = 900
    retry_max_seconds: int = 43_200
    retry_jitter: float = 0.2

    @classmethod
    def _read(cls, read: Environment) -> dict:
        return {
            **super()._read(read),
            "failure_queue_url": read.optional("FAILURE_QUEUE_URL"),
            # SQS delays a message 900 s at most, and a visibility 12 hours at most
            "retry_base_seconds": read.integer("RETRY_BASE_SECONDS", 900, minimum=1, maximum=900),
            "retry_max_seconds": read.integer(
                "RETRY_MAX_SECONDS", 43_200, minimum=1, maximum=43_200
            ),
            "retry_jitter": read.number("RETRY_JITTER", 0.2, minimum=0, maximum=1, below=True),
        }
