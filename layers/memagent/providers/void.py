"""The reserved test person, answered "into the void": what `make smoke` writes as.

`TEST_PERSON` is a number from the North American range reserved for fiction (555-0100 to
555-0199, in every area code: NANPA has never assigned them), so it can never be anybody's
phone. A message from it goes through the whole pipeline as any other (the webhook's signature,
the queue, the memory, the model), and its reply is remembered as usual; only the provider
never hears of it: no send, no read receipt, no typing indicator, so nothing is paid for and
nothing reaches a real chat. This is decided here and only here, around whichever provider the
stack serves (`memagent.providers.configured`), so the consumer's replies, a follow-up, the
goodbye of "forget me" and an operator's message (the admin API) all go the same way.

Logs name neither the number nor what was said: a voided send logs its part's key (which holds
the event id) and that it was voided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memagent.observability import logger

if TYPE_CHECKING:
    from memagent.memory import Choices
    from memagent.providers.seam import InboundMessage, Provider, TemplateMessage

TEST_PERSON = "+12025550173"  # +1 202 555-0173: fictional by NANPA's rule, never a subscriber
VOID_ID = "void"  # the "provider message id" a voided part records


def is_test_person(identifier: str | None) -> bool:
    """The identifier is the reserved test person's (with or without the "+": Meta's wa_id
    form has none)."""
    return bool(identifier) and f"+{str(identifier).removeprefix('+')}" == TEST_PERSON


class IntoTheVoid:
    """The stack's provider, except that nothing goes to the reserved test person."""

    def __init__(self, provider: Provider):
        self._provider = provider

    def send_text(self, *, sender: str, to: str, text: str, key: str) -> str:
        if is_test_person(to):
            return _voided(key)
        return self._provider.send_text(sender=sender, to=to, text=text, key=key)

    def send_choices(self, *, sender: str, to: str, text: str, choices: Choices, key: str) -> str:
        if is_test_person(to):
            return _voided(key)
        return self._provider.send_choices(
            sender=sender, to=to, text=text, choices=choices, key=key
        )

    def send_template(self, *, sender: str, to: str, template: TemplateMessage, key: str) -> str:
        """Meta's approved template (a follow-up outside the 24-hour window)."""
        if is_test_person(to):
            return _voided(key)
        return self._provider.send_template(sender=sender, to=to, template=template, key=key)

    def upload_voice(self, *, sender: str, audio: bytes) -> str | None:
        # an upload reaches nobody (Meta keeps it 30 days, unsent): the send below is voided
        return self._provider.upload_voice(sender=sender, audio=audio)

    def send_voice(self, *, sender: str, to: str, media_id: str, key: str) -> str:
        if is_test_person(to):
            return _voided(key)
        return self._provider.send_voice(sender=sender, to=to, media_id=media_id, key=key)

    def mark_read(self, message: InboundMessage) -> None:
        if any(is_test_person(who) for who in (message.chat, message.address, *message.aliases)):
            return  # the provider never carried this message: there is nothing to mark read
        self._provider.mark_read(message)

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        return self._provider.fetch_media(url, max_bytes=max_bytes)


def _voided(key: str) -> str:
    logger.info("reply part sent into the void: the reserved test person", extra={"key": key})
    return VOID_ID
