"""With SnapStart on, every environment of a version resumes from one snapshot of its init.
These tests do what the Lambda runtime does: load the function (init), keep the state a snapshot
would hold, then run the hooks the function registered with snapshot_restore_py (the library
Lambda's Python runtimes ship) once per restored environment."""

from __future__ import annotations

import copy
import os
import random
from typing import Any

import pytest

snapshot_restore_py = pytest.importorskip("snapshot_restore_py")

from tests.conftest import load_function  # noqa: E402


def initialised(name: str, env: dict[str, str], monkeypatch) -> tuple[Any, list]:
    """Load a function as its init would, and return it with the restore hooks it registered."""
    registry = snapshot_restore_py.get_after_restore()
    before = len(registry)
    module = load_function(name, env, monkeypatch)
    return module, registry[before:]


def restore(hooks: list) -> None:
    for hook, args, kwargs in hooks:
        hook(*args, **kwargs)


def draws(rng: Any, n: int = 5) -> list[float]:
    return [rng.random() for _ in range(n)]


def test_restored_consumers_draw_their_own_retry_jitter(consumer_env, monkeypatch):
    # given a consumer initialised once, and the state its snapshot holds
    consumer, hooks = initialised("consumer", consumer_env, monkeypatch)
    assert hooks, "the consumer registers an after-restore hook"
    jitter = consumer.processor.retries._rng
    snapshot = jitter.getstate(), random.getstate()

    def environment(run_hooks: bool) -> list[float]:
        jitter.setstate(snapshot[0])
        random.setstate(snapshot[1])
        if run_hooks:
            restore(hooks)
        return draws(jitter) + draws(random)

    # without the hooks, two restored copies would draw the very same backoff jitter
    assert environment(run_hooks=False) == environment(run_hooks=False)
    # when two environments are restored as Lambda does, then each draws its own
    assert environment(run_hooks=True) != environment(run_hooks=True)


def test_a_restored_consumer_renews_its_model_client_then_answers(
    consumer_env, monkeypatch, lambda_context, openai, whasp
):
    from tests.conftest import sqs_batch, whasp_message

    consumer, hooks = initialised("consumer", consumer_env, monkeypatch)
    model = consumer.consumer.agent.model
    # given an environment whose snapshot would carry a client (a later change warming it)
    model.client  # noqa: B018 (creates the OpenAI client)
    carried = copy.copy(model._model._client)
    # when it is restored
    restore(hooks)
    # then the client is gone, to be made afresh, and the turn still runs end to end
    assert model._model._client is None and carried is not None
    response = consumer.handler(sqs_batch(whasp_message("hello again")), lambda_context)
    assert response["batchItemFailures"] == []
    assert len(whasp.sent) == 1


def test_the_compactor_registers_its_restore_hook_too(compactor_env, monkeypatch):
    compactor, hooks = initialised("compactor", compactor_env, monkeypatch)
    assert hooks
    compactor.model.client  # noqa: B018
    restore(hooks)
    assert compactor.model._model._client is None


def test_a_restored_consumer_on_bedrock_signs_its_own_token(
    consumer_env, monkeypatch, lambda_context, openai, whasp
):
    from devstack.fake_openai import BEDROCK_RESPONSES
    from tests.conftest import sqs_batch, whasp_message
    from tests.integration.test_bedrock import presign

    env = {k: v for k, v in consumer_env.items() if not k.startswith("OPENAI_API_KEY")}
    env.update(MODEL_PROVIDER="bedrock", OPENAI_MODEL="us.openai.gpt-6-luna")
    env["OPENAI_BASE_URL"] = f"{openai.url}/openai/v1"
    openai.bedrock_key_id = None  # any signer: the restored copy has other credentials
    consumer, hooks = initialised("consumer", env, monkeypatch)
    # given the snapshot's environment signed a token with its credentials
    batch = sqs_batch(whasp_message("hello", created_at="2026-11-29T09:30:00Z"))
    assert consumer.handler(batch, lambda_context)["batchItemFailures"] == []
    snapshots = os.environ["AWS_ACCESS_KEY_ID"]
    # when a copy is restored with the credentials Lambda gives it
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "ASIARESTOREDCOPY")
    restore(hooks)
    again = sqs_batch(whasp_message("hello again", created_at="2026-11-29T09:31:00Z"))
    assert consumer.handler(again, lambda_context)["batchItemFailures"] == []
    # then its requests carry a token of its own, signed with those
    calls = [r for r in openai.requests if r["path"] == BEDROCK_RESPONSES]
    signers = [presign(call)["X-Amz-Credential"].split("/")[0] for call in calls]
    assert signers == [snapshots, "ASIARESTOREDCOPY"]


def test_without_the_runtime_library_nothing_is_registered(monkeypatch):
    import sys

    from memagent.aws.snapstart import after_restore

    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # as outside Lambda
    assert after_restore(lambda: None) is False
