"""When a failed record comes back: the retry schedule, and the outage it lets us survive.

A record the consumer fails would otherwise come back only when the queue's VisibilityTimeout
runs out (the ceiling that protects a crashed invocation, 30 minutes). Instead the consumer sets
each failed record's visibility from how often it was received:

    receive 1 -> ~10 s, 2 -> ~20 s, 3 -> ~40 s ... doubling up to the cap (~15 min)

with jitter (each delay drawn from [delay x (1 - jitter), delay]), so people whose messages failed
together do not all come back at the same second. Pure code: the SQS call is memagent.queue's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SQS_MAX_VISIBILITY_SECONDS = 43_200  # 12 h, the most ChangeMessageVisibility accepts


@dataclass(frozen=True)
class RetrySchedule:
    base_seconds: float = 10.0
    cap_seconds: float = 900.0
    jitter: float = 0.2  # the share of each delay that is random

    def nominal(self, receive_count: int) -> float:
        """The delay before the next attempt of a record received `receive_count` times."""
        exponent = min(max(receive_count, 1) - 1, 32)  # 2**32 x base is far past any cap
        return min(self.cap_seconds, self.base_seconds * 2**exponent)

    def delay(self, receive_count: int, rng: random.Random | None = None) -> int:
        """The visibility to set, in whole seconds (what SQS takes): jittered, at least 1 s."""
        nominal = self.nominal(receive_count)
        low = nominal * (1 - self.jitter)
        drawn = (rng or random).uniform(low, nominal)
        return max(1, min(SQS_MAX_VISIBILITY_SECONDS, round(drawn)))

    def shortest(self, receive_count: int) -> int:
        """The least delay jitter can give (for the outage budget, which must hold in the worst
        case): the schedule's lower bound."""
        return max(1, round(self.nominal(receive_count) * (1 - self.jitter)))


def outage_survived_seconds(
    schedule: RetrySchedule, max_receive_count: int, *, seconds_per_attempt: float = 0.0
) -> float:
    """How long a dependency may be down before a record that fails on every attempt reaches
    the dead-letter queue: the sum of the shortest delays between its `max_receive_count`
    receives (SQS moves it on the receive after that), plus the time each attempt takes.
    Lower bound: attempts that take longer, or wait behind a person's earlier message, only
    stretch it."""
    waits = sum(schedule.shortest(count) for count in range(1, max_receive_count + 1))
    return waits + seconds_per_attempt * max_receive_count
