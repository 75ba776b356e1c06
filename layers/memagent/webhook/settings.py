"""The webhook's settings (WebhookSettings): the queue, the body and clock bounds, and the
configured provider's signing secrets (whasp's webhook secret; Meta's app secret and verify
token). Nothing of the model or the store: the webhook's cold path stays small."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from memagent.environment import Environment, Secret, agent_id, is_local_stack
from memagent.memory import read_person_key
from memagent.providers import PROVIDERS, check_signing_secrets


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
            agent_id=agent_id(read),
            provider=provider,
            queue_url=read.text("QUEUE_URL"),
            max_body_bytes=read.integer("WEBHOOK_MAX_BODY_BYTES", 256 * 1024, minimum=1),
            tolerance_seconds=read.integer("WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1),
            webhook_secret=None if meta else read.secret("WEBHOOK_SECRET", check),
            meta_app_secret=read.secret("META_APP_SECRET") if meta else None,
            meta_verify_token=read.secret("META_VERIFY_TOKEN") if meta else None,
        )
        read_person_key(read)  # checked here, read by memagent.memory.person on first use
        read.check()
        return settings
