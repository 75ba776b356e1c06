"""The webhook's side of a message: verify the provider's signature, cut the body into
events, enqueue each on the person's FIFO group (functions/webhook). No model code on this
path: only the configured provider's module is imported.

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__, {"ingress": ["challenge", "receive"], "settings": ["WebhookSettings"]}
)
