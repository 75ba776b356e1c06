"""The Meta WhatsApp Cloud API adapter: everything Meta-specific lives here and nowhere else.

Written against Meta's public documentation (what the agent relies on: docs/meta.md) and the
payloads in the `pywa` library's test fixtures. In three parts:

- parser: the webhook (signature, subscription check), a notification cut into queued units, a
  queued unit read back as a domain event;
- identity: who a payload is about (BSUID or phone, and identity changes);
- graph: the Graph API client (replies, read receipts, media) and its error codes.

This face names what the rest of the package uses, each imported from its module on first use
(memagent.face): the webhook's ingress loads the parser, never the Graph client. An adapter is
imported only where its provider is served (memagent.providers.configured, the webhook's ingress).
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.providers.meta.graph import MEDIA_ORIGINS, OPTED_OUT_CODES, RETRY_CODES
    from memagent.providers.meta.graph import TEMPLATE_CODES, TOKEN_CODES, WINDOW_CLOSED
    from memagent.providers.meta.graph import GraphClient, GraphError
    from memagent.providers.meta.identity import BSUID, IDENTITY_CHANGES, PHONE, identities
    from memagent.providers.meta.parser import HEADER_SIGNATURE, MESSAGE, PREFERENCE, STATUS
    from memagent.providers.meta.parser import Envelope, Notification, answer_challenge
    from memagent.providers.meta.parser import check_signature_header, parse_event
    from memagent.providers.meta.parser import parse_notification, sign, verify_signature

face(__name__)
