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
from collections.abc import Mapping
from functools import partial

from memagent.environment import (
    SSM_CONFIG,
    Environment,
    Secret,
    is_local_stack,
    refuse_published,
)
from memagent.errors import ConfigurationError

# The person key of the tests, the local stack and `sam local`: published (docs/local-stack.md),
# so never one a deployed stack may keep (refuse_published)
LOCAL_PERSON_KEY = "memagent-local-person-key-published-never-use-in-aws"

# The person key's read, on the webhook's cold path after the signing secret's: one attempt
# (1.5 s at worst), so both reads and the SQS call (4 s each) still fit whasp's 10 s deadline.
PERSON_KEY_CONFIG = {**SSM_CONFIG, "retries": {"total_max_attempts": 1, "mode": "standard"}}
PERSON_KEY_MIN_CHARS = 32


def _check_person_key(value: str, *, setting: str, local: bool) -> None:
    if len(value) < PERSON_KEY_MIN_CHARS:
        raise ConfigurationError(f"{setting}: at least {PERSON_KEY_MIN_CHARS} characters")
    # the tests' and the local stack's key is published: under it anybody can compute a
    # phone's key, so a deployed stack refuses it as it refuses the test-only signing secret
    refuse_published(value, LOCAL_PERSON_KEY, setting=setting, what="local key", local=local)


def person_key_secret(env: Mapping[str, str]) -> Secret:
    """PERSON_KEY_SECRET_ARN (the template's generated secret), else PERSON_KEY (local runs
    only when it is the published LOCAL_PERSON_KEY)."""
    return Secret.from_env(
        "PERSON_KEY",
        env,
        check=partial(_check_person_key, local=is_local_stack(env)),
        secrets_manager=True,
        config=PERSON_KEY_CONFIG,
    )


def read_person_key(read: Environment) -> Secret:
    """The stack's key for person keys, checked at cold start by every function's settings (a
    problem is noted on `read`) and read here on first use."""
    try:
        return person_key_secret(read.environment)
    except ConfigurationError as error:
        read.problems.append(str(error))
        return Secret("PERSON_KEY", value=None, parameter=None)


_key: bytes | None = None


def _stack_key() -> bytes:
    global _key
    if _key is None:
        _key = person_key_secret(os.environ).get().encode()
    return _key


def digest(value: str) -> str:
    """The keyed digest (hex) of an identifier, or of anything that contains one."""
    return hmac.new(_stack_key(), value.encode(), hashlib.sha256).hexdigest()


# Internal events (a follow-up's firing, which Scheduler puts on the event queue) are signed
# under a key derived from the stack's key for that use alone: anyone who may send to the queue
# (the consumer's and the admin's roles, through Scheduler) cannot forge one without the secret
_INTERNAL_EVENTS = b"memagent/internal-events/v1"


def internal_signature(*parts: str) -> str:
    """The stack's signature (hex) of an internal event's fields, in order."""
    key = hmac.new(_stack_key(), _INTERNAL_EVENTS, hashlib.sha256).digest()
    return hmac.new(key, chr(0x1F).join(parts).encode(), hashlib.sha256).hexdigest()


def signed_by_stack(signature: object, *parts: str) -> bool:
    """Is `signature` the stack's signature of these fields (compared in constant time)?"""
    if not isinstance(signature, str):
        return False
    return hmac.compare_digest(signature.encode(), internal_signature(*parts).encode())


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
