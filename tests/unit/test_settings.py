"""Settings are read from the environment at cold start; a bad or missing value names itself."""

from __future__ import annotations

import base64
import json
import re

import pytest

from memagent.compaction import CompactorSettings
from memagent.errors import ConfigurationError
from memagent.memory.person import LOCAL_PERSON_KEY
from memagent.turn import ConsumerSettings
from memagent.webhook import WebhookSettings

CONSUMER = {
    "AGENT_ID": "coach",
    "PERSON_KEY": LOCAL_PERSON_KEY,
    "MEMAGENT_LOCAL_STACK": "1",  # the published local key is accepted in local runs only
    "TABLE_NAME": "memory",
    "OPENAI_MODEL": "gpt-6-luna",
    "OPENAI_API_KEY": "sk-test",
    "WHASP_API_URL": "https://api.whasp.example/",
    "WHASP_API_KEY": "whasp-key",
}


def test_defaults_and_types_from_a_minimal_environment():
    settings = ConsumerSettings.from_env(CONSUMER)
    assert settings.whasp_api_url == "https://api.whasp.example"
    assert (settings.compact_threshold, settings.compact_keep) == (40, 20)
    assert settings.context_max_chars == 12_000 and settings.openai_timeout_seconds == 25.0
    assert settings.opt_out_policy == "keep" and settings.parking_queue_url is None
    assert settings.openai_api_key.get() == "sk-test"


def test_the_current_transcription_model_is_the_default_and_older_names_still_work():
    assert ConsumerSettings.from_env(CONSUMER).transcription_model == "gpt-transcribe"
    older = ConsumerSettings.from_env({**CONSUMER, "TRANSCRIPTION_MODEL": "whisper-1"})
    assert older.transcription_model == "whisper-1"


def test_every_bad_value_is_named_in_one_error():
    env = {
        **CONSUMER,
        "AGENT_ID": "coach agent",
        "COMPACT_THRESHOLD": "ten",
        "CONTEXT_MAX_MESSAGES": "0",
        "OPT_OUT_POLICY": "delete",
        "WHASP_API_URL": "ftp://whasp",
        "OPENAI_TIMEOUT_SECONDS": "0",
    }
    with pytest.raises(ConfigurationError) as raised:
        ConsumerSettings.from_env(env)
    message = str(raised.value)
    for name in (
        "AGENT_ID",
        "COMPACT_THRESHOLD",
        "CONTEXT_MAX_MESSAGES",
        "OPT_OUT_POLICY",
        "WHASP_API_URL",
        "OPENAI_TIMEOUT_SECONDS",
    ):
        assert name in message


def test_keep_must_be_below_the_threshold():
    with pytest.raises(ConfigurationError, match="COMPACT_KEEP"):
        ConsumerSettings.from_env({**CONSUMER, "COMPACT_THRESHOLD": "20", "COMPACT_KEEP": "20"})


def test_a_failed_compactions_retry_delays_stay_within_what_sqs_can_delay():
    compactor = {k: v for k, v in CONSUMER.items() if not k.startswith("WHASP")}
    settings = CompactorSettings.from_env(compactor)
    # by default: 15 minutes after the failure, then doubling up to 12 hours
    assert (settings.retry_base_seconds, settings.retry_max_seconds) == (900, 43_200)
    assert settings.failure_queue_url is None
    # SQS delays a message 900 s at most, and sets a visibility of 12 hours at most
    with pytest.raises(ConfigurationError) as raised:
        CompactorSettings.from_env(
            {**compactor, "RETRY_BASE_SECONDS": "901", "RETRY_MAX_SECONDS": "43201"}
        )
    assert "RETRY_BASE_SECONDS" in str(raised.value)
    assert "RETRY_MAX_SECONDS" in str(raised.value)


STRONG_SECRET = "whsec_" + base64.b64encode(b"a 32-byte key for settings tests").decode()


