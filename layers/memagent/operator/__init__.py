"""The operator's seat (functions/admin): reading a person's memory, editing it by hand
(edits), taking the chat and handing it back (handoff); `seat` holds what each starts from.

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__, {"reading": ["Operator"], "seat": ["identifier"], "settings": ["AdminSettings"]}
)
