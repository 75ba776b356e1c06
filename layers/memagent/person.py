"""Who a memory belongs to: (agent, phone), never the whasp number.

The key is a hash, so the phone number appears in no table key, queue group id, stream record or
log line. This is pseudonymisation, not anonymisation: phone numbers are few enough to be
enumerated, so the table still holds personal data and is treated as such (docs/privacy.md).
"""

from __future__ import annotations

import hashlib


def person_key(agent: str, phone: str) -> str:
    """The partition key of a person's memory: stable, opaque, the same for any whasp number."""
    digest = hashlib.sha256(f"{agent}\x1f{phone}".encode()).hexdigest()
    return f"P#{digest[:40]}"


def agent_key(agent: str) -> str:
    """The partition key of agent-wide records (the current whasp number)."""
    return f"A#{agent}"
