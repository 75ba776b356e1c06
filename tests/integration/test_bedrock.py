"""ModelProvider=bedrock through the consumer and compactor handlers: the local OpenAI stand-in
serves bedrock-runtime's path (/openai/v1/responses), takes only a Bedrock bearer token signed
by the test IAM credentials, and answers 400 to anything outside bedrock-runtime's subset."""

from __future__ import annotations

import base64
import os
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore import auth

from devstack.fake_openai import BEDROCK_RESPONSES, RESPONSES, bedrock_problems
from devstack.lambda_harness import reported_failures as failures
from devstack.lambda_harness import retried
from tests.conftest import load_function, seed_turns, sqs_batch
from tests.integration.test_consumer import at, media_message, message, turns

MODEL = "us.openai.gpt-6-luna"


@pytest.fixture
def bedrock_env(consumer_env, openai) -> dict[str, str]:
    openai.bedrock_key_id = os.environ["AWS_ACCESS_KEY_ID"]  # the test IAM credentials
    env = {k: v for k, v in consumer_env.items() if not k.startswith("OPENAI_API_KEY")}
    return {
        **env,
        "MODEL_PROVIDER": "bedrock",
        "OPENAI_MODEL": MODEL,
        "OPENAI_BASE_URL": f"{openai.url}/openai/v1",  # bedrock-runtime's path shape
        "OPENAI_MAX_RETRIES": "0",
    }


