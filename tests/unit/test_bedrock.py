"""The Bedrock bearer token and the request subset, as pure code."""

from __future__ import annotations

from datetime import datetime

import pytest
from botocore.credentials import Credentials

from devstack.fake_openai import bedrock_problems, bedrock_token_problem
from memagent.model import bedrock
from memagent.model.client import bedrock_subset

KEYS = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "session-token")
SIGNED_AT = datetime(2026, 12, 1, 11, 0, 0)


def test_the_token_is_the_one_aws_token_generator_makes(monkeypatch):
    generator = pytest.importorskip("aws_bedrock_token_generator")
    # given one clock for both (botocore's, which SigV4 reads)
    monkeypatch.setattr(bedrock.auth, "get_current_datetime", lambda *a, **k: SIGNED_AT)

    class Provider:
        def load(self):
            return KEYS

    from datetime import timedelta

    theirs = generator.provide_token(
        region="eu-west-1", aws_credentials_provider=Provider(), expiry=timedelta(hours=1)
    )
    # then ours is byte for byte AWS's: the presigned CallWithBearerToken, Version=1
    assert bedrock.bearer_token(KEYS, "eu-west-1", expires=3600) == theirs


def test_the_stand_in_reads_the_token_as_bedrock_would(monkeypatch):
    token = bedrock.bearer_token(KEYS, "eu-west-1", expires=60)
    assert bedrock_token_problem(token, "AKIDEXAMPLE") is None
    assert bedrock_token_problem(token, "AKIDOTHER") == "signed by another access key"
    assert bedrock_token_problem("sk-an-openai-key", None) == "not a Bedrock API key"
    # an hour-old token signed for a minute has expired
    monkeypatch.setattr(bedrock.auth, "get_current_datetime", lambda *a, **k: SIGNED_AT)
    stale = bedrock.bearer_token(KEYS, "eu-west-1", expires=60)
    assert bedrock_token_problem(stale, None) == "the bearer token has expired"


def test_the_subset_drops_what_bedrock_runtime_does_not_take():
    # given a request with everything the builder might one day add
    request = {
        "model": "us.openai.gpt-6-luna",
        "store": False,
        "input": "hi",
        "background": True,
        "previous_response_id": "resp_1",
        "tools": [{"type": "web_search"}, {"type": "function", "name": "book", "parameters": {}}],
        "prompt_cache_key": "p1",
    }
    kept = bedrock_subset(request)
    # then background, a continuation, hosted tools and every field AWS does not document
    # bedrock-runtime as taking (the cache key) are gone; the rest is unchanged
    assert kept == {
        "model": "us.openai.gpt-6-luna",
        "store": False,
        "input": "hi",
        "tools": [{"type": "function", "name": "book", "parameters": {}}],
    }
    assert bedrock_problems(kept, {}) == []
    assert bedrock_problems(request, {}) == [
        "Unsupported parameter: 'background'.",
        "Unsupported parameter: 'previous_response_id'.",
        "Unsupported parameter: 'prompt_cache_key'.",
        "background=true: requests are always synchronous",
        "server-side tools are not available",
    ]
    # and with only hosted tools, no tools (nor tool_choice) are sent at all
    only_hosted = bedrock_subset({**request, "tools": [{"type": "mcp"}], "tool_choice": "auto"})
    assert "tools" not in only_hosted and "tool_choice" not in only_hosted


def test_bedrock_settings_need_no_key_and_default_the_regions_endpoint():
    from memagent.compaction import CompactorSettings
    from memagent.errors import ConfigurationError

    env = {
        "AGENT_ID": "coach",
        "TABLE_NAME": "t",
        "MODEL_PROVIDER": "bedrock",
        "OPENAI_MODEL": "us.openai.gpt-6-luna",
        "AWS_REGION": "eu-west-1",
    }
    settings = CompactorSettings.from_env(env)
    assert settings.openai_api_key is None
    assert settings.openai_base_url == "https://bedrock-runtime.eu-west-1.amazonaws.com/openai/v1"
    assert settings.bedrock_region == "eu-west-1"
    # an application inference profile is refused at cold start, naming the setting
    profile = "arn:aws:bedrock:eu-west-1:123456789012:application-inference-profile/abc"
    with pytest.raises(ConfigurationError, match="OPENAI_MODEL: bedrock-runtime"):
        CompactorSettings.from_env({**env, "OPENAI_MODEL": profile})
