"""Every admin route, declared once: its method and path, the group that may use it, its audit
action, the CLI's verb and what it does. functions/admin/app.py serves exactly these rows (and
the console's page, GET /, which is no API route); scripts/people.py builds its operator verbs
from them; tests hold docs/admin-api.yaml and docs/operator.md to them.

A new route is a row here, its domain call (reading.py, edits.py, handoff.py), its path in
docs/admin-api.yaml and its test (CONTRIBUTING.md): both APIs reach the function on /{proxy+}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from memagent.errors import InvalidEdit
from memagent.lifecycle import audit_trail as actions
from memagent.operator.doors import ADMINS, GROUPS, OPERATORS

if TYPE_CHECKING:
    from memagent.operator.reading import Operator


class Seat(Protocol):
    """What a route's handler acts through (functions/admin/app.py builds it once)."""

    operator: Operator

    def export(self, who: str) -> dict[str, Any]: ...

    def erase(self, who: str) -> dict[str, Any]: ...


class Request(Protocol):
    """One request as a handler sees it. `who`: the person's identifier, resolved ("" on a
    route without `{id}`); `params`: the path's other parameters."""

    who: str
    params: Mapping[str, str]

    def body(self) -> dict[str, Any]:
        """The JSON object sent (InvalidEdit, a 400, for anything else)."""
        ...

    def key(self) -> str | None:
        """The Idempotency-Key header."""
        ...

    def caller(self) -> str | None:
        """Who is calling, as the console shows it (username or ARN)."""
        ...

    def query(self, name: str) -> str | None:
        """A query string parameter."""
        ...

    def deadline(self) -> datetime:
        """When this invocation ends."""
        ...


Handler = Callable[[Seat, Request], dict[str, Any]]


@dataclass(frozen=True)
class Route:
    """`path` as API Gateway and docs/admin-api.yaml spell it ({id}); `group`: the least group
    that may use it (admins may use every route); `verb`: the CLI's (scripts/people.py), None
    where the CLI has none. Both doors serve every row (each API reaches the function on
    /{proxy+})."""

    method: str
    path: str
    group: str
    action: str
    handler: Handler
    verb: str | None = None

    def __post_init__(self) -> None:
        # fail closed, at import: a route nobody's group was chosen for is not served to anyone
        if self.group not in GROUPS:
            raise ValueError(f"{self.method} {self.path}: group {self.group!r}, not {set(GROUPS)}")
        if not self.action:
            raise ValueError(f"{self.method} {self.path}: no audit action")
        if self.method not in ("GET", "POST", "PUT", "DELETE"):
            raise ValueError(f"{self.method} {self.path}: not a method the admin API serves")

    @property
    def resolver_path(self) -> str:
        """The path as Powertools' resolver spells it (/people/<id>)."""
        return self.path.replace("{", "<").replace("}", ">")


