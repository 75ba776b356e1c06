"""The consumer's settings (ConsumerSettings): the model's and the provider's, and the turn's
own: the prompt, the context's bounds, keywords and handoff phrases, retries and the watchdog,
tools' bounds, budgets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from memagent.aws import DEAD_LETTER_ARN, RETRY_JITTER, RetrySchedule
from memagent.environment import Environment, Secret, Setting, declare, setting, table_of
from memagent.errors import ConfigurationError
from memagent.memory import FOLLOW_UP_MAX_PENDING, RECENT_CONVERSATIONS
from memagent.model import (
    DEFAULT_TRANSCRIPTION_MODEL,
    OPENAI_VOICES,
    ModelSettings,
    tools_settings,
)
from memagent.providers import ProviderSettings
from memagent.turn.keywords import HANDOFF_PHRASES, OPT_OUT_WORDS, STOP_WORDS, normalised
from memagent.turn.replies import WORD_LISTS, Replies, built_in, load

DEFAULT_SYSTEM_PROMPT = (
    "You are a warm, concise companion who chats with people on WhatsApp. "
    "Write short, natural messages. Pick up earlier threads when it helps the person."
)
# A persona is a few to some tens of KB; a file past this is the wrong file (and would be sent
# with every reply)
SYSTEM_PROMPT_MAX_CHARS = 100_000


@dataclass(frozen=True, kw_only=True)
class ConsumerSettings(ModelSettings, ProviderSettings):
    # SYSTEM_PROMPT_FILE (the template's) or SYSTEM_PROMPT (local runs): _system_prompt
    system_prompt: str = setting("SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT, custom=True)
    transcription_model: str = setting(
        "TRANSCRIPTION_MODEL", DEFAULT_TRANSCRIPTION_MODEL, parameter="TranscriptionModel"
    )
    # Voice notes go to an OpenAI-compatible /audio/transcriptions: by default the model's own
    # endpoint with ModelProvider=openai; with bedrock, only this one if set (else not transcribed)
    transcription_base_url: str | None = setting(
        "TRANSCRIPTION_BASE_URL", None, kind="url", parameter="TranscriptionBaseUrl", custom=True
    )
    transcription_api_key: Secret | None = field(default=None, repr=False)
    context_max_messages: int = setting("CONTEXT_MAX_MESSAGES", 60, minimum=1)
    context_max_chars: int = setting("CONTEXT_MAX_CHARS", 12_000, minimum=100)
    context_max_facts: int = setting("CONTEXT_MAX_FACTS", 30, minimum=0)
    media_max_bytes: int = setting("MEDIA_MAX_BYTES", 10 * 1024 * 1024, minimum=1)
    # documents read (memagent/turn/documents.py): a PDF or a plain-text file up to this size
    # (Meta delivers up to 100 MB; the text is read in memory), its first pages, its text cut
    # to fit the context (CONTEXT_MAX_CHARS) beside the turns around it
    document_max_bytes: int = setting(
        "DOCUMENT_MAX_BYTES", 10 * 1024 * 1024, minimum=1024, maximum=100 * 1024 * 1024
    )
    document_max_pages: int = setting("DOCUMENT_MAX_PAGES", 30, minimum=1, maximum=500)
    document_max_chars: int = setting("DOCUMENT_MAX_CHARS", 6000, minimum=200, maximum=50_000)
    opt_out_policy: str = setting(
        "OPT_OUT_POLICY", "keep", choices=("keep", "erase"), parameter="OptOutPolicy"
    )
    forget_keyword: str = setting("FORGET_KEYWORD", "forget me")
    # memagent.turn.keywords.HANDOFF_PHRASES and OPT_OUT_WORDS unless the replies file's lists
    # (or, outside the template, these variables) say otherwise: _handoff
    handoff_phrases: tuple[str, ...] = setting("HANDOFF_PHRASES", (), custom=True)
    opt_out_words: tuple[str, ...] = setting("OPT_OUT_WORDS", (), custom=True)
    parking_queue_url: str | None = setting("PARKING_QUEUE_URL", None)
    record_time_budget_seconds: float = setting("RECORD_TIME_BUDGET_SECONDS", 0.0, minimum=0)
    # retries: a failed record comes back after a backoff we set on the event queue (QUEUE_URL);
    # without it, after the queue's visibility timeout (memagent.aws.backoff's schedule)
    queue_url: str | None = setting("QUEUE_URL", None)
    retry_base_seconds: float = setting("RETRY_BASE_SECONDS", RetrySchedule.base_seconds, minimum=1)
    retry_max_seconds: float = setting(
        "RETRY_MAX_SECONDS", RetrySchedule.cap_seconds, minimum=1, maximum=43_200
    )
    retry_jitter: float = declare(RETRY_JITTER)
    defer_seconds: int = setting("DEFER_SECONDS", 2, minimum=0, maximum=900)
    # this long before the invocation's deadline, handled records are deleted and the rest
    # postponed on the backoff (0: no watchdog)
    watchdog_seconds: float = setting("WATCHDOG_SECONDS", 0.0, minimum=0)
    # one reply to a burst of lines a person sent while their previous turn was answered
    coalesce_bursts: bool = setting("COALESCE_BURSTS", True)
    # OperatorConsole=true: mark who wrote (RecentIndex)
    recent_conversations: bool = declare(RECENT_CONVERSATIONS)
    whasp_api_key: Secret | None = field(default=None, repr=False)
    meta_access_token: Secret | None = field(default=None, repr=False)
    # the operator's tools (TOOLS_FILE, memagent/model/tools.py) and the bounds of a turn with them
    tools: tuple = ()
    tool_max_rounds: int = setting("TOOL_MAX_ROUNDS", 3, minimum=1, maximum=10)
    tool_max_calls: int = setting("TOOL_MAX_CALLS", 6, minimum=1, maximum=50)
    tool_output_max_chars: int = setting(
        "TOOL_OUTPUT_MAX_CHARS", 4000, minimum=200, maximum=100_000
    )
    # a Lambda tool's answer (the SDK's read timeout): longer than the tool functions' own
    # Timeout, so their timeout is what answers
    tool_timeout_seconds: float = setting(
        "TOOL_TIMEOUT_SECONDS", 30.0, minimum=0, above=True, maximum=900
    )
    # budgets (memagent/memory/budget.py): a longer reply is shortened to this many messages, longer
    # voice notes are not transcribed, and past a daily limit a person gets one notice a day
    max_reply_parts: int = setting(
        "MAX_REPLY_PARTS", 3, minimum=1, maximum=100, parameter="MaxReplyParts"
    )
    max_audio_seconds: int = setting(
        "MAX_AUDIO_SECONDS", 300, minimum=1, parameter="MaxAudioSeconds"
    )
    # 0: no limit
    person_daily_turns: int = setting(
        "PERSON_DAILY_TURNS", 0, minimum=0, parameter="PersonDailyTurns", deployed=150
    )
    person_daily_tokens: int = setting(
        "PERSON_DAILY_TOKENS", 0, minimum=0, parameter="PersonDailyTokens", deployed=750_000
    )
    # voice replies (memagent/turn/voice.py): Meta only; the reply's text stays in memory
    voice_replies: str = setting(
        "VOICE_REPLIES", "off", choices=("off", "mirror", "always"), parameter="VoiceReplies"
    )
    # a longer reply goes as text (Polly takes 3,000 billed characters at most)
    voice_max_chars: int = setting("VOICE_MAX_CHARS", 600, minimum=1, maximum=3000)
    # a person's synthesized characters a day (0: no limit); past it, replies go as text
    voice_daily_chars: int = setting("VOICE_DAILY_CHARS", 6000, minimum=0)
    # Polly's engine (every voice memagent.aws.speech picks has standard and neural)
    voice_engine: str = setting("VOICE_ENGINE", "neural", choices=("standard", "neural"))
    # who speaks: Amazon Polly in the account, or OpenAI's speech endpoint where the model's home
    # is OpenAI (memagent/model/speech.py: the model's endpoint and key); checked in _voice
    voice_speech: str = setting(
        "VOICE_SPEECH", "polly", choices=("polly", "openai"), custom=True, parameter="VoiceSpeech"
    )
    voice_openai_model: str = setting("VOICE_OPENAI_MODEL", "gpt-4o-mini-tts")
    voice_openai_voice: str = setting("VOICE_OPENAI_VOICE", "coral", choices=OPENAI_VOICES)
    # every fixed text sent to a person, per language, with the operator's changes
    # (memagent/turn/replies.py: REPLIES_FILE, BUDGET_NOTICE, HANDOFF_NOTICE)
    replies: Replies = field(default_factory=built_in)
    # the built-in request_human tool: a request for a human by meaning (HANDOFF_TOOL)
    handoff_tool: bool = setting("HANDOFF_TOOL", True)
    # the built-in offer_choices tool: options to tap, Meta's buttons or list (CHOICES_TOOL)
    choices_tool: bool = setting("CHOICES_TOOL", True)
    # follow-ups (memagent/turn/follow_ups.py): on where the stack's schedule group is set
    follow_up_role_arn: str | None = setting("FOLLOW_UP_ROLE_ARN", None, custom=True)
    # where a delivery that failed for good goes
    follow_up_dead_letter_arn: str | None = setting("FOLLOW_UP_DEAD_LETTER_ARN", None, custom=True)
    follow_up_max_pending: int = declare(FOLLOW_UP_MAX_PENDING)
    # Meta, outside the 24-hour window: an approved template with one body parameter (the
    # follow-up's message); without one, such a follow-up is dropped with a count
    follow_up_template: str | None = setting(
        "FOLLOW_UP_TEMPLATE", None, parameter="FollowUpTemplate", custom=True
    )
    follow_up_template_language: str = setting(
        "FOLLOW_UP_TEMPLATE_LANGUAGE",
        "en_US",
        parameter="FollowUpTemplateLanguage",
        custom=True,
    )

    @classmethod
    def _read(cls, read: Environment) -> dict:
        """The custom reads (Setting.custom); Environment.values reads the others."""
        return {
            **super()._read(read),
            **cls._provider(read),
            "system_prompt": _system_prompt(read),
            **_transcription_endpoint(read),
            **tools_settings(read),
            **_replies(read),
            **_follow_ups(read, table_of(cls)),
            "voice_speech": _voice_speech(read, table_of(cls)),
        }

    @property
    def retention(self) -> timedelta | None:
        """How long a silent person is kept (None: until erased)."""
        days = self.inactive_retention_days
        return timedelta(days=days) if days else None


def _voice_speech(read: Environment, table: Mapping[str, Setting]) -> str:
    """VOICE_SPEECH=openai speaks through the model's own OpenAI endpoint: not with Bedrock,
    which has no speech endpoint (Polly is in the account)."""
    speech = read.value(table["voice_speech"])
    if speech == "openai" and read.value(table["model_provider"]) != "openai":
        read.problems.append(
            "VOICE_SPEECH=openai: OpenAI's speech endpoint is the model's, so MODEL_PROVIDER "
            "must be openai (with bedrock, leave VOICE_SPEECH at polly)"
        )
    return speech


def _system_prompt(read: Environment) -> str:
    """SYSTEM_PROMPT_FILE: the persona, a UTF-8 file shipped with the function (relative to its
    code, LAMBDA_TASK_ROOT, as TOOLS_FILE), read once at cold start: Lambda allows 4 KB for all
    of a function's variables together, too little for a real persona. SYSTEM_PROMPT, a short
    prompt in the environment, is for local runs; set one of the two."""
    path = read.optional("SYSTEM_PROMPT_FILE")
    if path is None:
        return read.text("SYSTEM_PROMPT", DEFAULT_SYSTEM_PROMPT)
    if read.optional("SYSTEM_PROMPT") is not None:
        read.problems.append("SYSTEM_PROMPT_FILE and SYSTEM_PROMPT: set one of the two")
    from pathlib import Path

    root = Path(read.optional("LAMBDA_TASK_ROOT") or ".")
    try:
        text = (root / path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        read.problems.append(
            f"SYSTEM_PROMPT_FILE {path}: no such file in the function's code ({root}); ship it "
            "beside the handler (functions/consumer/)"
        )
        return ""
    except (OSError, UnicodeDecodeError) as error:
        read.problems.append(f"SYSTEM_PROMPT_FILE {path}: not a readable UTF-8 file ({error})")
        return ""
    if not text:
        read.problems.append(f"SYSTEM_PROMPT_FILE {path}: the file is empty")
    elif len(text) > SYSTEM_PROMPT_MAX_CHARS:
        read.problems.append(
            f"SYSTEM_PROMPT_FILE {path}: {len(text)} characters, at most "
            f"{SYSTEM_PROMPT_MAX_CHARS} (is it the right file?)"
        )
    return text


def _handoff(read: Environment, words: Mapping[str, Any], where: str) -> dict:
    """The phrases that ask for a human, the replies file's `handoff_phrases` ([]: none), else
    HANDOFF_PHRASES (comma-separated, "off": none; for runs outside the template); unset, the
    defaults in several languages (memagent.turn.keywords)."""
    phrases: tuple[str, ...]
    if "handoff_phrases" in words:
        phrases = _listed(read, words["handoff_phrases"], f"{where}: handoff_phrases")
        return {"handoff_phrases": phrases, "opt_out_words": _opt_out_words(read, words, where)}
    raw = read.optional("HANDOFF_PHRASES")
    if raw is None:
        phrases = HANDOFF_PHRASES
    elif raw.strip().lower() == "off":
        phrases = ()
    else:
        phrases = tuple(p.strip() for p in raw.split(",") if p.strip())
        if not phrases:
            read.problems.append('HANDOFF_PHRASES: comma-separated phrases, or "off"')
    return {"handoff_phrases": phrases, "opt_out_words": _opt_out_words(read, words, where)}


def _listed(read: Environment, listed: object, entry: str) -> tuple[str, ...]:
    """A list of phrases from the replies file, each a text with a letter."""
    if not isinstance(listed, list) or not all(
        isinstance(p, str) and normalised(p) for p in listed
    ):
        read.problems.append(f"{entry}: a list of words or phrases, each with a letter")
        return ()
    return tuple(p.strip() for p in listed)


def _opt_out_words(read: Environment, words: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The messages that opt the person out, each a whole message (never a word inside a
    sentence): the replies file's `opt_out_words`, else OPT_OUT_WORDS (comma-separated); unset,
    the defaults in the languages of the handoff phrases (memagent.turn.keywords.OPT_OUT_WORDS).
    "stop" and "unsubscribe" always count."""
    if "opt_out_words" in words:
        chosen = _listed(read, words["opt_out_words"], f"{where}: opt_out_words")
        if not chosen:
            read.problems.append(f"{where}: opt_out_words: at least one word or phrase")
        return tuple(dict.fromkeys((*STOP_WORDS, *chosen)))
    raw = read.optional("OPT_OUT_WORDS")
    if raw is None:
        return OPT_OUT_WORDS
    chosen = tuple(w.strip() for w in raw.split(",") if w.strip())
    if not chosen or not all(normalised(w) for w in chosen):
        read.problems.append("OPT_OUT_WORDS: comma-separated words or phrases, each with a letter")
    return tuple(dict.fromkeys((*STOP_WORDS, *chosen)))


