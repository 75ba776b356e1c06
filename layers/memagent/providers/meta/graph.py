"""Meta's Graph API client: replies, read receipts with the typing indicator, media.

Sending
    ``POST {graph}/{phone_number_id}/messages`` with a Bearer token; ``to`` a phone or
    ``recipient`` a BSUID. No idempotency key exists: a repeat sends twice (see delivery.py for how
    we shrink that window). Errors are decided on ``error.code``, not the HTTP status.
Read receipt and typing indicator
    The same endpoint, ``{"status": "read", "message_id", "typing_indicator": {"type": "text"}}``.
Voice replies
    ``POST {graph}/{phone_number_id}/media`` (multipart: ``messaging_product=whatsapp``, ``type``,
    ``file``; audio up to 16 MB, a voice note ``audio/ogg`` with the opus codec) answers
    ``{"id": media_id}``; then an ``audio`` message ``{"id": media_id}`` sends it.
Media
    ``GET {graph}/{media_id}`` answers a URL that lives 5 minutes; ``GET <url>`` (Bearer) the bytes,
    fetched only from Meta's media hosts (memagent.providers.download's rules, as for whasp).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from memagent.errors import (
    MalformedEvent,
    OptedOut,
    SendRejected,
    TemplateRefused,
    TransientError,
)
from memagent.providers import download
from memagent.providers.meta.identity import BSUID
from memagent.providers.origins import Origin, url_origin
from memagent.providers.seam import post_with_fresh_key

if TYPE_CHECKING:
    from memagent.environment import Secret
    from memagent.memory import Choices
    from memagent.providers.seam import InboundMessage, TemplateMessage

# error.code -> what to do (docs/meta.md, "Replies"). Anything not listed and not 5xx is permanent.
RETRY_CODES = frozenset({130429, 131056, 4, 80007, 131000, 1, 2, 131016, 131057})
# an operator must renew the token, but the reply is retried on our backoff with the
# ProviderAuthFailed alarm, never parked: a parked reply is a lost one, and a token is usually
# fixed within hours (inside the outage budget)
TOKEN_CODES = frozenset({190, 0, 10, 200})
OPTED_OUT_CODES = frozenset({131050})  # the person stopped messages from this business
WINDOW_CLOSED = 131047
# a template refused (Meta's error codes page): the parameters do not match it (132000, 132012),
# it does not exist in that language or is not approved (132001), paused or disabled (132015,
# 132016). None is fixed by retrying.
TEMPLATE_CODES = frozenset({132000, 132001, 132005, 132007, 132012, 132015, 132016})
TEMPLATE_FIELDS = "name,language,status,category,components,parameter_format"
TEMPLATE_PAGES = 10  # at most 1,000 templates listed
# Where Meta's media lookup sends the download (https://lookaside.fbsbx.com/whatsapp_business/
# attachments/?mid=...); META_MEDIA_ORIGINS adds others, https only
# what WhatsApp plays as a voice note (Meta's "Supported media types": audio/ogg, opus codec only)
VOICE_NOTE_TYPE = "audio/ogg; codecs=opus"
MEDIA_ORIGINS = frozenset({("https", "lookaside.fbsbx.com", 443)})


# Interactive messages (Meta's "Interactive reply buttons messages" and "Interactive list
# messages" pages): a payload past any of these is refused whole (131009), so we never send one
MAX_BUTTONS = 3
MAX_BUTTON_TITLE = 20
MAX_ROWS = 10  # across all sections
MAX_ROW_TITLE = 24
MAX_ROW_DESCRIPTION = 72
MAX_LIST_BUTTON = 20
MAX_INTERACTIVE_BODY = 1024
LIST_BUTTON = "\u2630"  # a list's button when the model named none (the label may not be empty)


def interactive(text: str, choices: Choices) -> dict[str, Any] | None:
    """`choices` as Meta shows them: up to 3 short options as reply buttons, up to 10 as a
    list (a row title past 24 characters is cut, the whole option in its description); None
    where Meta's limits allow neither (the caller sends numbered text). A tap comes back as
    the person's message with the button's or row's title (memagent.providers.meta.parser)."""
    body, options = choices.body(text), choices.options
    if (
        not body
        or len(body) > MAX_INTERACTIVE_BODY
        or not 1 <= len(options) <= MAX_ROWS
        or any(not o or len(o) > MAX_ROW_DESCRIPTION for o in options)
    ):
        return None
    if len(options) <= MAX_BUTTONS and all(len(o) <= MAX_BUTTON_TITLE for o in options):
        buttons = [
            {"type": "reply", "reply": {"id": f"choice-{n}", "title": o}}
            for n, o in enumerate(options, 1)
        ]
        return {"type": "button", "body": {"text": body}, "action": {"buttons": buttons}}
    rows = []
    for n, option in enumerate(options, 1):
        row = {"id": f"choice-{n}", "title": option}
        if len(option) > MAX_ROW_TITLE:
            row.update(title=option[: MAX_ROW_TITLE - 1].rstrip() + "\u2026", description=option)
        rows.append(row)
    button = (choices.button.strip() or LIST_BUTTON)[:MAX_LIST_BUTTON]
    return {
        "type": "list",
        "body": {"text": body},
        "action": {"button": button, "sections": [{"rows": rows}]},
    }


