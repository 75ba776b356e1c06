"""DynamoDB: the only wing that touches the memory table. `memory_store` (MemoryStore)
has the key schema and the turn's one Query; its writes are in parts: turn, ledger, person,
handoff, compaction, erasure, operator, all built on table's keys and conditional writes.

Modules other wings import whole: `ledger`.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.store.erasure import KEPT_ON_ERASURE
    from memagent.store.follow_ups import DUE, FOLLOW_UP_FOR_HUMAN, follow_up_view
    from memagent.store.handoff import claim_holds
    from memagent.store.ledger import PART, SENDING, SENT, STORED, Standing, sent_parts
    from memagent.store.memory_store import MemoryStore, handoff_of
    from memagent.store.operator import OperatorStore
    from memagent.store.outcomes import COUNTERS
    from memagent.store.table import ALIAS, EVT, FACT, MSG, STATE, SUMMARY, TRANSACTION_LIMIT
    from memagent.store.table import from_iso, iso

face(__name__)
