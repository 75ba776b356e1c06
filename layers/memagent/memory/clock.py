"""The person's clock: which time zone a person lives in, and dates written for the model.

A phone number's country gives the person's zone when that country has a single one; otherwise
the agent's TIME_ZONE setting holds (UTC by default). The table is short on purpose: countries
spanning several zones (the +1 plan, Brazil, Spain with the Canaries, Portugal with the Azores,
Russia, Australia, Mexico...) are left out, so a guess is never wrong by hours.
"""

from __future__ import annotations

from datetime import UTC, datetime, tzinfo
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# E.164 country code -> the country's only zone. Longest codes are tried first.
SINGLE_ZONE_COUNTRIES = {
    "20": "Africa/Cairo",
    "27": "Africa/Johannesburg",
    "30": "Europe/Athens",
    "31": "Europe/Amsterdam",
    "32": "Europe/Brussels",
    "33": "Europe/Paris",
    "36": "Europe/Budapest",
    "39": "Europe/Rome",
    "40": "Europe/Bucharest",
    "41": "Europe/Zurich",
    "43": "Europe/Vienna",
    "44": "Europe/London",
    "45": "Europe/Copenhagen",
    "46": "Europe/Stockholm",
    "47": "Europe/Oslo",
    "48": "Europe/Warsaw",
    "49": "Europe/Berlin",
    "51": "America/Lima",
    "54": "America/Argentina/Buenos_Aires",
    "57": "America/Bogota",
    "58": "America/Caracas",
    "60": "Asia/Kuala_Lumpur",
    "63": "Asia/Manila",
    "65": "Asia/Singapore",
    "66": "Asia/Bangkok",
    "81": "Asia/Tokyo",
    "82": "Asia/Seoul",
    "84": "Asia/Ho_Chi_Minh",
    "86": "Asia/Shanghai",
    "90": "Europe/Istanbul",
    "91": "Asia/Kolkata",
    "92": "Asia/Karachi",
    "212": "Africa/Casablanca",
    "233": "Africa/Accra",
    "234": "Africa/Lagos",
    "254": "Africa/Nairobi",
    "353": "Europe/Dublin",
    "420": "Europe/Prague",
    "880": "Asia/Dhaka",
    "966": "Asia/Riyadh",
    "971": "Asia/Dubai",
    "972": "Asia/Jerusalem",
}


@cache
def zone(name: str) -> tzinfo:
    """The zone called `name`; UTC when the runtime has no time zone database entry for it."""
    if name.upper() == "UTC":
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def is_zone(name: str) -> bool:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def person_zone(address: str | None, default: str) -> str:
    """The person's zone name: their phone's country's, when it has one zone; else `default`."""
    digits = (address or "").removeprefix("+")
    if not digits.isdigit() or len(digits) < 8:  # a BSUID or an unknown identifier
        return default
    for length in (3, 2):
        if found := SINGLE_ZONE_COUNTRIES.get(digits[:length]):
            return found
    return default


def day(at: datetime, zone_name: str) -> str:
    """A date as the model reads it: "Tue 3 Mar 2026"."""
    local = at.astimezone(zone(zone_name))
    return f"{local:%a} {local.day} {local:%b %Y}"


def moment(at: datetime, zone_name: str) -> str:
    """A date and time: "Tue 3 Mar 2026, 14:05 (Europe/London)", labelled with the zone the
    time is in: "UTC" when `zone_name` has no database entry here (see `zone`)."""
    used = zone(zone_name)
    label = "UTC" if used is UTC else zone_name
    return f"{day(at, zone_name)}, {at.astimezone(used):%H:%M} ({label})"
