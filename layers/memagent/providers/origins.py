"""Origins (scheme, host, port) of http(s) URLs: the allow-list media downloads are checked
against, hop by hop (memagent/providers/download.py), and the settings that configure it."""

from __future__ import annotations

Origin = tuple[str, str, int]  # (scheme, host, port), lower-cased, port explicit


def url_origin(url: str) -> Origin | None:
    """The origin of an http(s) URL, parsed by urllib3 itself (so the check and the request
    cannot read the URL differently); None for anything else, or a URL carrying credentials."""
    from urllib3.exceptions import LocationParseError
    from urllib3.util import parse_url

    try:
        parsed = parse_url(url.strip())
    except (LocationParseError, ValueError):
        return None
    scheme = (parsed.scheme or "").lower()
    if scheme not in ("http", "https") or not parsed.host or parsed.auth is not None:
        return None
    return scheme, parsed.host.lower(), parsed.port or (443 if scheme == "https" else 80)


def parse_media_origins(value: str | None, api_url: str) -> frozenset[Origin]:
    """The allow-list for media downloads: WHASP_API_URL's origin, or the configured origins
    (space- or comma-separated); raise ValueError for an entry that is not an http(s) origin."""
    return parse_origins(value or api_url)


def parse_origins(value: str | None, *, https_only: bool = False) -> frozenset[Origin]:
    """Origins from space- or comma-separated URLs; ValueError naming an entry that is not an
    http(s) (with https_only: https) origin."""
    origins = set()
    for entry in (value or "").replace(",", " ").split():
        origin = url_origin(entry)
        if origin is None or (https_only and origin[0] != "https"):
            scheme = "an https" if https_only else "an http(s)"
            raise ValueError(f"{entry!r} is not {scheme} origin such as https://media.example")
        origins.add(origin)
    return frozenset(origins)