def test_an_empty_value_counts_as_unset_and_secrets_never_print():
    webhook = {
        "AGENT_ID": "coach",
        "QUEUE_URL": "https://q",
        "WEBHOOK_SECRET": STRONG_SECRET,
        "PERSON_KEY": LOCAL_PERSON_KEY,
        "MEMAGENT_LOCAL_STACK": "1",
    }
    settings = WebhookSettings.from_env({**webhook, "WEBHOOK_MAX_BODY_BYTES": ""})
    assert settings.max_body_bytes == 256 * 1024
    assert STRONG_SECRET not in repr(settings)
    with pytest.raises(ConfigurationError, match="QUEUE_URL: required"):
        WebhookSettings.from_env({**webhook, "QUEUE_URL": ""})


def test_a_weak_signing_secret_is_named_with_the_other_problems():
    with pytest.raises(ConfigurationError) as raised:
        WebhookSettings.from_env({"AGENT_ID": "coach", "WEBHOOK_SECRET": "whsec_eA=="})
    assert "WEBHOOK_SECRET" in str(raised.value) and "QUEUE_URL" in str(raised.value)
    assert "whsec_eA==" not in str(raised.value)


def test_each_provider_requires_only_its_own_secrets():
    meta = {
        "AGENT_ID": "coach",
        "QUEUE_URL": "https://q",
        "PROVIDER": "meta",
        "PERSON_KEY": "k" * 32,
    }
    with pytest.raises(ConfigurationError, match="META_APP_SECRET") as raised:
        WebhookSettings.from_env(meta)
    assert "WEBHOOK_SECRET" not in str(raised.value)
    settings = WebhookSettings.from_env({**meta, "META_APP_SECRET": "a", "META_VERIFY_TOKEN": "t"})
    assert settings.webhook_secret is None and settings.meta_verify_token.get() == "t"
    consumer = {k: v for k, v in CONSUMER.items() if not k.startswith("WHASP")}
    with pytest.raises(ConfigurationError, match="WHASP_API_URL: required") as raised:
        ConsumerSettings.from_env(consumer)
    # the message says what the setting is and where it comes from, and the way without it
    assert "WhaspApiUrl" in str(raised.value) and "PROVIDER=meta" in str(raised.value)
    settings = ConsumerSettings.from_env(
        {**consumer, "PROVIDER": "meta", "META_ACCESS_TOKEN": "tok", "TYPING_INDICATOR": "false"}
    )
    assert settings.whasp_api_url is None and settings.typing_indicator is False
    assert settings.meta_graph_url.startswith("https://graph.facebook.com/")


def test_the_person_key_is_required_long_and_read_from_secrets_manager_in_aws():
    """Given no person key, or a short one, the cold start names it; in AWS the functions are
    given the secret's ARN, never the value."""
    webhook = {"AGENT_ID": "coach", "QUEUE_URL": "https://q", "WEBHOOK_SECRET": STRONG_SECRET}
    with pytest.raises(ConfigurationError, match=r"PERSON_KEY_SECRET_ARN \(Secrets Manager"):
        WebhookSettings.from_env(webhook)
    with pytest.raises(ConfigurationError, match="PERSON_KEY: at least 32 characters"):
        ConsumerSettings.from_env({**CONSUMER, "PERSON_KEY": "short"})
    arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:PersonKeySecret-AbCdEf"
    WebhookSettings.from_env({**webhook, "PERSON_KEY_SECRET_ARN": arn})  # read on first use


