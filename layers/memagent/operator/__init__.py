"""The operator's seat (functions/admin): reading a person's memory, editing it by hand
(edits), taking the chat and handing it back (handoff), Meta's approved templates (templates);
`seat` holds what each starts from; `doors` who is calling and what their group may do; `routes`
every admin route, declared once; `console` the console's page.
"""

from typing import TYPE_CHECKING

from memagent import face

if TYPE_CHECKING:  # the face (memagent.face): what other wings and the functions use
    from memagent.operator.console import page
    from memagent.operator.doors import Caller, caller_of, needed_for
    from memagent.operator.reading import Operator
    from memagent.operator.routes import ROUTES, Route
    from memagent.operator.seat import identifier
    from memagent.operator.settings import AdminSettings
    from memagent.operator.templates import TemplateCatalog

face(__name__)