def _replies(read: Environment) -> dict:
    """The fixed replies (memagent/turn/replies.py) with the operator's changes: BUDGET_NOTICE
    and HANDOFF_NOTICE (older settings: one text for every language), then REPLIES_FILE (a TOML
    file relative to the function's code, LAMBDA_TASK_ROOT, like TOOLS_FILE), whose lists of
    words (handoff_phrases, opt_out_words) stand in for HANDOFF_PHRASES and OPT_OUT_WORDS."""
    replies = built_in()
    words: dict[str, Any] = {}
    where = "REPLIES_FILE"
    try:
        if budget := read.optional("BUDGET_NOTICE"):
            replies = replies.everywhere("budget_notice", budget, "BUDGET_NOTICE")
        if handoff := read.optional("HANDOFF_NOTICE"):
            replies = replies.everywhere("handoff_notice", handoff, "HANDOFF_NOTICE")
        if path := read.optional("REPLIES_FILE"):
            root = Path(read.optional("LAMBDA_TASK_ROOT") or ".")
            where = f"REPLIES_FILE {path}"
            changes = load(root / path, where)
            words = {name: changes.pop(name) for name in WORD_LISTS if name in changes}
            replies = replies.changed(changes, where)
    except ConfigurationError as error:
        read.problems.append(str(error))
    return {"replies": replies, **_handoff(read, words, where)}


