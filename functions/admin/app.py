"""Admin Lambda: the operator's seat, behind two doors (memagent/operator/doors.py): AdminApi
(AWS_IAM: scripts, the CLI) and, with OperatorConsole=true, ConsoleApi (the user pool's JWT: the
console a support team signs in to, whose page is GET / there). The same routes behind both.

memagent/operator/routes.py declares every route (method, path, the group that may use it, its
audit action, the CLI's verb, what it does): this module serves its rows, and docs/admin-api.yaml
describes them.

Each request writes one audit line (memagent.lifecycle.audit_trail): the caller (the IAM ARN, or
the operator's user pool username and sub), the action, the person's hashed key, the time and the
outcome; never content. Bad input is a 400 saying what is wrong, an operator whose group may not
do it (an `operators` member erasing) a 403, an unknown person or fact a 404, a refused edit a
409, Meta's closed 24-hour window 422.

`{id}` is any of the person's identifiers: a phone in E.164, or a Meta business-scoped user id.

A reply needs a take-over first: POST .../messages while no handoff is in force (never taken, handed
back, or HandoffTimeoutHours passed without an operator reply) is a 409 "take the chat over first",
and nothing is stored or sent; a retry of a reply already stored (same person, same Idempotency-Key)
still finishes it. Two requests with one key at once: one sends, the other is a 409 "being sent"
(retried, it answers the first's result). See memagent/operator/handoff.py.
"""

import json
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from memagent.aws import (
    EventQueue,
    FollowUpSchedules,
    KeptMedia,
    OperatorEvents,
    TranscriptArchive,
)
from memagent.errors import (
    ConcurrentUpdate,
    ConfigurationError,
    EditConflict,
    InvalidEdit,
    QueueUnavailable,
    ScheduleRefused,
    SecretUnavailable,
    SendRejected,
    TransientError,
    UnknownPerson,
    WindowClosed,
)
from memagent.lifecycle import Elsewhere, audit, export, forget
from memagent.memory import person_key
from memagent.observability import logger, metrics
from memagent.operator import (
    ROUTES,
    AdminSettings,
    Caller,
    Operator,
    Route,
    TemplateCatalog,
    caller_of,
    identifier,
    needed_for,
    page,
)
from memagent.providers import provider_from_settings, template_listing
from memagent.store import OperatorStore

settings = AdminSettings.from_env()
store = OperatorStore(settings.table_name)
archive = TranscriptArchive(settings.archive_bucket) if settings.archive_bucket else None
media = KeptMedia(settings.media_bucket) if settings.media_bucket else None
operator = Operator(
    settings,
    store,
    events=OperatorEvents(settings.operator_event_bus, settings.agent_id),
    provider=(lambda: provider_from_settings(settings)[0]) if settings.sends else None,
    meta=settings.provider == "meta",
    schedules=FollowUpSchedules(
        settings.follow_up_group,
        settings.follow_up_role_arn or "",
        settings.follow_up_queue_url or "",
        dead_letter_arn=settings.follow_up_dead_letter_arn,
    )
    if settings.follow_up_group
    else None,
    templates=TemplateCatalog(
        template_listing(settings, settings.meta_waba_id), settings.template_cache_seconds
    )
    if settings.sends and settings.provider == "meta" and settings.meta_waba_id
    else None,
    questions=EventQueue(settings.csat_queue_url) if settings.csat_queue_url else None,
)
elsewhere = Elsewhere(archive=archive, media=media, schedules=operator.schedules)
app = APIGatewayHttpResolver()

# typed errors -> (status, outcome); the first match wins (WindowClosed is a SendRejected)
ERRORS: tuple[tuple[type[Exception], int, str], ...] = (
    (InvalidEdit, 400, "refused"),
    (UnknownPerson, 404, "refused"),
    (EditConflict, 409, "refused"),
    (ConcurrentUpdate, 409, "refused"),  # lost every race to the person's own messages
    (WindowClosed, 422, "refused"),
    (SendRejected, 502, "failed"),
    (TransientError, 503, "failed"),
    (SecretUnavailable, 503, "failed"),
    (ConfigurationError, 503, "failed"),
    (ScheduleRefused, 503, "failed"),  # nothing scheduled or cancelled
    (QueueUnavailable, 503, "failed"),  # the CSAT question not queued: the hand-back's retry does
    # any other AWS error (a refused grant, throttling after botocore's retries, no answer):
    # the action did not finish, and every one is safe to ask again
    (ClientError, 503, "failed"),
    (BotoCoreError, 503, "failed"),
)
AWS_ERRORS = (ScheduleRefused, ClientError, BotoCoreError)  # their audit line names the code
WINDOW_CLOSED = (
    "Meta's 24-hour customer-service window is closed (code 131047): the person last wrote "
    "over 24 hours ago, and only an approved template can be sent until they write again"
)


def _caller() -> Caller | None:
    """Who API Gateway let through: an IAM ARN (AdminApi) or a signed-in operator (ConsoleApi)."""
    return caller_of(app.current_event.get("requestContext") or {})


