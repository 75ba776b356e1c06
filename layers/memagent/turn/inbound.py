"""Message to text: what a person sent, as the text we remember and show the model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from memagent.errors import MalformedEvent, MediaTooLarge, ModelRejected
from memagent.observability import count, logger
from memagent.turn import documents

if TYPE_CHECKING:
    from memagent.model import ModelClient
    from memagent.providers import InboundMessage, Provider

NOTES = {
    "video": "[sent a video]",
    "document": "[sent a document]",
    "sticker": "[sent a sticker]",
    "location": "[shared a location]",
    "contact": "[shared a contact]",
    "audio": "[sent a voice note that could not be played]",
    # ModelProvider=bedrock without a transcription endpoint: the audio never leaves the account
    "unheard": "[sent a voice note; voice notes are not transcribed here]",
    "image": "[sent a photo that could not be opened]",
    "order": "[sent an order]",
    "unsupported": "[sent an unsupported message]",
}
# what the model turns into text (a model call each): not past the day's budget
CONVERTED = ("audio", "image")
OVER_BUDGET = {
    "audio": "[sent a voice note, not listened to: the day's limit was reached]",
    "image": "[sent a photo, not looked at: the day's limit was reached]",
}
# what a provider found in a shared location, contact card or order, labelled as shared
SHARED = {"location": "shared a location", "contact": "shared a contact", "order": "sent an order"}


def _with_caption(note: str, caption: str | None) -> str:
    return f"{note} {caption.strip()}" if caption and caption.strip() else note


def over_budget_note(message: InboundMessage) -> str:
    """What a voice note or photo past the day's budget is remembered as (its caption kept)."""
    return _with_caption(OVER_BUDGET[message.kind], message.caption)


def voice_seconds(data: bytes) -> float | None:
    """An Ogg Opus voice note's length, from its last page's granule position (Opus counts
    48,000 per second) less the header's pre-skip; None for anything else."""
    last, head = data.rfind(b"OggS"), data.find(b"OpusHead")
    if last < 0 or head < 0 or len(data) < last + 14 or len(data) < head + 12:
        return None
    granule = int.from_bytes(data[last + 6 : last + 14], "little")
    pre_skip = int.from_bytes(data[head + 10 : head + 12], "little")
    return max(0, granule - pre_skip) / 48_000


@dataclass(frozen=True)
class MediaCaps:
    """How much of what a person sends is fetched and read: a voice note or photo up to
    `max_bytes` (MEDIA_MAX_BYTES); a voice note heard up to `max_audio_seconds` long
    (MAX_AUDIO_SECONDS; None: any length); a document read within `documents` (None: noted,
    not read)."""

    max_bytes: int
    max_audio_seconds: float | None = None
    documents: DocumentCaps | None = None


@dataclass(frozen=True)
class DocumentCaps:
    """How much of a document is read (DOCUMENT_MAX_BYTES, _PAGES, _CHARS)."""

    max_bytes: int
    max_pages: int
    max_chars: int


def message_text(
    message: InboundMessage, *, provider: Provider, model: ModelClient, caps: MediaCaps
) -> str:
    """Text as is; voice notes transcribed; photos described (with their caption); a PDF's or
    a plain-text file's text read (memagent/turn/documents.py); anything else a short bracketed
    note. A media file we cannot use becomes a note, never a failure that blocks the person's
    queue; a dependency outage raises TransientError (retried)."""
    if message.kind == "text":
        return (message.text or "").strip() or "[sent an empty message]"
    if message.kind == "document" and message.media is not None and caps.documents is not None:
        return _with_caption(document_text(message, provider, caps.documents), message.caption)
    if message.kind in CONVERTED and message.media is not None:
        try:
            data, content_type = provider.fetch_media(message.media.url, max_bytes=caps.max_bytes)
        except MalformedEvent as error:
            logger.warning("media unusable", extra={"kind": message.kind, "reason": str(error)})
            return _with_caption(NOTES[message.kind], message.caption)
        mime_type = message.media.mime_type or content_type
        try:
            if message.kind == "audio":
                seconds = voice_seconds(data)
                limit = caps.max_audio_seconds
                if limit and seconds and seconds > limit:
                    # not transcribed: the model sees this note, and tells the person
                    logger.info("voice note too long", extra={"seconds": round(seconds)})
                    return (
                        f"[sent a voice note of {seconds / 60:.0f} minutes, longer than the "
                        f"{limit / 60:g} the agent listens to: not heard]"
                    )
                transcript = model.transcribe(data, mime_type)
                if transcript is None:
                    return _with_caption(NOTES["unheard"], message.caption)
                return f"[voice note] {transcript}" if transcript else NOTES["audio"]
            description = model.describe_image(data, mime_type)
        except ModelRejected as error:  # e.g. a format the model does not take
            logger.warning(
                "media refused by the model", extra={"kind": message.kind, "reason": str(error)}
            )
            return _with_caption(NOTES[message.kind], message.caption)
        return _with_caption(f"[photo: {description}]", message.caption)
    if message.kind in SHARED and message.text and message.text.strip():
        return _with_caption(f"[{SHARED[message.kind]}: {message.text.strip()}]", message.caption)
    article = "an" if message.kind[:1] in "aeiou" else "a"
    note = NOTES.get(message.kind, f"[sent {article} {message.kind} message]")
    return _with_caption(note, message.caption)


def document_text(message: InboundMessage, provider: Provider, caps: DocumentCaps) -> str:
    """A document's note: its text, or why it was not read (which the turn answers with a
    fixed reply: memagent.turn.documents.refusal). Only ids, counts and decisions are logged."""
    assert message.media is not None
    media = message.media
    kind = documents.kind_of(media.mime_type, media.filename)
    reason = None
    if kind is None:
        reason = documents.UNREAD_KIND  # not downloaded: nothing of it would be used
    elif media.size is not None and media.size > caps.max_bytes:
        reason = documents.TOO_LARGE  # the provider said its size: not downloaded either
    else:
        try:
            data, _ = provider.fetch_media(media.url, max_bytes=caps.max_bytes)
            return documents.read_note(
                message, data, kind, max_pages=caps.max_pages, max_chars=caps.max_chars
            )
        except MediaTooLarge:
            reason = documents.TOO_LARGE
        except documents.NotRead as not_read:
            reason = not_read.reason
        except MalformedEvent as error:  # gone, refused: as other media, a note
            logger.warning("media unusable", extra={"kind": message.kind, "reason": str(error)})
            return NOTES["document"]
    count("DocumentsNotRead")
    logger.info("document not read", extra={"reason": documents.NOT_READ[reason]})
    return documents.not_read_note(message, reason)
