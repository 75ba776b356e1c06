"""Message to text: what the agent remembers and the model reads for each kind of message."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from memagent.errors import MalformedEvent, ModelRejected, TransientError
from memagent.providers.seam import InboundMessage, Media
from memagent.turn.inbound import MediaCaps, message_text, voice_seconds

AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def message(kind: str, *, text=None, caption=None, media=None) -> InboundMessage:
    return InboundMessage(
        event_id="evt_1",
        created_at=AT,
        number="+14155550100",
        chat="+447700900123",
        label=None,
        message_id="msg_1",
        kind=kind,
        text=text,
        caption=caption,
        media=media,
        sent_at=AT,
    )


@dataclass
class Provider:
    """A provider whose media downloads are scripted: the bytes and type, or an error."""

    content_type: str = "image/jpeg"
    error: Exception | None = None
    data: bytes = b"media-bytes"
    fetched: list[tuple[str, int]] = field(default_factory=list)

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        self.fetched.append((url, max_bytes))
        if self.error:
            raise self.error
        return self.data, self.content_type


@dataclass
class Model:
    """A model that describes and transcribes by naming what it was given."""

    transcript: str | None = "see you at six"  # None: no transcription here
    refuse: bool = False
    seen: list[tuple[str, bytes, str]] = field(default_factory=list)

    def transcribe(self, data: bytes, mime_type: str) -> str | None:
        self.seen.append(("transcribe", data, mime_type))
        if self.refuse:
            raise ModelRejected("unsupported format")
        return self.transcript

    def describe_image(self, data: bytes, mime_type: str) -> str:
        self.seen.append(("describe", data, mime_type))
        if self.refuse:
            raise ModelRejected("unsupported format")
        return "a dog on a beach"


PHOTO = Media(url="https://media.example/photo", mime_type="image/png", size=10)
VOICE = Media(url="https://media.example/voice", mime_type="audio/ogg", size=10)


def text_of(msg: InboundMessage, provider=None, model=None) -> str:
    return message_text(
        msg, provider=provider or Provider(), model=model or Model(), caps=MediaCaps(max_bytes=99)
    )


def test_a_text_is_remembered_as_written_without_outer_whitespace():
    assert text_of(message("text", text="  Hello there \n")) == "Hello there"


@pytest.mark.parametrize("text", [None, "", "  \n "])
def test_an_empty_text_is_noted_as_empty(text):
    assert text_of(message("text", text=text)) == "[sent an empty message]"


def test_a_photo_is_described_with_its_caption_from_its_own_type():
    # given a photo with a caption, whose message says PNG and whose download says JPEG
    provider, model = Provider(content_type="image/jpeg"), Model()
    # when it becomes text
    text = text_of(message("image", caption=" my dog ", media=PHOTO), provider, model)
    # then the model saw the bytes with the message's type, and the caption follows the description
    assert text == "[photo: a dog on a beach] my dog"
    assert provider.fetched == [("https://media.example/photo", 99)]
    assert model.seen == [("describe", b"media-bytes", "image/png")]


def test_a_photo_without_a_type_is_described_with_the_downloads_type():
    provider, model = Provider(content_type="image/webp"), Model()
    photo = Media(url="https://media.example/photo", mime_type="", size=None)
    assert text_of(message("image", media=photo), provider, model) == "[photo: a dog on a beach]"
    assert model.seen == [("describe", b"media-bytes", "image/webp")]


@pytest.mark.parametrize("caption", [None, "", "  "])
def test_a_photo_without_a_caption_is_its_description_alone(caption):
    assert text_of(message("image", caption=caption, media=PHOTO)) == "[photo: a dog on a beach]"


def test_a_voice_note_is_transcribed():
    model = Model(transcript="see you at six")
    assert text_of(message("audio", media=VOICE), model=model) == "[voice note] see you at six"
    assert model.seen == [("transcribe", b"media-bytes", "audio/ogg")]


def test_a_silent_voice_note_is_noted():
    text = text_of(message("audio", media=VOICE), model=Model(transcript=""))
    assert text == "[sent a voice note that could not be played]"


@pytest.mark.parametrize(
    ("kind", "media", "note"),
    [
        ("image", PHOTO, "[sent a photo that could not be opened] look"),
        ("audio", VOICE, "[sent a voice note that could not be played] look"),
    ],
)
def test_media_the_model_refuses_becomes_a_note_with_its_caption(kind, media, note):
    assert text_of(message(kind, caption="look", media=media), model=Model(refuse=True)) == note


@pytest.mark.parametrize(
    ("kind", "media", "note"),
    [
        ("image", PHOTO, "[sent a photo that could not be opened] look"),
        ("audio", VOICE, "[sent a voice note that could not be played] look"),
    ],
)
def test_media_that_cannot_be_downloaded_becomes_a_note_with_its_caption(kind, media, note):
    # given a download the provider refuses for good (too large, gone)
    provider, model = Provider(error=MalformedEvent("media too large")), Model()
    # then the message is a note, the model is not asked, and the queue is not blocked
    assert text_of(message(kind, caption="look", media=media), provider, model) == note
    assert model.seen == []


def test_a_media_outage_is_retried_not_noted():
    provider = Provider(error=TransientError("media server 503"))
    with pytest.raises(TransientError):
        text_of(message("image", media=PHOTO), provider)


def test_a_photo_without_media_is_a_note_and_nothing_is_downloaded():
    provider = Provider()
    text = text_of(message("image", caption="look", media=None), provider)
    assert text == "[sent a photo that could not be opened] look"
    assert provider.fetched == []


@pytest.mark.parametrize(
    ("kind", "note"),
    [
        ("video", "[sent a video] at the beach"),
        ("document", "[sent a document] at the beach"),
        ("sticker", "[sent a sticker] at the beach"),
        ("location", "[shared a location] at the beach"),
        ("contact", "[shared a contact] at the beach"),
    ],
)
def test_other_media_is_a_note_with_its_caption_and_is_not_downloaded(kind, note):
    provider = Provider()
    text = text_of(message(kind, caption=" at the beach", media=PHOTO), provider)
    assert text == note
    assert provider.fetched == []


def test_a_voice_note_where_nothing_transcribes_says_so_with_its_caption():
    # given a stack whose model provider has no transcription (Bedrock without an endpoint)
    text = text_of(message("audio", caption="listen", media=VOICE), model=Model(transcript=None))
    assert text == "[sent a voice note; voice notes are not transcribed here] listen"


@pytest.mark.parametrize(
    ("kind", "note"),
    [
        ("location", "[shared a location: Leeds station] here"),
        ("contact", "[shared a contact: Sam +447700900456] here"),
        ("order", "[sent an order: 2 x coffee] here"),
    ],
)
def test_what_a_shared_location_contact_or_order_holds_is_in_its_note(kind, note):
    content = {"location": "Leeds station", "contact": "Sam +447700900456", "order": "2 x coffee"}
    assert text_of(message(kind, text=f" {content[kind]} ", caption="here")) == note


def test_text_on_another_kind_is_not_shown_as_shared():
    assert text_of(message("sticker", text="smile")) == "[sent a sticker]"


def test_an_unknown_kind_is_named_in_its_note():
    assert text_of(message("poll")) == "[sent a poll message]"
    assert text_of(message("reaction", caption="ok")) == "[sent a reaction message] ok"
    assert text_of(message("interactive")) == "[sent an interactive message]"
    assert text_of(message("unsupported")) == "[sent an unsupported message]"


def ogg_opus(seconds: float, pre_skip: int = 312) -> bytes:
    """An Ogg Opus file's bytes as far as its length goes: the OpusHead header's pre-skip and
    the last page's granule position (48,000 a second)."""
    head = b"OggS" + bytes(24) + b"OpusHead" + bytes([1, 1]) + pre_skip.to_bytes(2, "little")
    granule = round(seconds * 48_000) + pre_skip
    return head + bytes(30) + b"OggS\x00\x04" + granule.to_bytes(8, "little") + bytes(12)