@pytest.fixture
def consumer(bedrock_env, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return load_function("consumer", bedrock_env, monkeypatch)


def presign(request: dict) -> dict[str, str]:
    """The presigned URL's query inside a request's bearer token."""
    token = request["headers"]["authorization"].removeprefix("Bearer bedrock-api-key-")
    url = base64.b64decode(token).decode()
    return {k: v[0] for k, v in parse_qs(urlsplit(f"https://{url}").query).items()}


def bedrock_calls(openai) -> list[dict]:
    return [r for r in openai.requests if r["path"] == BEDROCK_RESPONSES]


def test_a_turn_carries_the_roles_bearer_token_not_an_api_key(
    consumer, resources, openai, whasp, lambda_context
):
    # given the consumer on bedrock, with no OpenAI key anywhere in its environment
    assert consumer.settings.openai_api_key is None
    # when Maya writes
    assert failures(consumer.handler(sqs_batch(message("Hi, I'm Maya")), lambda_context)) == []
    # then the model was asked once, on bedrock-runtime's path, and the reply went out
    [call] = bedrock_calls(openai)
    assert call["status"] == 200 and [r["path"] for r in openai.requests] == [BEDROCK_RESPONSES]
    assert whasp.sent and call["json"]["model"] == MODEL and call["json"]["store"] is False
    # with a Bedrock API key signed by the role's (test) credentials for this region
    query = presign(call)
    key_id, _, region, service, _ = query["X-Amz-Credential"].split("/")
    assert (key_id, region, service) == (os.environ["AWS_ACCESS_KEY_ID"], "us-east-1", "bedrock")
    assert query["Action"] == "CallWithBearerToken" and query["X-Amz-Expires"] == "3600"
    assert "sk-" not in call["headers"]["authorization"]


def test_a_token_about_to_expire_is_renewed(consumer, openai, lambda_context, monkeypatch):
    now = auth.get_current_datetime()

    def minutes_later(minutes: float) -> None:
        later = now + timedelta(minutes=minutes)
        monkeypatch.setattr(auth, "get_current_datetime", lambda *a, **k: later)

    for minute, text in ((0, "one"), (30, "two"), (50, "three")):
        minutes_later(minute)
        batch = sqs_batch(message(text, minute))
        assert failures(consumer.handler(batch, lambda_context)) == []
    tokens = [call["headers"]["authorization"] for call in bedrock_calls(openai)]
    # then the token of 0 min is reused at 30 (30 min left), signed again at 50 (10 min left)
    assert tokens[0] == tokens[1] != tokens[2]
    dates = [presign(call)["X-Amz-Date"] for call in bedrock_calls(openai)]
    assert dates[2] == (now + timedelta(minutes=50)).strftime("%Y%m%dT%H%M%SZ")


def test_every_request_stays_in_bedrocks_subset(
    consumer, bedrock_env, resources, openai, whasp, lambda_context, monkeypatch, tap
):
    # given a reply, a photo described, and a fold by the compactor, all on bedrock
    url = whasp.add_media(b"\x89PNG....", "image/png")
    photo = media_message("image", url, "image/png", 1, size=8, message_id="m1")
    batch = sqs_batch(message("hello", 0), photo)
    assert failures(consumer.handler(batch, lambda_context)) == []
    compactor_env = {k: bedrock_env[k] for k in bedrock_env if not k.startswith("WHASP")}
    compactor = load_function(
        "compactor", {**compactor_env, "COMPACT_THRESHOLD": "4", "COMPACT_KEEP": "2"}, monkeypatch
    )
    seed_turns(compactor.compactor.store, "+447700900456", ["a", "b", "c", "d"], threshold=4)
    assert failures(compactor.handler({"Records": tap.matching()}, lambda_context)) == []
    # then every request went to bedrock-runtime's path and was in its documented subset
    calls = bedrock_calls(openai)
    assert len(calls) == 3 and not [r for r in openai.requests if r["path"] == RESPONSES]
    assert [c["status"] for c in calls] == [200, 200, 200]
    assert [bedrock_problems(c["json"], c["headers"]) for c in calls] == [[], [], []]
    formats = [(c["json"].get("text") or {}).get("format", {}).get("type") for c in calls]
    assert "json_schema" in formats  # the fold's structured output


def test_access_denied_is_alarmed_naming_the_model_and_retried(
    consumer, resources, openai, whasp, lambda_context, capsys, caplog
):
    # given Bedrock refuses access (the model is not enabled in the account), twice
    openai.fail_next(2, 403)
    batch = sqs_batch(message("hello", 0))
    # when the message comes: the token is signed afresh and tried once more, then it fails
    assert retried(consumer.handler, batch, lambda_context) != []
    out = capsys.readouterr().out
    assert '"ModelAuthFailed"' in out
    [log] = [r for r in caplog.records if r.getMessage().endswith("refused our credentials")]
    assert MODEL in log.action and "bedrock:InvokeModel" in log.action and log.status == 403
    assert len(bedrock_calls(openai)) == 2 and not whasp.sent
    # and once access is granted, the redelivery is answered
    assert failures(consumer.handler(batch, lambda_context)) == []
    assert len(whasp.sent) == 1


def test_throttling_is_retried_on_our_backoff(consumer, resources, openai, whasp, lambda_context):
    openai.fail_next(1, 429)  # Bedrock's ThrottlingException
    batch = sqs_batch(message("hello", 0))
    assert retried(consumer.handler, batch, lambda_context) != []  # retried, never parked
    assert failures(consumer.handler(batch, lambda_context)) == []
    assert len(whasp.sent) == 1


def test_a_voice_note_is_not_sent_out_of_the_account_unless_configured(
    consumer, bedrock_env, resources, openai, whasp, lambda_context, monkeypatch
):
    url = whasp.add_media(b"O" * 100, "audio/ogg")
    voice = media_message("audio", url, "audio/ogg", 0, size=100, message_id="v1")
    assert failures(consumer.handler(sqs_batch(voice), lambda_context)) == []
    assert turns(resources.table_name)[0][1].startswith("[sent a voice note; voice notes are not")
    assert openai.calls("/v1/audio/transcriptions") == []
    # given TRANSCRIPTION_BASE_URL names an OpenAI-compatible endpoint, with its own key
    env = {**bedrock_env, "TRANSCRIPTION_BASE_URL": f"{openai.url}/v1"}
    consumer = load_function("consumer", {**env, "TRANSCRIPTION_API_KEY": "sk-tx"}, monkeypatch)
    voice = media_message("audio", url, "audio/ogg", 1, size=100, message_id="v2")
    assert failures(consumer.handler(sqs_batch(voice), lambda_context)) == []
    [upload] = [r for r in openai.requests if r["path"] == "/v1/audio/transcriptions"]
    assert upload["headers"]["authorization"] == "Bearer sk-tx"
    assert turns(resources.table_name)[2] == (
        "user",
        "[voice note] [offline transcription of 100 bytes]",
    )
    assert at(1)  # the same conversation


@pytest.mark.parametrize(
    "url",
    [
        "http://bedrock-runtime.us-east-1.amazonaws.com/openai/v1",  # the token in clear
        "https://bedrock-runtime.us-east-1.amazonaws.com.example.net/openai/v1",  # not AWS's
        "https://api.openai.com/v1",  # a Bedrock token sent to another service
    ],
    ids=["not-https", "look-alike-host", "another-service"],
)
def test_a_bearer_token_goes_only_to_bedrock_runtime_over_https(bedrock_env, monkeypatch, url):
    from memagent.errors import ConfigurationError

    # given a deployed function (no local-run flag) whose OPENAI_BASE_URL is not bedrock-runtime
    for flag in ("MEMAGENT_LOCAL_STACK", "AWS_SAM_LOCAL"):
        monkeypatch.delenv(flag, raising=False)
    env = {k: v for k, v in bedrock_env.items() if k != "MEMAGENT_LOCAL_STACK"}
    # when it starts, then it refuses, naming the setting (before any token is signed)
    with pytest.raises(ConfigurationError, match="OPENAI_BASE_URL: with MODEL_PROVIDER=bedrock"):
        load_function("consumer", {**env, "OPENAI_BASE_URL": url}, monkeypatch)


def test_bedrock_runtimes_own_url_needs_no_local_flag(bedrock_env, monkeypatch):
    from memagent.errors import ConfigurationError
    from memagent.turn import ConsumerSettings

    env = {k: v for k, v in bedrock_env.items() if k != "MEMAGENT_LOCAL_STACK"}
    for url in (None, "https://bedrock-runtime.us-east-1.amazonaws.com/openai/v1"):
        given = (
            {**env, "OPENAI_BASE_URL": url}
            if url
            else {k: v for k, v in env.items() if k != "OPENAI_BASE_URL"}
        )
        try:
            ConsumerSettings.from_env(given)
        except ConfigurationError as error:  # other settings may want the local flag
            assert "OPENAI_BASE_URL" not in str(error)