@dataclass(frozen=True)
class GraphError:
    status: int
    code: int | None


def _graph_error(status: int, data: bytes) -> GraphError:
    try:
        error = json.loads(data).get("error")
    except (ValueError, AttributeError):
        error = None
    code = error.get("code") if isinstance(error, dict) else None
    return GraphError(status, code if isinstance(code, int) else None)


def _count(name: str) -> None:
    from aws_lambda_powertools.metrics import MetricUnit

    from memagent.observability import metrics

    metrics.add_metric(name=name, unit=MetricUnit.Count, value=1)


class GraphClient:
    """Sends replies, read receipts and fetches media over HTTP (urllib3, shipped with botocore).

    POSTs are never retried by the client once the request may have reached Meta: there is no
    idempotency key, so a blind retry could deliver a reply twice. Only connection failures
    (nothing sent) are retried here; everything else is the turn's decision."""

    def __init__(
        self,
        graph_url: str,
        access_token: str | Secret,
        *,
        timeout_seconds: float = 10.0,
        typing_indicator: bool = True,
        media_origins: frozenset[Origin] = frozenset(),
        media_deadline_seconds: float = 30.0,
    ):
        import urllib3
        from urllib3.util import Retry, Timeout

        self._graph = graph_url.rstrip("/")
        # Meta's media hosts (https only), the Graph API's own origin and any the operator adds
        graph_origin = url_origin(self._graph)
        self._media_origins = (
            MEDIA_ORIGINS | media_origins | ({graph_origin} if graph_origin else set())
        )
        self._media_deadline = media_deadline_seconds
        self._read_timeout = timeout_seconds
        self._token = access_token  # a Secret is read on first use
        self.typing_indicator = typing_indicator
        self._http = urllib3.PoolManager(
            retries=Retry(total=2, connect=2, read=0, status=0, redirect=0, raise_on_status=False),
            timeout=Timeout(connect=3.0, read=timeout_seconds),
        )

    def _bearer(self, *, fresh: bool = False) -> dict[str, str]:
        token = self._token if isinstance(self._token, str) else self._token.get(fresh=fresh)
        return {"Authorization": f"Bearer {token}"}

    @staticmethod
    def _token_refused(response: Any) -> bool:
        return response.status != 200 and _graph_error(response.status, response.data).code in (
            TOKEN_CODES
        )

    def _post(self, sender: str, body: dict[str, Any]) -> Any:
        """POST to the messages endpoint. A refused token (nothing was sent) is read again
        past the secret cache and tried once more: a renewed token works at once."""
        return post_with_fresh_key(
            self._http,
            f"{self._graph}/{sender}/messages",
            json.dumps(body).encode(),
            lambda fresh: {**self._bearer(fresh=fresh), "Content-Type": "application/json"},
            refused=self._token_refused,
            name="Graph API",
            dependency="meta",
        )

    @staticmethod
    def _raise_for(response: Any) -> None:
        """Map a Graph API error to our typed errors, on error.code (docs/meta.md, "Replies")."""
        error = _graph_error(response.status, response.data)
        code = error.code
        if error.status == 429:  # a rate limit whatever its code (613 comes this way)
            raise TransientError(
                f"Graph API rate limit (HTTP 429, code {code})",
                dependency="meta",
                status=429,
                error=f"code {code}",
            )
        if code in TOKEN_CODES:
            _count("ProviderAuthFailed")  # alarmed: an operator must renew the token
            raise TransientError(
                f"Graph API refused the token (code {code})",
                dependency="meta",
                status=error.status,
                error=f"code {code}",
            )
        if code in RETRY_CODES or (code is None and (error.status == 429 or error.status >= 500)):
            raise TransientError(
                f"Graph API answered {error.status} (code {code})",
                dependency="meta",
                status=error.status,
                error=f"code {code}",
            )
        if code in OPTED_OUT_CODES:
            raise OptedOut(f"code {code}")
        if code in TEMPLATE_CODES:
            raise TemplateRefused(error.status, code=code)
        raise SendRejected(error.status, code=code)

    def send_text(self, *, sender: str, to: str, text: str, key: str) -> str:
        """Send one text part; return its wamid. `to` is a phone or a BSUID; `key` comes back
        as biz_opaque_callback_data in this message's status webhooks."""
        return self._send_message(
            sender, to, key, type="text", text={"body": text, "preview_url": False}
        )

    def send_choices(self, *, sender: str, to: str, text: str, choices: Choices, key: str) -> str:
        """Send the reply `text` (ending with the numbered options) as an interactive message,
        its options as reply buttons or a list (`interactive`); what Meta's limits cannot show
        goes as the numbered text it is."""
        shown = interactive(text, choices)
        if shown is None:
            return self.send_text(sender=sender, to=to, text=text, key=key)
        return self._send_message(sender, to, key, type="interactive", interactive=shown)

    def send_template(self, *, sender: str, to: str, template: TemplateMessage, key: str) -> str:
        """Send an approved template with its body's parameters, in order (what may go
        outside the 24-hour window: docs/follow-ups.md, an operator's template); return its
        wamid. Its errors (132000, 132001, 132015, 132016) are permanent: SendRejected, never
        a fall back to free text."""
        sent: dict[str, Any] = {
            "name": template.name,
            "language": {"policy": "deterministic", "code": template.language},
        }
        if template.parameters:
            body = [{"type": "text", "text": text} for text in template.parameters]
            sent["components"] = [{"type": "body", "parameters": body}]
        return self._send_message(sender, to, key, type="template", template=sent)

    def upload_voice(self, *, sender: str, audio: bytes) -> str | None:
        """Upload a voice note (ogg/opus) to the number's media; return its media id. Nothing
        is sent yet: a repeat uploads a second copy, never a second message."""
        import urllib3

        fields: list[tuple[str, str | tuple[str, bytes, str]]] = [
            ("messaging_product", "whatsapp"),
            ("type", VOICE_NOTE_TYPE),
            ("file", ("voice.ogg", audio, VOICE_NOTE_TYPE)),
        ]
        body, content_type = urllib3.encode_multipart_formdata(fields)
        response = post_with_fresh_key(
            self._http,
            f"{self._graph}/{sender}/media",
            body,
            lambda fresh: {**self._bearer(fresh=fresh), "Content-Type": content_type},
            refused=self._token_refused,
            name="Graph API",
            dependency="meta",
        )
        if response.status != 200:
            self._raise_for(response)
        try:
            return str(json.loads(response.data)["id"])
        except (ValueError, KeyError, TypeError):
            raise TransientError("media upload answered without an id", dependency="meta") from None

    def send_voice(self, *, sender: str, to: str, media_id: str, key: str) -> str:
        """Send an uploaded voice note as an audio message; return its wamid."""
        return self._send_message(sender, to, key, type="audio", audio={"id": media_id})

    def _send_message(self, sender: str, to: str, key: str, **content: Any) -> str:
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            **content,
            "biz_opaque_callback_data": key,
        }
        if BSUID.match(to):
            body["recipient"] = to
        else:
            body["to"] = to.removeprefix("+")  # Meta's wa_id form
        response = self._post(sender, body)
        if response.status != 200:
            self._raise_for(response)
        try:
            return str(json.loads(response.data)["messages"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            return ""  # accepted; the id only serves bookkeeping

    def templates(self, waba_id: str) -> list[dict[str, Any]]:
        """The WhatsApp Business Account's message templates (``GET {graph}/{WABA_ID}/
        message_templates``: ``{"data": [{name, language, status, category, components,
        parameter_format?, id}], "paging": {"cursors": {"after"}, "next"?}}``), every page, in
        Meta's shape. Approved or not: the caller picks what may be sent."""
        found: list[dict[str, Any]] = []
        after = None
        for _page in range(TEMPLATE_PAGES):
            query = f"?fields={TEMPLATE_FIELDS}&limit=100" + (f"&after={after}" if after else "")
            url = f"{self._graph}/{waba_id}/message_templates{query}"
            response = self._get(url)
            if self._token_refused(response):
                response = self._get(url, fresh=True)
            if response.status != 200:
                self._raise_for(response)
            try:
                page = json.loads(response.data)
                found += [t for t in page.get("data") or [] if isinstance(t, dict)]
                after = (page.get("paging") or {}).get("cursors", {}).get("after")
                more = bool((page.get("paging") or {}).get("next"))
            except (ValueError, AttributeError, TypeError):
                raise TransientError("Graph API answered templates we cannot read") from None
            if not (more and after):
                break
        return found

    def mark_read(self, message: InboundMessage) -> None:
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "status": "read",
            "message_id": message.message_id,
        }
        if self.typing_indicator:
            body["typing_indicator"] = {"type": "text"}
        response = self._post(message.number, body)
        if response.status != 200:
            self._raise_for(response)

    def _get(self, url: str, *, fresh: bool = False) -> Any:
        import urllib3

        try:
            return self._http.request("GET", url, headers=self._bearer(fresh=fresh), retries=2)
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(f"media unreachable: {type(error).__name__}") from None

    def _media_url(self, media_id: str) -> tuple[str, str | None]:
        response = self._get(f"{self._graph}/{media_id}")
        if self._token_refused(response):
            response = self._get(f"{self._graph}/{media_id}", fresh=True)
        if response.status != 200:
            error = _graph_error(response.status, response.data)
            if error.code in TOKEN_CODES:
                _count("ProviderAuthFailed")
                raise TransientError(f"media lookup refused the token (code {error.code})")
            if error.code in RETRY_CODES or response.status == 429 or response.status >= 500:
                raise TransientError(f"media lookup answered {response.status}")
            raise MalformedEvent(f"media lookup answered {response.status} (code {error.code})")
        try:
            found = json.loads(response.data)
            return str(found["url"]), found.get("mime_type")
        except (ValueError, KeyError, TypeError):
            raise MalformedEvent("media lookup without a url") from None

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        """`url` is the media id: look up a fresh download URL (it lives 5 minutes), download it
        by memagent.providers.download's rules (Meta's media hosts only, the token only to them,
        every redirect hop checked, the size cap while streaming, one deadline for the lookups and
        the download); on a 404 (the URL expired meanwhile) look it up once more."""
        deadline = time.monotonic() + self._media_deadline
        for _ in range(2):
            found, mime_type = self._media_url(url)
            try:
                data, content_type = download.fetch(
                    self._http,
                    found,
                    allowed=self._media_origins,
                    key_origins=self._media_origins,
                    key=lambda: self._bearer()["Authorization"].removeprefix("Bearer "),
                    max_bytes=max_bytes,
                    deadline_seconds=deadline - time.monotonic(),
                    read_timeout=self._read_timeout,
                )
            except download.Refused as refused:
                if refused.status == 404:
                    continue
                raise MalformedEvent(f"media download answered HTTP {refused.status}") from None
            return data, content_type or mime_type or "application/octet-stream"
        raise MalformedEvent("media URL expired twice")