def test_a_voice_notes_length_is_read_from_its_ogg_pages():
    assert voice_seconds(ogg_opus(2.5)) == 2.5
    assert voice_seconds(ogg_opus(600, pre_skip=0)) == 600
    assert (
        voice_seconds(ogg_opus(0, pre_skip=400)[:-20] + (100).to_bytes(8, "little") + bytes(12))
        == 0
    )


@pytest.mark.parametrize(
    "data", [b"media-bytes", b"OggS" + bytes(20), b"OpusHead" + bytes(4), ogg_opus(1)[:-13]]
)
def test_anything_but_a_whole_ogg_opus_file_has_no_length(data):
    assert voice_seconds(data) is None


def test_a_voice_note_over_the_limit_is_not_transcribed_and_the_model_is_told():
    provider, model = Provider(data=ogg_opus(600)), Model()
    msg = message("audio", media=VOICE)
    caps = MediaCaps(max_bytes=99, max_audio_seconds=300)
    text = message_text(msg, provider=provider, model=model, caps=caps)
    assert text == (
        "[sent a voice note of 10 minutes, longer than the 5 the agent listens to: not heard]"
    )
    assert model.seen == []


@pytest.mark.parametrize(("data", "limit"), [(ogg_opus(300), 300), (ogg_opus(600), None)])
def test_a_voice_note_at_the_limit_or_without_one_is_transcribed(data, limit):
    provider, model = Provider(data=data), Model(transcript="hi")
    msg = message("audio", media=VOICE)
    caps = MediaCaps(max_bytes=99, max_audio_seconds=limit)
    text = message_text(msg, provider=provider, model=model, caps=caps)
    assert text == "[voice note] hi"
