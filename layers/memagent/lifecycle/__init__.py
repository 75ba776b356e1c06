"""A person's rights over what we keep: erasure, export and the silent person's
expiry (rights); memory kept under a pre-keyed person key carried over (upgrade); the audit
line every erasure, export and operator action leaves (audit_trail).

Modules other wings import whole: `audit_trail`.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.lifecycle.audit_trail import ERASE, audit
    from memagent.lifecycle.csat import CSAT, csat_body, csat_event_id, csat_fields
    from memagent.lifecycle.follow_ups import FOLLOW_UP, FollowUpRefused, Target, ask
    from memagent.lifecycle.rights import Elsewhere, Receipt, expire, expired_by_ttl, export, forget
    from memagent.lifecycle.rights import forget_key, left_by_ttl, left_half_done, resolve
    from memagent.lifecycle.upgrade import carry_over

face(__name__)
