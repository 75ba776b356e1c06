"""The messaging providers behind one seam. `seam` is what the turn, the memory and
compaction know of a provider; `whasp` and `meta` are the two adapters (independent: neither
imports the other, import-linter's contract); `configured` builds only the one a stack serves;
`download`, `origins` and `signing` are the rules both adapters share; `void` keeps every send
from the reserved test person (`make smoke`).

Each adapter is a face of its own: another wing imports `memagent.providers.whasp` or
`memagent.providers.meta` directly, and only where that provider is served.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.providers.configured import provider_from_settings, template_listing
    from memagent.providers.origins import Origin, parse_media_origins, parse_origins, url_origin
    from memagent.providers.seam import PERSON_ID, ChatOptedOut, Event, IdentityChanged
    from memagent.providers.seam import InboundMessage, MarketingPreference, NumberReplaced
    from memagent.providers.seam import Provider, ReplyStatus, StaffEcho, TemplateMessage
    from memagent.providers.seam import check_size, idempotency_key, parse_send_key, shorten
    from memagent.providers.seam import split_text
    from memagent.providers.settings import PROVIDERS, ProviderSettings
    from memagent.providers.signing import check_signing_secrets
    from memagent.providers.void import TEST_PERSON, is_test_person

face(__name__)
