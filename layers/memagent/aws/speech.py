"""Amazon Polly: a reply's text spoken, as the ogg/opus WhatsApp plays as a voice note.

`SynthesizeSpeech` (IAM, no key: the consumer's role alone has polly:SynthesizeSpeech) with
`OutputFormat=ogg_opus`, plain text (no SSML: the text is the model's, and a stray "<" would be
malformed SSML), one voice per language of the fixed replies (each has the standard and neural
engines), the engine a setting (VOICE_ENGINE). Polly refuses more than 3,000 billed characters
(6,000 in all); VOICE_MAX_CHARS keeps replies far below it, and a refusal sends the reply as
text (None here). Throttling and service failures are retried on the turn's backoff.
"""

from __future__ import annotations

from typing import Any

from memagent.errors import TransientError
from memagent.observability import count, logger

# a voice per language of memagent.turn.language (Polly's "Available voices": each has the
# standard and neural engines; "generative" only Matthew and Ruth among these languages' US ones)
VOICES = {
    "en": "Joanna",
    "es": "Lucia",
    "fr": "Lea",
    "pt": "Camila",
    "de": "Vicki",
    "it": "Bianca",
}
MAX_BILLED_CHARS = 3000  # SynthesizeSpeech's limit (TextLengthExceededException)
_RETRIED = frozenset({"ThrottlingException", "ServiceFailureException", "ServiceUnavailable"})


class PollySpeech:
    """Text to a voice note with Amazon Polly; the client is made on first use."""

    def __init__(self, engine: str = "neural", client: Any = None):
        self.engine = engine
        self._polly = client

    def synthesize(self, text: str, language: str | None) -> bytes | None:
        """The text spoken in `language`'s voice as ogg/opus; None when Polly refuses it for
        good (too long, a voice without the engine): the reply then goes as text."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self._polly is None:
            import boto3

            self._polly = boto3.client("polly")
        try:
            response = self._polly.synthesize_speech(
                Engine=self.engine,
                OutputFormat="ogg_opus",
                Text=text,
                TextType="text",
                VoiceId=VOICES.get(language or "en", VOICES["en"]),
            )
            audio = response["AudioStream"].read()
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in _RETRIED or status >= 500:
                raise TransientError(
                    f"Polly answered {code}", dependency="polly", status=status, error=code
                ) from None
            count("SpeechRefused")
            logger.warning("Polly refused the reply; sent as text", extra={"error": code})
            return None
        except BotoCoreError as error:
            raise TransientError(
                f"Polly unreachable: {type(error).__name__}", dependency="polly"
            ) from None
        count("SpeechSynthesized")
        return bytes(audio) or None