def _transcription_endpoint(read: Environment) -> dict:
    if not read.optional("TRANSCRIPTION_BASE_URL"):
        return {}
    return {
        "transcription_base_url": read.url("TRANSCRIPTION_BASE_URL"),
        "transcription_api_key": read.secret("TRANSCRIPTION_API_KEY"),
    }


def _follow_ups(read: Environment, table: dict[str, Setting]) -> dict:
    """FOLLOW_UP_SCHEDULE_GROUP (the stack's schedule group) turns follow-ups on; Scheduler
    assumes FOLLOW_UP_ROLE_ARN to put them into the event queue (QUEUE_URL), and one it could
    not put there into FOLLOW_UP_DEAD_LETTER_ARN."""
    group = read.optional("FOLLOW_UP_SCHEDULE_GROUP")
    if group is None:
        return {}
    role = read.text("FOLLOW_UP_ROLE_ARN")
    if not read.optional("QUEUE_URL"):
        read.problems.append("QUEUE_URL: required with FOLLOW_UP_SCHEDULE_GROUP")
    return {
        "follow_up_role_arn": role,
        "follow_up_dead_letter_arn": read.matching(
            "FOLLOW_UP_DEAD_LETTER_ARN", DEAD_LETTER_ARN, "a standard SQS queue's ARN"
        ),
        "follow_up_max_pending": read.value(table["follow_up_max_pending"]),
        "follow_up_template": read.value(table["follow_up_template"]),
        "follow_up_template_language": read.value(table["follow_up_template_language"]),
    }