def test_the_tools_file_is_checked_at_cold_start_naming_the_bad_entry(tmp_path):
    tools = tmp_path / "tools.json"
    good = {
        "name": "list_free_slots",
        "description": "Free slots on a day",
        "parameters": {"type": "object", "properties": {"day": {"type": "string"}}},
        "lambda": "arn:aws:lambda:eu-west-1:123456789012:function:booking",
    }
    env = {**CONSUMER, "TOOLS_FILE": str(tools), "TOOL_HOSTS": "https://api.example.com"}
    cases = {
        "tool #2 (book): say where it runs": {"name": "book", "description": "Books"},
        "tool #2 (order): https://evil.example:443 is not in TOOL_HOSTS": {
            **good,
            "name": "order",
            "lambda": None,
            "https": {"url": "https://evil.example/order"},
        },
        "tool #2 (order): 'https.url' must be an https URL": {
            **good,
            "name": "order",
            "lambda": None,
            "https": {"url": "http://api.example.com/order"},
        },
        "tool #2 (bad name!): 'name' must be": {**good, "name": "bad name!"},
        "tool #2 (slots): 'parameters' must be a JSON schema": {
            **good,
            "name": "slots",
            "parameters": {"type": "string"},
        },
        "tool #2 (slots):": {
            **good,
            "name": "slots",
            "parameters": {"type": "object", "required": 3},
        },
        "tool #2 (slots): 'caller' 'email' is not one of none, phone, bsuid, key": {
            **good,
            "name": "slots",
            "caller": ["key", "email"],
        },
        "tool #2: the name 'list_free_slots' is declared twice": good,
    }
    for expected, second in cases.items():
        second = {k: v for k, v in second.items() if v is not None}
        tools.write_text(json.dumps({"tools": [good, second]}))
        with pytest.raises(ConfigurationError, match=re.escape(expected)):
            ConsumerSettings.from_env(env)
    tools.write_text(json.dumps({"tools": [good]}))
    assert [t.name for t in ConsumerSettings.from_env(env).tools] == ["list_free_slots"]
    with pytest.raises(ConfigurationError, match="TOOL_TIMEOUT_SECONDS: must be above 0"):
        ConsumerSettings.from_env({**env, "TOOL_TIMEOUT_SECONDS": "0"})
    timed = ConsumerSettings.from_env({**env, "TOOL_TIMEOUT_SECONDS": "12"})
    assert timed.tool_timeout_seconds == 12
    tools.write_text("not json")
    with pytest.raises(ConfigurationError, match=r"TOOLS_FILE .*not a JSON object"):
        ConsumerSettings.from_env(env)


def test_follow_ups_need_a_standard_dead_letter_queue_for_every_schedule():
    from memagent.operator import AdminSettings

    # given follow-ups turned on for the consumer and the admin API
    dead_letters = "arn:aws:sqs:eu-west-1:123456789012:agent-FollowUpDeadLetterQueue-1A2B"
    on = {
        **CONSUMER,
        "QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/agent-EventQueue.fifo",
        "FOLLOW_UP_SCHEDULE_GROUP": "agent-follow-ups",
        "FOLLOW_UP_ROLE_ARN": "arn:aws:iam::123456789012:role/agent-FollowUpSchedulerRole",
        "FOLLOW_UP_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/123456789012/q.fifo",
    }
    for settings in (ConsumerSettings, AdminSettings):
        # then its dead-letter queue is read, and required
        read = settings.from_env({**on, "FOLLOW_UP_DEAD_LETTER_ARN": dead_letters})
        assert read.follow_up_dead_letter_arn == dead_letters
        with pytest.raises(ConfigurationError, match="FOLLOW_UP_DEAD_LETTER_ARN: required"):
            settings.from_env(on)
        # and a FIFO queue, which Scheduler takes as no dead-letter queue, is refused by name
        fifo = {**on, "FOLLOW_UP_DEAD_LETTER_ARN": dead_letters + ".fifo"}
        with pytest.raises(ConfigurationError, match="FOLLOW_UP_DEAD_LETTER_ARN: a standard"):
            settings.from_env(fifo)


