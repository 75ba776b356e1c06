"""The operator's seat (functions/admin): reading a person's memory, editing it by hand
(edits), taking the chat and handing it back (handoff); `seat` holds what each starts from;
`doors` who is calling and what their group may do; `console` the console's page.

Its face: the names the other wings and the functions use, each imported from its module on
first use (memagent.face).
"""

from memagent import face

__getattr__, __all__ = face(
    __name__,
    {
        "console": ["page"],
        "doors": ["Caller", "caller_of", "needed_for"],
        "reading": ["Operator"],
        "seat": ["identifier"],
        "settings": ["AdminSettings"],
    },
)
