"""What a function that sends through the provider needs (ProviderSettings: the consumer, the
admin API's operator replies): which provider, its URL and key or token, the media rules."""

from __future__ import annotations

from dataclasses import dataclass, field

from memagent.environment import Environment, Secret, setting, table_of
from memagent.providers.origins import parse_media_origins, parse_origins

PROVIDERS = ("whasp", "meta")


@dataclass(frozen=True, kw_only=True)
class ProviderSettings:
    """What a function that sends through the provider needs (the consumer, the admin API's
    operator replies)."""

    provider: str = setting(
        "PROVIDER", "whasp", choices=PROVIDERS, parameter="Provider", custom=True
    )
    whasp_api_url: str | None = setting(
        "WHASP_API_URL", None, kind="url", parameter="WhaspApiUrl", custom=True
    )
    meta_graph_url: str = setting(
        "META_GRAPH_URL", "https://graph.facebook.com/v26.0", kind="url", parameter="MetaGraphUrl"
    )
    typing_indicator: bool = setting("TYPING_INDICATOR", True, parameter="TypingIndicator")
    # Where media may be fetched from (origins, space- or comma-separated); empty = the origin
    # of WHASP_API_URL. The API key is only ever sent to WHASP_API_URL's origin.
    whasp_media_origins: str | None = setting("WHASP_MEDIA_ORIGINS", None, custom=True)
    # Provider meta: media hosts besides Meta's own (lookaside.fbsbx.com), https only
    meta_media_origins: str | None = setting("META_MEDIA_ORIGINS", None, custom=True)
    # One download, redirects included, however slowly the host sends
    media_deadline_seconds: float = setting("MEDIA_DEADLINE_SECONDS", 30.0, minimum=0, above=True)
    whasp_timeout_seconds: float = setting("WHASP_TIMEOUT_SECONDS", 10.0, minimum=0, above=True)
    whasp_api_key: Secret | None = field(default=None, repr=False)
    meta_access_token: Secret | None = field(default=None, repr=False)

    @classmethod
    def _provider(cls, read: Environment) -> dict:
        """The provider and its secrets (the custom reads; Environment.values reads the rest)."""
        provider = read.value(table_of(cls)["provider"])
        meta = provider == "meta"
        return {
            "provider": provider,
            # whasp needs its API's URL and key; Meta an access token (the Graph URL defaults)
            "whasp_api_url": None if meta else _whasp_api_url(read),
            "whasp_api_key": None if meta else read.secret("WHASP_API_KEY"),
            "meta_access_token": read.secret("META_ACCESS_TOKEN") if meta else None,
            "whasp_media_origins": _media_origins(read),
            "meta_media_origins": _media_origins(read, "META_MEDIA_ORIGINS", https_only=True),
        }

    @property
    def media_origins(self) -> frozenset[tuple[str, str, int]]:
        """whasp media may come only from these origins (memagent.providers.origins.Origin)."""
        return parse_media_origins(self.whasp_media_origins, self.whasp_api_url or "")


def _whasp_api_url(read: Environment) -> str:
    """WHASP_API_URL: whasp needs it to send anything; unset, the cold start says what it is."""
    if read.optional("WHASP_API_URL") is None:
        read.problems.append(
            "WHASP_API_URL: required with PROVIDER=whasp (the default): the base URL of your "
            "whasp account's API, the template's WhaspApiUrl parameter (docs/whasp.md); "
            "for Meta's Cloud API set PROVIDER=meta"
        )
        return ""
    return read.url("WHASP_API_URL")


def _media_origins(
    read: Environment, name: str = "WHASP_MEDIA_ORIGINS", *, https_only: bool = False
) -> str | None:
    value = read.optional(name)
    if value is not None:
        try:  # names the bad entry
            parse_origins(value, https_only=https_only)
        except ValueError as error:
            read.problems.append(f"{name}: {error}")
    return value
