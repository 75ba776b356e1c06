"""The person's clock: their zone from their phone's country, and dates as the model reads them."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfoNotFoundError

import pytest

from memagent.memory import clock

AT = datetime(2026, 3, 2, 23, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("address", "zone"),
    [
        ("+447700900123", "Europe/London"),  # the UK: one zone
        ("+33612345678", "Europe/Paris"),
        ("+819012345678", "Asia/Tokyo"),
        ("+14155550123", "America/Chicago"),  # the +1 plan spans zones: the agent's
        ("+34612345678", "America/Chicago"),  # Spain, with the Canaries: the agent's
        ("US.13491208655302741918", "America/Chicago"),  # a BSUID: no country
        (None, "America/Chicago"),
    ],
)
def test_a_persons_zone_is_their_countrys_only_when_it_has_one(address, zone):
    assert clock.person_zone(address, "America/Chicago") == zone


def test_a_moment_is_the_local_date_and_time_with_its_zone():
    assert clock.moment(AT, "Asia/Tokyo") == "Tue 3 Mar 2026, 08:30 (Asia/Tokyo)"
    assert clock.day(AT, "America/New_York") == "Mon 2 Mar 2026"


def test_a_zone_the_runtime_cannot_read_is_labelled_utc_not_as_asked(monkeypatch):
    # given a runtime without the time zone database
    def missing(name: str) -> None:
        raise ZoneInfoNotFoundError(name)

    monkeypatch.setattr(clock, "ZoneInfo", missing)
    clock.zone.cache_clear()
    try:
        # then the time is UTC's, and says so, instead of UTC's time under Tokyo's name
        assert clock.moment(AT, "Asia/Tokyo") == "Mon 2 Mar 2026, 23:30 (UTC)"
    finally:
        clock.zone.cache_clear()