def test_the_persona_is_read_from_its_file_once_at_cold_start(tmp_path):
    # given a persona of 20 KB in the function's code, named by SYSTEM_PROMPT_FILE
    persona = "You are Coach Ana, who trains first-time runners. " * 400
    (tmp_path / "persona.md").write_text(f"{persona}\n", encoding="utf-8")
    env = {**CONSUMER, "SYSTEM_PROMPT_FILE": "persona.md", "LAMBDA_TASK_ROOT": str(tmp_path)}
    # when the consumer's settings are read, then the prompt is the file's text, whole
    assert len(persona.encode()) >= 20_000
    assert ConsumerSettings.from_env(env).system_prompt == persona.strip()
    # and without a file, the environment's short prompt, else the default
    assert ConsumerSettings.from_env({**CONSUMER, "SYSTEM_PROMPT": "Be brief."}).system_prompt == (
        "Be brief."
    )
    assert ConsumerSettings.from_env(CONSUMER).system_prompt.startswith("You are a warm")


def test_a_missing_empty_or_runaway_persona_stops_the_cold_start_naming_it(tmp_path):
    env = {**CONSUMER, "LAMBDA_TASK_ROOT": str(tmp_path)}
    # a file that was not shipped
    with pytest.raises(ConfigurationError, match=r"SYSTEM_PROMPT_FILE coach\.md: no such file"):
        ConsumerSettings.from_env({**env, "SYSTEM_PROMPT_FILE": "coach.md"})
    # an empty one (the persona would silently be nothing)
    (tmp_path / "empty.md").write_text(" \n")
    with pytest.raises(
        ConfigurationError, match=r"SYSTEM_PROMPT_FILE empty\.md: the file is empty"
    ):
        ConsumerSettings.from_env({**env, "SYSTEM_PROMPT_FILE": "empty.md"})
    # the wrong file: not text, or far longer than any persona
    (tmp_path / "binary.md").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigurationError, match=r"binary\.md: not a readable UTF-8 file"):
        ConsumerSettings.from_env({**env, "SYSTEM_PROMPT_FILE": "binary.md"})
    (tmp_path / "huge.md").write_text("x" * 100_001)
    with pytest.raises(ConfigurationError, match=r"huge\.md: 100001 characters, at most 100000"):
        ConsumerSettings.from_env({**env, "SYSTEM_PROMPT_FILE": "huge.md"})
    # and two prompts at once: which one would win is a question, not a setting
    (tmp_path / "persona.md").write_text("You are Coach Ana.")
    both = {**env, "SYSTEM_PROMPT_FILE": "persona.md", "SYSTEM_PROMPT": "Be brief."}
    with pytest.raises(ConfigurationError, match="SYSTEM_PROMPT_FILE and SYSTEM_PROMPT"):
        ConsumerSettings.from_env(both)


def test_openai_speech_is_the_model_endpoints_and_refused_where_the_model_is_bedrock():
    # given VOICE_SPEECH=openai: with the model on OpenAI it is read, with its model and voice
    voiced = {**CONSUMER, "VOICE_REPLIES": "mirror", "VOICE_SPEECH": "openai"}
    settings = ConsumerSettings.from_env(voiced)
    assert (settings.voice_speech, settings.voice_openai_model) == ("openai", "gpt-4o-mini-tts")
    assert ConsumerSettings.from_env(CONSUMER).voice_speech == "polly"
    # a voice OpenAI's endpoint does not have is refused at cold start
    with pytest.raises(ConfigurationError, match="VOICE_OPENAI_VOICE"):
        ConsumerSettings.from_env({**voiced, "VOICE_OPENAI_VOICE": "robot"})
    # with the model on Bedrock there is no OpenAI endpoint to speak: refused, naming it
    bedrock = {**voiced, "MODEL_PROVIDER": "bedrock", "OPENAI_MODEL": "us.openai.gpt-6-luna"}
    with pytest.raises(ConfigurationError, match="VOICE_SPEECH=openai"):
        ConsumerSettings.from_env({**bedrock, "AWS_REGION": "eu-west-1"})
