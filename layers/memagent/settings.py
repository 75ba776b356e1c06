"""Configuration: one validated model per function, read from the environment at cold start.

The environment names are part of the public interface (README, template.yaml). A missing or bad
setting raises ConfigurationError naming it. Each secret is given either as `<NAME>_PARAM` (the SSM
Parameter Store SecureString name, used in AWS) or as `<NAME>` (the plain value, for local runs);
it is read lazily and cached, so a secret store outage fails the request (503/retry), not the
cold start. AWS endpoints come from boto3's standard AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from memagent.errors import ConfigurationError, SecretUnavailable

SECRET_MAX_AGE_SECONDS = 300

DEFAULT_SYSTEM_PROMPT = (
    "You are a warm, concise companion who chats with people on WhatsApp. "
    "Write short, natural messages. Pick up earlier threads when it helps the person."
)


class Secret:
    """A secret given as a plain value (local runs) or as an SSM parameter name (AWS)."""

    def __init__(
        self,
        name: str,
        *,
        value: str | None,
        parameter: str | None,
        check: Callable[..., object] | None = None,
    ):
        self.name = name
        self._value = value
        self._parameter = parameter
        self._provider = None  # Powertools' SSM provider: caches for SECRET_MAX_AGE_SECONDS
        # check(value, setting=name) raises ConfigurationError: a plain value is checked now
        # (cold start), a stored one each time it is read (a 503, naming the parameter)
        self._check = check
        if check is not None and value is not None:
            check(value, setting=name)

    @classmethod
    def from_env(
        cls, name: str, env: Mapping[str, str], *, check: Callable[..., object] | None = None
    ) -> Secret:
        value, parameter = env.get(name) or None, env.get(f"{name}_PARAM") or None
        if value is None and parameter is None:
            raise ConfigurationError(f"set {name}_PARAM (SSM parameter name) or {name} (local)")
        return cls(name, value=value, parameter=parameter, check=check)

    def get(self, *, fresh: bool = False) -> str:
        """The value; cached for SECRET_MAX_AGE_SECONDS unless `fresh` (e.g. after the
        provider refused the cached key: it may have been rotated since)."""
        if self._value is not None:
            return self._value
        try:
            if self._provider is None:
                from aws_lambda_powertools.utilities.parameters import SSMProvider
                from botocore.config import Config

                # fail fast: a webhook must answer within whasp's deadline, a 503 beats a timeout
                self._provider = SSMProvider(
                    boto_config=Config(
                        connect_timeout=1, read_timeout=2, retries={"max_attempts": 2}
                    )
                )
            value = self._provider.get(
                self._parameter, decrypt=True, max_age=SECRET_MAX_AGE_SECONDS, force_fetch=fresh
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

    def __repr__(self) -> str:  # never print the value
        return f"Secret({self.name})"


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore", populate_by_name=True)

    agent_id: str = Field(alias="AGENT_ID", min_length=1, max_length=64, pattern=r"^[\w.-]+$")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        try:
            return cls.model_validate({k: v for k, v in env.items() if v != ""})
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
            )
            raise ConfigurationError(f"invalid configuration: {problems}") from None


ProviderName = Literal["whasp", "meta"]
DEFAULT_META_GRAPH_URL = "https://graph.facebook.com/v26.0"


class WebhookSettings(_Settings):
    provider: ProviderName = Field(alias="PROVIDER", default="whasp")
    queue_url: str = Field(alias="QUEUE_URL", min_length=1)
    max_body_bytes: int = Field(alias="WEBHOOK_MAX_BODY_BYTES", default=256 * 1024, gt=0)
    tolerance_seconds: int = Field(alias="WEBHOOK_TOLERANCE_SECONDS", default=300, gt=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        env = os.environ if env is None else env
        settings = super().from_env(env)
        if settings.provider == "meta":
            # Meta signs with the app secret and checks the callback with a verify token
            for name in ("META_APP_SECRET", "META_VERIFY_TOKEN"):
                object.__setattr__(settings, f"_{name.lower()}", Secret.from_env(name, env))
        else:
            from memagent.whasp import check_signing_secrets, is_local_stack

            check = partial(check_signing_secrets, allow_test_secret=is_local_stack(env))
            secret = Secret.from_env("WEBHOOK_SECRET", env, check=check)
            object.__setattr__(settings, "_webhook_secret", secret)
        return settings

    @property
    def webhook_secret(self) -> Secret:
        return self._webhook_secret  # type: ignore[attr-defined]

    @property
    def meta_app_secret(self) -> Secret:
        return self._meta_app_secret  # type: ignore[attr-defined]

    @property
    def meta_verify_token(self) -> Secret:
        return self._meta_verify_token  # type: ignore[attr-defined]


class MemorySettings(_Settings):
    """What every function that reads or writes memory needs."""

    table_name: str = Field(alias="TABLE_NAME", min_length=1)
    compact_threshold: int = Field(alias="COMPACT_THRESHOLD", default=40, ge=2)
    compact_keep: int = Field(alias="COMPACT_KEEP", default=20, ge=1)
    ledger_ttl_days: int = Field(alias="LEDGER_TTL_DAYS", default=30, ge=7)
    max_facts: int = Field(alias="MAX_FACTS", default=200, ge=1)
    max_fact_chars: int = Field(alias="MAX_FACT_CHARS", default=160, ge=20)
    archive_bucket: str | None = Field(alias="ARCHIVE_BUCKET", default=None)

    @field_validator("compact_keep")
    @classmethod
    def _keep_below_threshold(cls, keep: int, info) -> int:
        threshold = info.data.get("compact_threshold", 40)
        if keep >= threshold:
            raise ValueError("COMPACT_KEEP must be smaller than COMPACT_THRESHOLD")
        return keep


class ModelSettings(MemorySettings):
    """Settings of the functions that call the model (consumer, compactor)."""

    openai_model: str = Field(alias="OPENAI_MODEL", min_length=1)
    openai_base_url: str | None = Field(alias="OPENAI_BASE_URL", default=None)
    openai_timeout_seconds: float = Field(alias="OPENAI_TIMEOUT_SECONDS", default=25.0, gt=0)
    openai_max_retries: int = Field(alias="OPENAI_MAX_RETRIES", default=2, ge=0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None):
        env = os.environ if env is None else env
        settings = super().from_env(env)
        object.__setattr__(settings, "_openai_api_key", Secret.from_env("OPENAI_API_KEY", env))
        return settings

    @property
    def openai_api_key(self) -> Secret:
        return self._openai_api_key  # type: ignore[attr-defined]


class ConsumerSettings(ModelSettings):
    provider: ProviderName = Field(alias="PROVIDER", default="whasp")
    whasp_api_url: str | None = Field(alias="WHASP_API_URL", default=None)
    meta_graph_url: str = Field(alias="META_GRAPH_URL", default=DEFAULT_META_GRAPH_URL)
    typing_indicator: bool = Field(alias="TYPING_INDICATOR", default=True)
    system_prompt: str = Field(alias="SYSTEM_PROMPT", default=DEFAULT_SYSTEM_PROMPT, min_length=1)
    transcription_model: str = Field(alias="TRANSCRIPTION_MODEL", default="gpt-4o-mini-transcribe")
    context_max_messages: int = Field(alias="CONTEXT_MAX_MESSAGES", default=60, ge=1)
    context_max_chars: int = Field(alias="CONTEXT_MAX_CHARS", default=12_000, ge=100)
    context_max_facts: int = Field(alias="CONTEXT_MAX_FACTS", default=30, ge=0)
    media_max_bytes: int = Field(alias="MEDIA_MAX_BYTES", default=10 * 1024 * 1024, gt=0)
    # Where media may be fetched from (origins, space- or comma-separated); empty = the origin
    # of WHASP_API_URL. The API key is only ever sent to WHASP_API_URL's origin.
    whasp_media_origins: str | None = Field(alias="WHASP_MEDIA_ORIGINS", default=None)
    # One download, redirects included, however slowly the host sends
    media_deadline_seconds: float = Field(alias="MEDIA_DEADLINE_SECONDS", default=30.0, gt=0)
    opt_out_policy: Literal["keep", "erase"] = Field(alias="OPT_OUT_POLICY", default="keep")
    forget_keyword: str = Field(alias="FORGET_KEYWORD", default="forget me")
    whasp_timeout_seconds: float = Field(alias="WHASP_TIMEOUT_SECONDS", default=10.0, gt=0)
    parking_queue_url: str | None = Field(alias="PARKING_QUEUE_URL", default=None)
    record_time_budget_seconds: float = Field(alias="RECORD_TIME_BUDGET_SECONDS", default=0, ge=0)
    # retries: a failed record comes back after a backoff we set on the event queue (QUEUE_URL);
    # without it, after the queue's visibility timeout
    queue_url: str | None = Field(alias="QUEUE_URL", default=None)
    retry_base_seconds: float = Field(alias="RETRY_BASE_SECONDS", default=10, ge=1)
    retry_max_seconds: float = Field(alias="RETRY_MAX_SECONDS", default=900, ge=1, le=43_200)
    retry_jitter: float = Field(alias="RETRY_JITTER", default=0.2, ge=0, lt=1)
    defer_seconds: int = Field(alias="DEFER_SECONDS", default=2, ge=0, le=900)

    @field_validator("whasp_api_url", "meta_graph_url")
    @classmethod
    def _http_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        if not url.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL")
        return url.rstrip("/")

    @field_validator("whasp_media_origins")
    @classmethod
    def _origins(cls, value: str | None) -> str | None:
        from memagent.whasp import parse_media_origins

        parse_media_origins(value, "https://unused.example")  # raises ValueError naming the entry
        return value

    @property
    def media_origins(self) -> frozenset[tuple[str, str, int]]:
        """whasp media may come only from these origins (memagent.whasp.Origin)."""
        from memagent.whasp import parse_media_origins

        return parse_media_origins(self.whasp_media_origins, self.whasp_api_url or "")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ConsumerSettings:
        env = os.environ if env is None else env
        settings = super().from_env(env)
        if settings.provider == "meta":
            token = Secret.from_env("META_ACCESS_TOKEN", env)
            object.__setattr__(settings, "_meta_access_token", token)
        else:
            if not settings.whasp_api_url:
                raise ConfigurationError("invalid configuration: WHASP_API_URL: Field required")
            object.__setattr__(settings, "_whasp_api_key", Secret.from_env("WHASP_API_KEY", env))
        return settings

    @property
    def whasp_api_key(self) -> Secret:
        return self._whasp_api_key  # type: ignore[attr-defined]

    @property
    def meta_access_token(self) -> Secret:
        return self._meta_access_token  # type: ignore[attr-defined]


class CompactorSettings(ModelSettings):
    pass
