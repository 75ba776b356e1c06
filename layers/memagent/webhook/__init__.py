"""The webhook's side of a message: verify the provider's signature, cut the body into
events, enqueue each on the person's FIFO group (functions/webhook). No model code on this
path: only the configured provider's module is imported.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.webhook.ingress import challenge, receive
    from memagent.webhook.settings import WebhookSettings

face(__name__)
