"""Lambda SnapStart (optional, template parameter `SnapStart`): what every environment restored
from one snapshot must not share.

With SnapStart, Lambda runs a function's init once per published version, snapshots the memory,
and starts new environments from that snapshot. Whatever init left in memory is then shared by
every copy:

- the `random` module's state: every copy would draw the same retry jitter, and retries meant to
  spread out would arrive together. Reseeded from os.urandom after each restore.
- clients and cached secrets: init makes no call (secrets are read lazily, no connection is
  opened), so nothing is stale at snapshot time; still, each `renew` callable passed in drops
  its client or cache, so a later change that warms a client at init cannot ship a connection
  or a secret into every copy.

`snapshot_restore_py` is part of Lambda's managed Python runtimes (3.12+); elsewhere (local runs,
tests without it) there are no snapshots and nothing is registered.
"""

from __future__ import annotations

import random
from collections.abc import Callable


def after_restore(*renew: Callable[[], None]) -> bool:
    """Register the restore hook; returns whether a SnapStart runtime is there to call it."""
    try:
        from snapshot_restore_py import register_after_restore
    except ImportError:
        return False
    register_after_restore(restored, *renew)
    return True


def restored(*renew: Callable[[], None]) -> None:
    random.seed()  # from os.urandom: each restored copy draws its own jitter
    for callable_ in renew:
        callable_()
