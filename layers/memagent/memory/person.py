"""Who a memory belongs to: (agent, identifier), never the business number.

Every key derived from a phone number or a Meta BSUID (the person's partition, the FIFO group,
a preference's event id) is an HMAC-SHA256 under the stack's own secret key: without that key
nobody can compute a phone's key, so hashing every phone number of a country and matching, which
undoes a bare hash in minutes, finds nothing in the table, the queue or the logs. It is still
pseudonymisation (whoever holds the key can), so the table is personal data (docs/privacy.md).

The key is a Secrets Manager secret the template generates (PERSON_KEY_SECRET_ARN); local runs
and the tests give the documented LOCAL_PERSON_KEY as PERSON_KEY. It is read once, on first use
(a secret store outage fails that request, not the cold start), and kept: every key in the table
is derived from it, so it is never rotated.
"""

from __future__ import annotations

import hashlib
import hmac
import os

# The tests', the local stack's and `sam local`'s key: published, so never one a stack keeps
# (refused outside a local run, like the webhook's test-only secret: memagent.settings)
from memagent.settings import LOCAL_PERSON_KEY as LOCAL_PERSON_KEY

_key: bytes | None = None


def _stack_key() -> bytes:
    global _key
    if _key is None:
        from memagent.settings import person_key_secret

        _key = person_key_secret(os.environ).get().encode()
    return _key


def digest(value: str) -> str:
    """The keyed digest (hex) of an identifier, or of anything that contains one."""
    return hmac.new(_stack_key(), value.encode(), hashlib.sha256).hexdigest()


def person_key(agent: str, identifier: str) -> str:
    """The partition key of an identifier's memory (a phone in E.164 or a Meta BSUID): stable,
    opaque, the same for any business number, computable only with the stack's key."""
    return f"P#{digest(agent + chr(0x1F) + identifier)[:40]}"


def legacy_key(agent: str, identifier: str) -> str:
    """The key a stack before keyed person keys gave an identifier (a bare SHA-256): read only
    to carry that memory over to its keyed key (memagent.lifecycle.upgrade), never written."""
    return f"P#{hashlib.sha256((agent + chr(0x1F) + identifier).encode()).hexdigest()[:40]}"


def agent_key(agent: str) -> str:
    """The partition key of agent-wide records (the current whasp number)."""
    return f"A#{agent}"
