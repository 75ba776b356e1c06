"""AWS's clock on this machine, for the SQS of the local moto server: visibility timeouts, delays,
retention and receive timestamps run on it (devstack.moto_fixes makes moto read it); so does the
local stack's DynamoDB TTL (devstack.ttl: when an expired item is deleted, and its record's time).

A retry schedule set in AWS time (a failed record back after 10 s, 20 s ... 15 min; a crashed
invocation's after the queue's 30-minute visibility timeout) plays out here unchanged, only
faster:

    SQS_CLOCK.scale = 60          # one real second is one AWS minute
    SQS_CLOCK.advance(12 * 3600)  # or jump: twelve hours pass at once

`QueueDelivery(idle_jump=True)` jumps to the next moment a message becomes visible whenever nothing
is visible and nothing is running, so a 12-hour outage runs in seconds without a single sleep,
and every record still comes back exactly when its visibility says. The functions themselves keep
the real clock (their timeouts are real); only the queue's waits are scaled.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class ScaledClock:
    def __init__(self, scale: float = 1.0) -> None:
        self._lock = threading.Lock()
        self._real_origin = time.time()
        self._origin = self._real_origin
        self._scale = scale

    def now(self) -> float:
        """Seconds since the epoch, AWS time."""
        with self._lock:
            return self._origin + (time.time() - self._real_origin) * self._scale

    @property
    def scale(self) -> float:
        return self._scale

    @scale.setter
    def scale(self, value: float) -> None:
        if value <= 0:
            raise ValueError("the time scale must be positive")
        with self._lock:
            real = time.time()
            self._origin += (real - self._real_origin) * self._scale
            self._real_origin = real
            self._scale = value

    def advance(self, seconds: float) -> None:
        """Let `seconds` of AWS time pass at once (never backwards)."""
        if seconds > 0:
            with self._lock:
                self._origin += seconds

    @contextlib.contextmanager
    def scaled(self, scale: float) -> Iterator[ScaledClock]:
        previous = self.scale
        self.scale = scale
        try:
            yield self
        finally:
            self.scale = previous

    @contextlib.contextmanager
    def kept(self) -> Iterator[ScaledClock]:
        """Jumps made inside (a test letting a day pass) are undone after it: the clock reads
        what it would have read without them, so the next test in this process starts on AWS
        time as it was (the local stack's TTL, for one, counts its lag on this clock)."""
        with self._lock:
            saved = (self._origin, self._real_origin, self._scale)
        try:
            yield self
        finally:
            with self._lock:
                self._origin, self._real_origin, self._scale = saved


SQS_CLOCK = ScaledClock()


def next_visible_at(queue_url: str) -> float | None:
    """When the next message of `queue_url` becomes visible (AWS time), from the in-process moto
    server's state; None when no message waits invisible."""
    from moto.sqs.models import sqs_backends

    name = queue_url.rstrip("/").rsplit("/", 1)[-1]
    now_ms = SQS_CLOCK.now() * 1000
    soonest = None
    for regions in sqs_backends.values():
        for backend in regions.values():
            queue = backend.queues.get(name)
            if queue is None:
                continue
            for message in list(queue._messages):
                ready_ms = max(message.visible_at, getattr(message, "delayed_until", 0) or 0)
                if ready_ms > now_ms and (soonest is None or ready_ms < soonest):
                    soonest = ready_ms
    return None if soonest is None else soonest / 1000
