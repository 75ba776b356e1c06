"""OpenAI's speech endpoint: a reply's text spoken, for voice replies where the model's home is
OpenAI (VOICE_SPEECH=openai; Amazon Polly, memagent.aws.speech, is the default).

`POST /v1/audio/speech` on the model's own endpoint and key (OPENAI_BASE_URL, OPENAI_API_KEY)
with `response_format: "opus"` (Ogg/Opus, what WhatsApp plays as a voice note), the model
VOICE_OPENAI_MODEL and the voice VOICE_OPENAI_VOICE (OpenAI's voices speak every language the
fixed replies know). The endpoint refuses input over 4,096 characters; VOICE_MAX_CHARS keeps
replies below it, and a refusal sends the reply as text (None here). Rate limits and server
errors are retried on the turn's backoff, as the model's own calls are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memagent.errors import ModelRejected
from memagent.observability import count, logger

if TYPE_CHECKING:
    from memagent.model.client import ModelClient

MAX_INPUT_CHARS = 4096  # CreateSpeechRequest.input's maxLength (OpenAI's OpenAPI document)
# CreateSpeechRequest.voice's built-in voices
OPENAI_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip


class OpenAISpeech:
    """Text to a voice note through the model's OpenAI endpoint."""

    def __init__(self, model: ModelClient, *, speech_model: str, voice: str):
        self._model = model
        self.speech_model = speech_model
        self.voice = voice

    def synthesize(self, text: str, language: str | None) -> bytes | None:
        """The text spoken as Ogg/Opus; None when the endpoint refuses it for good (the reply
        then goes as text). `language` is not asked for: the voices speak the text's own."""
        try:
            response = self._model.on_model_endpoint(
                "speech",
                lambda client: client.audio.speech.create(
                    model=self.speech_model,
                    voice=self.voice,
                    input=text,
                    response_format="opus",
                ),
            )
        except ModelRejected as error:
            count("SpeechRefused")
            logger.warning(
                "the speech endpoint refused the reply; sent as text", extra={"error": str(error)}
            )
            return None
        count("SpeechSynthesized")
        return bytes(response.content) or None
