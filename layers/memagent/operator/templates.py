"""The approved templates an operator may send to reopen a chat outside Meta's 24-hour window
(GET /templates, POST /people/{id}/templates: memagent/operator/handoff.py).

Read from the Graph API (`GET /{WABA_ID}/message_templates`, META_WABA_ID) and cached for
TEMPLATE_CACHE_SECONDS in the admin function's memory: a console that lists them on every
page costs Meta one call per warm function and period. Only APPROVED templates are listed or
sent; a template paused or disabled after it was cached is refused by Meta at the send
(132015, 132016), and the seat says so. A template's parameters are its body's placeholders
(`{{1}}`, `{{2}}`, or named `{{first_name}}`), in the order they first appear: what the
operator fills in, and what the memory keeps with them filled in (the person's words as they
read them).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from memagent.errors import InvalidEdit

PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z0-9_]+)\s*\}\}")
APPROVED = "APPROVED"
MAX_PARAMETER_CHARS = 1024  # a body parameter's text (the body itself is at most 1,024)


@dataclass(frozen=True)
class Template:
    name: str
    language: str
    category: str
    body: str
    parameters: tuple[str, ...]  # the placeholders' names ("1", "2" or "first_name"), in order

    def render(self, values: Sequence[str]) -> str:
        """The body as the person reads it, each placeholder filled in."""
        filled = dict(zip(self.parameters, values, strict=True))
        return PLACEHOLDER.sub(lambda found: filled[found[1]], self.body)

    def view(self) -> dict[str, Any]:
        return {**asdict(self), "parameters": list(self.parameters)}


def approved(listed: list[dict[str, Any]]) -> list[Template]:
    """The approved templates in Meta's listing, one per name and language."""
    found = []
    for item in listed:
        if item.get("status") != APPROVED or not isinstance(item.get("name"), str):
            continue
        bodies = [
            c.get("text")
            for c in item.get("components") or []
            if isinstance(c, dict) and str(c.get("type", "")).upper() == "BODY"
        ]
        body = next((b for b in bodies if isinstance(b, str)), "")
        names = tuple(dict.fromkeys(PLACEHOLDER.findall(body)))
        found.append(
            Template(
                name=item["name"],
                language=str(item.get("language") or ""),
                category=str(item.get("category") or ""),
                body=body,
                parameters=names,
            )
        )
    return sorted(found, key=lambda t: (t.name, t.language))


class TemplateCatalog:
    """The approved templates, fetched through `fetch` (the Graph API's listing) at most once
    per `ttl_seconds`."""

    def __init__(
        self,
        fetch: Callable[[], list[dict[str, Any]]],
        ttl_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl = ttl_seconds
        self._clock = clock
        self._cached: tuple[float, list[Template]] | None = None

    def templates(self) -> list[Template]:
        now = self._clock()
        if self._cached is None or now - self._cached[0] >= self._ttl:
            self._cached = (now, approved(self._fetch()))
        return self._cached[1]

    def chosen(self, body: dict[str, Any]) -> tuple[Template, tuple[str, ...]]:
        """The template a request names (`name`, `language`) with its `parameters` checked
        against it; InvalidEdit saying what is wrong otherwise."""
        name, language = body.get("name"), body.get("language")
        values = body.get("parameters", [])
        if not isinstance(name, str) or not isinstance(language, str):
            raise InvalidEdit('"name" and "language" (an approved template\'s) are required')
        template = next(
            (t for t in self.templates() if t.name == name and t.language == language), None
        )
        if template is None:
            raise InvalidEdit(f"no approved template {name!r} in language {language!r}")
        if not isinstance(values, list) or not all(
            isinstance(v, str) and v.strip() and len(v) <= MAX_PARAMETER_CHARS for v in values
        ):
            raise InvalidEdit(
                f'"parameters": a list of texts, each 1 to {MAX_PARAMETER_CHARS} characters'
            )
        if len(values) != len(template.parameters):
            raise InvalidEdit(
                f"template {name!r} takes {len(template.parameters)} parameters, "
                f"{len(values)} given"
            )
        return template, tuple(v.strip() for v in values)