def _name() -> str | None:
    """Who the caller is, as the console shows it (the operator's username, or the ARN)."""
    caller = _caller()
    return caller.name if caller else None


def _error(status: int, message: str) -> Response:
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body={"error": message}
    )


def _message(error: Exception) -> str:
    if isinstance(error, WindowClosed):
        return WINDOW_CLOSED
    if isinstance(error, ConcurrentUpdate):
        return "the memory kept changing meanwhile; try again (with the same Idempotency-Key)"
    if isinstance(error, TransientError | SecretUnavailable):
        return "the provider or AWS is unavailable; try again (with the same Idempotency-Key)"
    if isinstance(error, ScheduleRefused):
        return (
            f"{error}: nothing was scheduled or cancelled; try again later (with the same "
            "Idempotency-Key)"
        )
    if isinstance(error, ClientError | BotoCoreError):
        return f"an AWS request failed ({_aws_code(error)}): the action did not finish; try again"
    return str(error)


def _aws_code(error: Exception) -> str:
    """What an AWS error is, without its message (which may quote the request): the error
    code AWS answered, or, with no answer, the botocore error's kind."""
    if isinstance(error, ClientError):
        return str(error.response.get("Error", {}).get("Code") or "Unknown")
    if isinstance(error, ScheduleRefused):
        return error.code
    return type(error).__name__


def _body() -> dict[str, Any]:
    try:
        body = json.loads(app.current_event.decoded_body or "{}")
    except (ValueError, RecursionError):  # nesting past the parser's limit: no 500
        raise InvalidEdit("the body must be JSON, nested at most a few levels") from None
    if not isinstance(body, dict):
        raise InvalidEdit("the body must be a JSON object")
    return body


def _audited(route: Route, raw: str | None, run: Callable[[str], dict[str, Any]]) -> Any:
    """Run one admin route and write its one audit line, however it ends."""
    action = route.action
    caller = _caller()
    who = unquote(raw).strip() if raw is not None else ""
    person = None
    if caller is None or not caller.may(route.group):  # fail closed: no caller, or not their group
        audit(action, caller=caller, person=None, outcome="refused")
        if caller is None:
            return _error(403, "no caller: this route is served only behind an authorizer")
        return _error(
            403, f"your group may not do this ({action}): it needs {needed_for(route.group)}"
        )
    try:
        if raw is not None:
            who = identifier(who)
            person = person_key(settings.agent_id, who)
        result = run(who)
    except Exception as error:
        for kind, status, outcome in ERRORS:
            if isinstance(error, kind):
                reason = _aws_code(error) if isinstance(error, AWS_ERRORS) else None
                audit(action, caller=caller, person=person, outcome=outcome, reason=reason)
                return _error(status, _message(error))
        audit(action, caller=caller, person=person, outcome="failed")
        raise
    audit(action, caller=caller, person=result.get("person", person), outcome="done")
    return result


class _Seat:
    """What the routes act through: the operator's seat, and a person's export and erasure
    (the archive and kept media, legacy keys included)."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator

    def export(self, who: str) -> dict[str, Any]:
        return _whole(export, who)

    def erase(self, who: str) -> dict[str, Any]:
        return _whole(forget, who).as_dict()


_T = TypeVar("_T")


def _whole(act: Callable[..., _T], who: str) -> _T:
    """`act` (export or forget) on the person, with what they have elsewhere and under a legacy
    key."""
    return act(
        store, settings.agent_id, who, elsewhere=elsewhere, legacy_keys=settings.legacy_person_keys
    )


class _Request:
    """The request being served, as a route's handler reads it (routes.Request)."""

    def __init__(self, who: str, params: Mapping[str, str]) -> None:
        self.who = who
        self.params = params

    def body(self) -> dict[str, Any]:
        return _body()

    def key(self) -> str | None:
        return app.current_event.headers.get("idempotency-key")

    def caller(self) -> str | None:
        return _name()

    def query(self, name: str) -> str | None:
        return (app.current_event.query_string_parameters or {}).get(name)

    def deadline(self) -> datetime:
        left = timedelta(milliseconds=app.lambda_context.get_remaining_time_in_millis())
        return datetime.now(UTC) + left


seat = _Seat(operator)


@app.get("/")
def console_page() -> Response:
    """The console's page (ConsoleApi, OperatorConsole=true): no data in it; it signs in."""
    if not settings.console_client_id:
        return _error(404, "no console: OperatorConsole is false")
    login = settings.console_login_url or ""
    html, headers = page(
        {"door": "user-pool", "login": login, "client": settings.console_client_id},
        connect=(login,),
    )
    return Response(
        status_code=200, content_type=headers["Content-Type"], body=html, headers=headers
    )


def _serve(route: Route) -> Callable[..., Any]:
    def serve(**params: str) -> Any:
        raw = params.pop("id", None)
        return _audited(route, raw, lambda who: route.handler(seat, _Request(who, params)))

    return serve


for _route in ROUTES:
    app.route(_route.resolver_path, _route.method)(_serve(_route))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
