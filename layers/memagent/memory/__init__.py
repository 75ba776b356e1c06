"""What we keep per person, as plain data (types), and the pure rules read from it:
whose memory it is (person keys), their clock, the model's context, the facts' screening and
the day's budget. No I/O: tests call it without any outside system.

Modules other wings import whole: `clock`.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.memory.budget import converts, counted, day_of, exhausted, stack_budget
    from memagent.memory.clock import day, is_zone, person_zone
    from memagent.memory.context import Context, build_context
    from memagent.memory.facts import cap_facts, fact_key, key_of, looks_like_instruction, normalise
    from memagent.memory.facts import plain, screen_facts, screen_summary
    from memagent.memory.person import LOCAL_PERSON_KEY, agent_key, digest, internal_signature
    from memagent.memory.person import legacy_key, person_key, person_key_secret, read_person_key
    from memagent.memory.person import signed_by_stack
    from memagent.memory.recent import recent_keys, shards
    from memagent.memory.settings import FOLLOW_UP_MAX_PENDING, RECENT_CONVERSATIONS, MemorySettings
    from memagent.memory.types import Choices, Epoch, Fact, Handoff, Kind, Memory, PersonState
    from memagent.memory.types import Summary, Turn, classed

face(__name__)
