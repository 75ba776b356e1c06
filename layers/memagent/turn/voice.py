"""Voice replies (issue 43): a reply spoken, sent as one voice note, its text kept in memory.

Who gets one (`speaks`): the operator's VoiceReplies (`off`, the default; `mirror`: a voice note
is answered with a voice note; `always`) and the person's own choice ("answer in voice", "text
please": memagent.turn.keywords, kept on their state as `voice_choice`), where the provider sends
audio (Meta; whasp's contract is text only), for a reply without options to tap, no longer than
VOICE_MAX_CHARS and within the person's VOICE_DAILY_CHARS. The reply's turn records `voice`, so a
redelivery sends it the same way, and the day's budget counts its characters
(memagent.memory.budget).

Sending it once (`send_voice`): the text is synthesized (Polly: memagent.aws.speech; or OpenAI's
speech endpoint, VOICE_SPEECH=openai: memagent.model.speech) and uploaded
(the provider's media endpoint); the media id is recorded on the event's ledger entry before the
audio message goes out, under the reply's send key as part 0. A crash before the record uploads
again (a second copy at the provider, never a second message); after it, the redelivery sends
the recorded media id; after the send, the part is recorded as a text part is
(memagent.turn.delivery). A synthesis or upload refused for good sends the text instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from memagent.errors import SendRejected
from memagent.observability import count, logger
from memagent.turn.language import language_of

if TYPE_CHECKING:
    from memagent.memory import Choices, PersonState
    from memagent.providers import InboundMessage
    from memagent.turn.crew import Crew
    from memagent.turn.settings import ConsumerSettings

MODES = ("off", "mirror", "always")


VOICE_NOTE = "audio"  # InboundMessage.kind of a voice note


def speaks(
    settings: ConsumerSettings,
    state: PersonState,
    flags: dict[str, Any],
    message: InboundMessage,
    text: str,
    choices: Choices | None,
) -> bool:
    """Whether this reply goes as a voice note (see the module docstring)."""
    if settings.voice_replies == "off" or settings.provider != "meta" or choices is not None:
        return False
    choice = flags.get("voice_choice", state.voice_choice)
    if choice == "text":
        return False
    wanted = choice == "voice" or settings.voice_replies == "always" or message.kind == VOICE_NOTE
    if not wanted:
        return False
    if len(text) > settings.voice_max_chars:
        count("VoiceRepliesTooLong")
        return False
    daily = settings.voice_daily_chars
    if daily and state.day_voice_chars + len(text) > daily:
        count("VoiceBudgetReached")
        logger.info("the person's voice characters for the day are spent: sent as text")
        return False
    return True


def send_voice(
    crew: Crew,
    pk: str,
    event_id: str,
    sender: str,
    to: str,
    text: str,
    key: str,
) -> str | None:
    """Send the reply as one voice note, in the voice of the language it is written in; its
    message id, or None when it cannot be spoken or uploaded (the caller sends the text)."""
    if crew.speech is None:
        return None
    entry = crew.store.ledger(pk, event_id) or {}
    media_id = entry.get("voice_media")
    if media_id is None:
        audio = crew.speech.synthesize(text, language_of(text))
        if audio is None:
            return None
        try:
            media_id = crew.provider.upload_voice(sender=sender, audio=audio)
        except SendRejected as error:
            count("VoiceUploadRefused")
            logger.warning(
                "voice note upload refused: sent as text", extra={"http_status": error.status}
            )
            return None
        if media_id is None:
            return None
        crew.store.record_voice(pk, event_id, media_id)
    sent = crew.provider.send_voice(sender=sender, to=to, media_id=str(media_id), key=key)
    count("VoiceRepliesSent")
    logger.info("reply sent as a voice note", extra={"chars": len(text)})
    return sent or "sent"
