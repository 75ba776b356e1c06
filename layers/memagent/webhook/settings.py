"""The webhook's settings (WebhookSettings): the queue, the body and clock bounds, and the
configured provider's signing secrets (whasp's webhook secret; Meta's app secret and verify
token). Nothing of the model or the store: the webhook's cold path stays small."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from memagent.environment import Environment, Secret, agent_id, is_local_stack, setting, table_of
from memagent.memory import read_person_key
from memagent.providers import PROVIDERS, check_signing_secrets


@dataclass(frozen=True, kw_only=True)
class WebhookSettings:
    agent_id: str = setting("AGENT_ID", parameter="AgentId", custom=True)
    provider: str = setting(
        "PROVIDER", "whasp", choices=PROVIDERS, parameter="Provider", custom=True
    )
    queue_url: str = setting("QUEUE_URL")
    max_body_bytes: int = setting("WEBHOOK_MAX_BODY_BYTES", 256 * 1024, minimum=1)
    tolerance_seconds: int = setting("WEBHOOK_TOLERANCE_SECONDS", 300, minimum=1)
    # whasp signs with the webhook secret; Meta with the app secret, and checks the callback
    # with a verify token. Only the configured provider's secrets are required.
    webhook_secret: Secret | None = field(default=None, repr=False)
    meta_app_secret: Secret | None = field(default=None, repr=False)
    meta_verify_token: Secret | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WebhookSettings:
        read = Environment(env)
        provider = read.value(table_of(cls)["provider"])
        meta = provider == "meta"
        check = None
        if not meta:
            check = partial(
                check_signing_secrets, allow_test_secret=is_local_stack(read.environment)
            )
        settings = cls(
            **read.values(cls),
            agent_id=agent_id(read),
            provider=provider,
            webhook_secret=None if meta else read.secret("WEBHOOK_SECRET", check),
            meta_app_secret=read.secret("META_APP_SECRET") if meta else None,
            meta_verify_token=read.secret("META_VERIFY_TOKEN") if meta else None,
        )
        read_person_key(read)  # checked here, read by memagent.memory.person on first use
        read.check()
        return settings