ROUTES: tuple[Route, ...] = (
    # a person's rights (export also in the CLI, through boto3: scripts/people.py)
    Route("GET", "/people/{id}", ADMINS, actions.EXPORT, lambda seat, r: seat.export(r.who)),
    Route("DELETE", "/people/{id}", ADMINS, actions.ERASE, lambda seat, r: seat.erase(r.who)),
    # reading
    Route(
        "GET",
        "/people/{id}/conversation",
        OPERATORS,
        actions.READ,
        lambda seat, r: seat.operator.conversation(r.who),
        verb="conversation",
    ),
    Route(
        "GET",
        "/people/{id}/facts",
        OPERATORS,
        actions.READ,
        lambda seat, r: seat.operator.facts(r.who),
        verb="facts",
    ),
    Route(
        "GET",
        "/handoffs",
        OPERATORS,
        actions.LIST_HANDOFFS,
        lambda seat, r: seat.operator.waiting(),
        verb="waiting",
    ),
    Route(
        "GET",
        "/outcomes",
        OPERATORS,
        actions.LIST_OUTCOMES,
        lambda seat, r: seat.operator.outcomes(r.query("from"), r.query("to")),
        verb="outcomes",
    ),
    Route(
        "GET",
        "/conversations",
        OPERATORS,
        actions.LIST_RECENT,
        lambda seat, r: seat.operator.recent(),
    ),
    # editing the memory
    Route(
        "POST",
        "/people/{id}/facts",
        OPERATORS,
        actions.FACT_ADD,
        lambda seat, r: seat.operator.add_fact(r.who, r.body()),
        verb="add-fact",
    ),
    Route(
        "PUT",
        "/people/{id}/facts/{fact}",
        OPERATORS,
        actions.FACT_CORRECT,
        lambda seat, r: seat.operator.correct_fact(r.who, r.params["fact"], r.body()),
        verb="correct-fact",
    ),
    Route(
        "DELETE",
        "/people/{id}/facts/{fact}",
        OPERATORS,
        actions.FACT_DELETE,
        lambda seat, r: seat.operator.delete_fact(r.who, r.params["fact"]),
        verb="delete-fact",
    ),
    Route(
        "PUT",
        "/people/{id}/summary",
        OPERATORS,
        actions.SUMMARY_REPLACE,
        lambda seat, r: seat.operator.replace_summary(r.who, r.body()),
        verb="summary",
    ),
    # the chat: take over, reply, hand back
    Route(
        "POST",
        "/people/{id}/handoff",
        OPERATORS,
        actions.HANDOFF_START,
        lambda seat, r: seat.operator.take_over(r.who, by=r.caller()),
        verb="take-over",
    ),
    Route(
        "DELETE",
        "/people/{id}/handoff",
        OPERATORS,
        actions.HANDOFF_END,
        lambda seat, r: seat.operator.hand_back(r.who, csat=_flag(r.query("csat"), "csat")),
        verb="hand-back",
    ),
    Route(
        "POST",
        "/people/{id}/messages",
        OPERATORS,
        actions.REPLY,
        # the reply's claim on its send holds until this invocation ends (a request that dies
        # holds it no longer: a retry then takes it over)
        lambda seat, r: seat.operator.reply(r.who, r.body(), r.key(), deadline=r.deadline()),
        verb="say",
    ),
    # Meta's approved templates
    Route(
        "GET",
        "/templates",
        OPERATORS,
        actions.LIST_TEMPLATES,
        lambda seat, r: seat.operator.templates(),
        verb="templates",
    ),
    Route(
        "POST",
        "/people/{id}/templates",
        OPERATORS,
        actions.TEMPLATE_SEND,
        # even outside the 24-hour window; its claim on its send holds as a reply's does
        lambda seat, r: seat.operator.send_template(
            r.who, r.body(), r.key(), deadline=r.deadline()
        ),
        verb="send-template",
    ),
    # follow-ups
    Route(
        "GET",
        "/people/{id}/follow-ups",
        OPERATORS,
        actions.READ,
        lambda seat, r: seat.operator.follow_ups(r.who),
        verb="follow-ups",
    ),
    Route(
        "POST",
        "/people/{id}/follow-ups",
        OPERATORS,
        actions.FOLLOW_UP_ADD,
        lambda seat, r: seat.operator.schedule_follow_up(r.who, r.body(), r.key()),
        verb="schedule-follow-up",
    ),
    Route(
        "DELETE",
        "/people/{id}/follow-ups/{follow_up}",
        OPERATORS,
        actions.FOLLOW_UP_CANCEL,
        lambda seat, r: seat.operator.cancel_follow_up(r.who, r.params["follow_up"]),
        verb="cancel-follow-up",
    ),
)


def _flag(value: str | None, name: str) -> bool | None:
    """A query string's true or false (None: not given, the setting decides)."""
    if value is None:
        return None
    if value not in ("true", "false"):
        raise InvalidEdit(f'"{name}" must be true or false')
    return value == "true"


def _one_each(routes: tuple[Route, ...]) -> None:
    seen: set[tuple[str, str]] = set()
    verbs: set[str] = set()
    for route in routes:
        if (route.method, route.path) in seen:
            raise ValueError(f"{route.method} {route.path} is declared twice")
        if route.verb in verbs:
            raise ValueError(f"the CLI verb {route.verb} names two routes")
        seen.add((route.method, route.path))
        verbs |= {route.verb} if route.verb else set()


_one_each(ROUTES)
