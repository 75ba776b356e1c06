"""Settings of the functions that call the model (ModelSettings: the consumer, the compactor):
where the model runs (OpenAI's Responses API or Bedrock's), its key, timeouts, caching fields,
the stack's daily token limit, and the operator's tools (TOOLS_FILE, read and checked here)."""

from __future__ import annotations

from dataclasses import dataclass, field

from memagent.environment import Environment, Secret, is_local_stack, off, setting, table_of
from memagent.errors import ConfigurationError
from memagent.memory import MemorySettings

# Where the model runs: OpenAI (or any server speaking the Responses API, OPENAI_BASE_URL) with an
# API key, or Amazon Bedrock's bedrock-runtime in this account with the role's bearer token
MODEL_PROVIDERS = ("openai", "bedrock")

# OpenAI's current transcription model; the older names (whisper-1, gpt-4o-transcribe,
# gpt-4o-mini-transcribe) are still accepted, as is any name an OpenAI-compatible server knows
DEFAULT_TRANSCRIPTION_MODEL = "gpt-transcribe"


@dataclass(frozen=True, kw_only=True)
class ModelSettings(MemorySettings):
    """Settings of the functions that call the model (consumer, compactor)."""

    openai_model: str = setting("OPENAI_MODEL", parameter="OpenAIModel", custom=True)
    model_provider: str = setting(
        "MODEL_PROVIDER",
        "openai",
        choices=MODEL_PROVIDERS,
        parameter="ModelProvider",
        custom=True,  # decides the others' reads
    )
    # with bedrock: the region's bedrock-runtime by default
    openai_base_url: str | None = setting(
        "OPENAI_BASE_URL", None, parameter="OpenAIBaseUrl", custom=True
    )
    openai_timeout_seconds: float = setting("OPENAI_TIMEOUT_SECONDS", 25.0, minimum=0, above=True)
    openai_max_retries: int = setting("OPENAI_MAX_RETRIES", 2, minimum=0)
    openai_api_key: Secret | None = field(default=None, repr=False)  # never read with bedrock
    bedrock_region: str | None = None  # with bedrock: the region the bearer token is signed for
    # sent as max_output_tokens with every reply
    max_reply_tokens: int = setting(
        "MAX_REPLY_TOKENS", 1024, minimum=16, parameter="MaxReplyTokens"
    )
    # prompt_cache_key, safety_identifier and the cache retention: off for a server that
    # rejects fields it does not know
    openai_cache_fields: bool = setting("OPENAI_CACHE_FIELDS", True, parameter="OpenAICacheFields")
    # "off" sends none (None)
    openai_cache_retention: str | None = setting(
        "OPENAI_CACHE_RETENTION", "24h", choices=("24h", "in_memory", "off"), custom=True
    )
    # the stack's model tokens a day, replies, descriptions, transcriptions and folds alike
    # (memagent.memory.budget.StackBudget): 0, none (StackTokenBudgetAlarm still watches)
    stack_daily_tokens_hard_limit: int = setting(
        "STACK_DAILY_TOKENS_HARD_LIMIT", 0, minimum=0, parameter="StackDailyTokensHardLimit"
    )

    @classmethod
    def _read(cls, read: Environment) -> dict:
        table = table_of(cls)
        provider = read.value(table["model_provider"])
        model = read.text("OPENAI_MODEL")
        base_url = read.optional("OPENAI_BASE_URL")
        region = None
        if provider == "bedrock":
            from memagent.model.bedrock import is_bedrock_runtime, runtime_url

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
            "openai_api_key": None if provider == "bedrock" else read.secret("OPENAI_API_KEY"),
            "bedrock_region": region,
            "openai_cache_retention": off(read.value(table["openai_cache_retention"])),
        }


def tools_settings(read: Environment) -> dict:
    """TOOLS_FILE, relative to the function's code (LAMBDA_TASK_ROOT), read and checked now."""
    path = read.optional("TOOLS_FILE")
    if not path:
        return {}
    from pathlib import Path

    from memagent.model.tools import load_tools, tool_hosts

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
    return {"tools": tools}
