"""memagent.memory.recent: the keys that list a person among the recent conversations."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

from memagent.memory.recent import SHARDS, hour_of, recent_keys, shard_of, shards

SHARDS_SEEN = ["coach#08", "coach#02", "coach#14"]


def test_a_person_always_lands_in_the_same_one_of_the_agents_shards():
    assert shard_of("coach", "P#abc") == shard_of("coach", "P#abc")
    assert shard_of("coach", "P#abc") in shards("coach")
    assert shard_of("coach", "P#abc").startswith("coach#")
    assert shards("coach") == [f"coach#{n:02d}" for n in range(16)] and SHARDS == 16


def test_the_shard_is_the_keys_digest_read_as_hex_modulo_sixteen():
    # pinned: a stack's people must keep their shards across versions (the index holds them)
    assert [shard_of("coach", pk) for pk in ("P#abc", "P#1", "P#2")] == SHARDS_SEEN


def test_people_spread_over_every_shard():
    counts = Counter(shard_of("coach", f"P#{n}") for n in range(1600))
    assert set(counts) == set(shards("coach"))
    assert max(counts.values()) < 2 * 100  # no shard takes twice its share


def test_the_hour_is_utcs_whatever_the_machines_zone(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        assert hour_of(datetime(2026, 12, 4, 9, 30, tzinfo=UTC)) == "2026-12-04T09"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_the_hour_is_utcs_and_sorts_as_text():
    london_summer = timezone(timedelta(hours=1))
    assert hour_of(datetime(2026, 7, 1, 9, 59, tzinfo=london_summer)) == "2026-07-01T08"
    assert hour_of(datetime(2026, 12, 31, 23, 0, tzinfo=UTC)) < hour_of(
        datetime(2027, 1, 1, 0, 0, tzinfo=UTC)
    )


def test_the_keys_name_the_shard_the_hour_and_the_address():
    at = datetime(2026, 12, 4, 9, 30, tzinfo=UTC)
    assert recent_keys("coach", "P#abc", at, "+447700900123") == {
        "recent_shard": shard_of("coach", "P#abc"),
        "recent_at": "2026-12-04T09",
        "recent_address": "+447700900123",
    }
