"""The operator console's page (console.html: plain HTML and JavaScript, no build step), as
the stack serves it (GET / on ConsoleApi) and as console/server.py serves it on 127.0.0.1.

`page(config)` writes the page's door into it (how it reaches the admin API: see console.html)
and a fresh nonce, the only way its one script and one style may run: the content-security
policy allows nothing inline without it, nothing from elsewhere, no framing, no form posts.
Data from people only ever reaches the page as text (`textContent`), never as HTML.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

PAGE = Path(__file__).with_name("console.html")
CONFIG_SLOT = "{{CONSOLE_CONFIG}}"
NONCE_SLOT = "{{NONCE}}"


def page(config: dict[str, Any], *, connect: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """The page with `config` in it, and its response headers. `connect`: origins the page may
    call besides its own (the managed login's token endpoint)."""
    nonce = secrets.token_urlsafe(18)
    # JSON inside <script>: "<" escaped, so no value can close the element
    data = json.dumps(config).replace("<", "\\u003c")
    html = PAGE.read_text().replace(CONFIG_SLOT, data).replace(NONCE_SLOT, nonce)
    policy = "; ".join(
        (
            "default-src 'none'",
            f"script-src 'nonce-{nonce}'",
            f"style-src 'nonce-{nonce}'",
            " ".join(("connect-src 'self'", *connect)),
            "img-src 'self'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Security-Policy": policy,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
    }
    return html, headers
