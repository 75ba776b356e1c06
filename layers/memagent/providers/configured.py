"""The provider a stack serves (PROVIDER): its client and its queued-event parser, built from
the settings of a function that sends (the consumer, the admin API). Only that provider's
module is imported. Either client sends nothing to the reserved test person
(memagent.providers.void: what `make smoke` writes as)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memagent.providers.void import IntoTheVoid

if TYPE_CHECKING:
    from collections.abc import Callable

    from memagent.providers.seam import ParseEvent, Provider
    from memagent.providers.settings import ProviderSettings


def provider_from_settings(settings: ProviderSettings) -> tuple[Provider, ParseEvent]:
    """The configured provider's client and queued-event parser (only that one is imported)."""
    if settings.provider == "meta":
        from memagent.providers import meta
        from memagent.providers.origins import parse_origins

        assert settings.meta_access_token  # read by ProviderSettings.from_env for meta
        client: Provider = meta.GraphClient(
            settings.meta_graph_url,
            settings.meta_access_token,
            timeout_seconds=settings.whasp_timeout_seconds,
            typing_indicator=settings.typing_indicator,
            media_origins=parse_origins(settings.meta_media_origins, https_only=True),
            media_deadline_seconds=settings.media_deadline_seconds,
        )
        return IntoTheVoid(client), meta.parse_event
    from memagent.providers import whasp

    assert settings.whasp_api_url  # checked by ConsumerSettings.from_env
    assert settings.whasp_api_key  # read by ProviderSettings.from_env for whasp
    client = whasp.WhaspClient(
        settings.whasp_api_url,
        settings.whasp_api_key,
        timeout_seconds=settings.whasp_timeout_seconds,
        media_origins=settings.media_origins,
        media_deadline_seconds=settings.media_deadline_seconds,
    )
    return IntoTheVoid(client), whasp.parse_event


def template_listing(
    settings: ProviderSettings, waba_id: str
) -> Callable[[], list[dict[str, Any]]]:
    """Meta's listing of the WhatsApp Business Account's templates (GET /{WABA_ID}/
    message_templates), for the operator's seat; only a Meta stack has templates."""
    from memagent.providers import meta

    assert settings.provider == "meta" and settings.meta_access_token
    client = meta.GraphClient(
        settings.meta_graph_url,
        settings.meta_access_token,
        timeout_seconds=settings.whasp_timeout_seconds,
    )
    return lambda: client.templates(waba_id)
