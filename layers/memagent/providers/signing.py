"""Standard Webhooks signing secrets (`whsec_<base64 key>`, space-separated during rotation):
the format check the settings run at cold start, and the published test-only secret a deployed
stack refuses (refuse_published: the rule for every value published for local runs). Signing
and verifying with them is memagent/providers/whasp.py's."""

from __future__ import annotations

import base64
import binascii

from memagent.environment import refuse_published
from memagent.errors import ConfigurationError

SECRET_PREFIX = "whsec_"  # noqa: S105 (a prefix, not a secret)
# The secret the tests, sample events and local stack sign with. It is public
# (docs/local-stack.md), so a stack using it accepts anybody's events: refused unless the process
# says it is a local run.
TEST_ONLY_SECRET = "whsec_bWVtYWdlbnQtdGVzdC1vbmx5LXNlY3JldC1kby1ub3QtdXNl"  # noqa: S105
# Standard Webhooks secrets carry 24 to 64 bytes of key; fewer can be guessed offline from one
# signed request.
MIN_SECRET_BYTES = 24


def check_signing_secrets(value: str, *, setting: str, allow_test_secret: bool) -> list[str]:
    """Validate a configured signing secret (space-separated during rotation) and return the
    secrets; raise ConfigurationError naming `setting` (never the value). Pure, so any settings
    reader can call it, at cold start for a plain value and on first read for a stored one."""
    secrets = value.split()
    if not secrets:
        raise ConfigurationError(f"{setting} is empty")
    for position, secret in enumerate(secrets, start=1):
        where = f"{setting} (secret {position} of {len(secrets)})"
        try:
            key = base64.b64decode(secret.removeprefix(SECRET_PREFIX), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(f"{where} is not whsec_ followed by base64") from None
        if len(key) < MIN_SECRET_BYTES:
            raise ConfigurationError(
                f"{where} holds {len(key)} bytes of key; at least {MIN_SECRET_BYTES} are needed"
            )
        refuse_published(  # the keys, not their spelling: padded with NULs, the same key
            key,
            base64.b64decode(TEST_ONLY_SECRET.removeprefix(SECRET_PREFIX)),
            setting=where,
            what="test-only secret",
            local=allow_test_secret,
        )
    return secrets
