"""Documents read: a PDF's or a plain-text file's text, remembered as the person's message.

A person sends a price list, a prescription, a form. Its text, cut to DOCUMENT_MAX_CHARS (the
first DOCUMENT_MAX_PAGES pages of a PDF), is what memory keeps and the model reads:
`[sent "prices.pdf": ...]`. The file itself is kept only in the media bucket, between a
record's attempts (memagent.aws.archive.KeptMedia), which S3 empties after two days.

A file we do not read (encrypted, larger than DOCUMENT_MAX_BYTES, damaged, a scan without
text, a kind we do not read) is remembered as a note that says why, and the turn answers it
with a fixed reply in the person's language (`refusal`, memagent/turn/replies.toml), not the
model: the note is the stored message, so a redelivered event answers it the same way.
"""

from __future__ import annotations

import io
import re
import unicodedata
from typing import TYPE_CHECKING

from memagent.observability import logger

if TYPE_CHECKING:
    from pypdf import PdfReader

    from memagent.providers import InboundMessage

PDF, PLAIN = "application/pdf", "text/plain"
# what the note says of a file not read -> the fixed reply that answers it
NOT_READ = {
    "password-protected": "document_encrypted",
    "too large to read": "document_too_large",
    "no text could be read from it": "document_unreadable",
    "a kind of file the agent does not read": "document_unreadable",
}
ENCRYPTED, TOO_LARGE, UNREADABLE, UNREAD_KIND = NOT_READ
_REFUSED = re.compile(
    r'\[sent (?:"[^"\n]*"|a document), not read: (?P<reason>'
    + "|".join(re.escape(reason) for reason in NOT_READ)
    + r")\]"
)
CUT = " [...]"
FILENAME_MAX = 80


class NotRead(Exception):
    """The file's text cannot be had; `reason` is a key of NOT_READ."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def refusal(text: str) -> str | None:
    """The fixed reply (a name in replies.toml) that answers a stored message noting a document
    not read, or None. The note stands at the start, a caption may follow it."""
    found = _REFUSED.match(text)
    return NOT_READ[found.group("reason")] if found else None


def kind_of(mime_type: str, filename: str | None) -> str | None:
    """PDF, PLAIN or None (not read), by the type the provider named, else the file's name."""
    mime = mime_type.split(";")[0].strip().lower()
    if mime in (PDF, PLAIN):
        return mime
    name = (filename or "").lower()
    if mime in ("", "application/octet-stream") and name.endswith(".pdf"):
        return PDF
    if mime in ("", "application/octet-stream") and name.endswith(".txt"):
        return PLAIN
    return None


def file_name(message: InboundMessage) -> str:
    """How the note names the file: its name in quotes (Meta's `filename`), else "a document".
    Quotes, brackets and control characters are taken out, so the note stays one thing."""
    raw = message.media.filename if message.media is not None else None
    name = "".join(
        " " if unicodedata.category(c).startswith("C") or c in '"[]' else c for c in raw or ""
    )
    name = " ".join(name.split())[:FILENAME_MAX]
    return f'"{name}"' if name else "a document"


def not_read_note(message: InboundMessage, reason: str) -> str:
    return f"[sent {file_name(message)}, not read: {reason}]"


def read_note(
    message: InboundMessage, data: bytes, kind: str, *, max_pages: int, max_chars: int
) -> str:
    """`[sent "name": text]`, the text cut to `max_chars`; raises NotRead."""
    if kind == PDF:
        text, read, pages = _pdf_text(data, max_pages=max_pages, max_chars=max_chars)
    else:
        text, read, pages = _plain_text(data), 1, 1
    text = _tidy(text)
    if not text:
        raise NotRead(UNREADABLE)
    cut = len(text) > max_chars
    if cut:
        text = text[: max_chars - len(CUT)].rstrip() + CUT
    logger.info(
        "document read",
        extra={"kind": kind, "pages": pages, "pages_read": read, "chars": len(text), "cut": cut},
    )
    part = f" (its first {read} of {pages} pages)" if read < pages else ""
    return f"[sent {file_name(message)}{part}: {text}]"


def _pdf_text(data: bytes, *, max_pages: int, max_chars: int) -> tuple[str, int, int]:
    """The text of the first pages (stopping once past `max_chars`), the pages read, and the
    pages in all."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not _opened(reader):
            raise NotRead(ENCRYPTED)
        pages = len(reader.pages)
        texts: list[str] = []
        read = 0
        for page in reader.pages[:max_pages]:
            texts.append(page.extract_text() or "")
            read += 1
            if sum(len(t) for t in texts) > max_chars:
                break
    except NotRead:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError) as error:
        # a damaged or hostile file: what pypdf raises on one is not one class
        logger.info("document unreadable", extra={"error": type(error).__name__})
        raise NotRead(UNREADABLE) from None
    return "\n".join(texts), read, pages


def _opened(reader: PdfReader) -> bool:
    """An encrypted PDF that opens with the empty password (an owner password only: readable
    by anyone) is read; any other, or one whose cipher needs a library the layer leaves out
    (AES: pypdf's `crypto` extra), is not."""
    from pypdf.errors import PyPdfError

    try:
        return bool(reader.decrypt(""))
    except (PyPdfError, NotImplementedError, ValueError):
        return False


def _plain_text(data: bytes) -> str:
    """UTF-8 (with or without its BOM), or UTF-16 with its BOM; a file that is mostly not text
    (binary bytes, another encoding badly) is not read."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16", errors="replace")
    else:
        text = data.decode("utf-8-sig", errors="replace")
    bad = text.count("\ufffd") + text.count("\x00")
    if bad * 10 > len(text):
        raise NotRead(UNREADABLE)
    return text


def _tidy(text: str) -> str:
    """Lines without their trailing spaces, at most one blank line in a row."""
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
