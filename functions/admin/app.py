"""Admin Lambda: the operator's seat, behind two doors (memagent/operator/doors.py): AdminApi
(AWS_IAM: scripts, the CLI) and, with OperatorConsole=true, ConsoleApi (the user pool's JWT: the
console a support team signs in to, whose page is GET / there). The same routes behind both:

GET    /people/{id}                    export everything held about the person (JSON)
DELETE /people/{id}                    forget the person; a receipt without content
GET    /people/{id}/conversation       recent messages, summary, facts, handoff state
GET    /people/{id}/facts              the facts, with their ids and dates
POST   /people/{id}/facts              add a fact: {"text": "..."}
PUT    /people/{id}/facts/{fact}       correct a fact: {"text": "..."}
DELETE /people/{id}/facts/{fact}       delete a fact
PUT    /people/{id}/summary            replace the summary: {"text": "...", "based_on": at}
POST   /people/{id}/handoff            a human takes the chat over
DELETE /people/{id}/handoff            hand the chat back to the agent
POST   /people/{id}/messages           the operator writes: {"text": "..."}, Idempotency-Key
POST   /people/{id}/templates          an approved template (Meta), even outside the 24-hour
                                       window: {"name", "language", "parameters": [...]},
                                       Idempotency-Key
GET    /templates                      the approved templates (Meta, MetaWabaId; cached)
GET    /handoffs                       who is waiting for a human, oldest first
GET    /conversations                  who wrote most recently (ConsoleApi only; else 404)
GET    /people/{id}/follow-ups         the person's pending follow-ups
POST   /people/{id}/follow-ups         schedule one: {"when": ..., "about": ...}, Idempotency-Key
DELETE /people/{id}/follow-ups/{id}    cancel one

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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext
from botocore.exceptions import BotoCoreError, ClientError

from memagent.aws import FollowUpSchedules, KeptMedia, OperatorEvents, TranscriptArchive
from memagent.errors import (
    ConcurrentUpdate,
    ConfigurationError,
    EditConflict,
    InvalidEdit,
    ScheduleRefused,
    SecretUnavailable,
    SendRejected,
    TransientError,
    UnknownPerson,
    WindowClosed,
)
from memagent.lifecycle import audit, export, forget
from memagent.lifecycle import audit_trail as actions
from memagent.memory import person_key
from memagent.observability import logger, metrics
from memagent.operator import (
    AdminSettings,
    Caller,
    Operator,
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
)
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


def _audited(action: str, raw: str | None, run: Callable[[str], dict[str, Any]]) -> Any:
    """Run one admin action and write its one audit line, however it ends."""
    caller = _caller()
    who = unquote(raw).strip() if raw is not None else ""
    person = None
    if caller is None or not caller.may(action):  # fail closed: no caller, or not their group
        audit(action, caller=caller, person=None, outcome="refused")
        if caller is None:
            return _error(403, "no caller: this route is served only behind an authorizer")
        return _error(403, f"your group may not do this ({action}): it needs {needed_for(action)}")
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


def _rights(call: Callable[..., Any], **media: Any) -> Callable[[str], Any]:
    """An export or an erasure of the person `who` names (the archive, legacy keys included)."""
    return lambda who: call(
        store,
        settings.agent_id,
        who,
        archive=archive,
        legacy_keys=settings.legacy_person_keys,
        **media,
    )


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


@app.get("/people/<id>")
def get_person(id: str) -> Any:
    return _audited(actions.EXPORT, id, _rights(export, kept_media=media))


@app.delete("/people/<id>")
def delete_person(id: str) -> Any:
    erase = _rights(forget, media=media, schedules=operator.schedules)
    return _audited(actions.ERASE, id, lambda who: erase(who).as_dict())


# The routes that are one call of the operator's seat: (method, path, audit action, the call,
# given the person's identifier and the path's other parameters)
SEAT_ROUTES: list[tuple[str, str, str, Callable[..., dict[str, Any]]]] = [
    ("GET", "/people/<id>/conversation", actions.READ, operator.conversation),
    ("GET", "/people/<id>/facts", actions.READ, operator.facts),
    ("POST", "/people/<id>/facts", actions.FACT_ADD, lambda who: operator.add_fact(who, _body())),
    (
        "PUT",
        "/people/<id>/facts/<fact>",
        actions.FACT_CORRECT,
        lambda who, fact: operator.correct_fact(who, fact, _body()),
    ),
    (
        "DELETE",
        "/people/<id>/facts/<fact>",
        actions.FACT_DELETE,
        lambda who, fact: operator.delete_fact(who, fact),
    ),
    (
        "PUT",
        "/people/<id>/summary",
        actions.SUMMARY_REPLACE,
        lambda who: operator.replace_summary(who, _body()),
    ),
    (
        "POST",
        "/people/<id>/handoff",
        actions.HANDOFF_START,
        lambda who: operator.take_over(who, by=_name()),
    ),
    ("DELETE", "/people/<id>/handoff", actions.HANDOFF_END, operator.hand_back),
    ("GET", "/people/<id>/follow-ups", actions.READ, operator.follow_ups),
    (
        "POST",
        "/people/<id>/follow-ups",
        actions.FOLLOW_UP_ADD,
        lambda who: operator.schedule_follow_up(
            who, _body(), app.current_event.headers.get("idempotency-key")
        ),
    ),
    (
        "DELETE",
        "/people/<id>/follow-ups/<follow_up>",
        actions.FOLLOW_UP_CANCEL,
        lambda who, follow_up: operator.cancel_follow_up(who, follow_up),
    ),
]


def _seat_route(action: str, call: Callable[..., dict[str, Any]]) -> Callable[..., Any]:
    def route(id: str, **params: str) -> Any:
        return _audited(action, id, lambda who: call(who, **params))

    return route


for _method, _path, _action, _call in SEAT_ROUTES:
    app.route(_path, _method)(_seat_route(_action, _call))


@app.post("/people/<id>/messages")
def reply(id: str) -> Any:
    key = app.current_event.headers.get("idempotency-key")
    # the reply's claim on its send holds until this invocation ends (a request that dies
    # holds it no longer: a retry then takes it over)
    left = timedelta(milliseconds=app.lambda_context.get_remaining_time_in_millis())
    deadline = datetime.now(UTC) + left
    return _audited(
        actions.REPLY, id, lambda who: operator.reply(who, _body(), key, deadline=deadline)
    )


@app.post("/people/<id>/templates")
def send_template(id: str) -> Any:
    key = app.current_event.headers.get("idempotency-key")
    left = timedelta(milliseconds=app.lambda_context.get_remaining_time_in_millis())
    deadline = datetime.now(UTC) + left
    return _audited(
        actions.TEMPLATE_SEND,
        id,
        lambda who: operator.send_template(who, _body(), key, deadline=deadline),
    )


@app.get("/templates")
def templates() -> Any:
    return _audited(actions.LIST_TEMPLATES, None, lambda _who: operator.templates())


@app.get("/handoffs")
def handoffs() -> Any:
    return _audited(actions.LIST_HANDOFFS, None, lambda _who: operator.waiting())


@app.get("/outcomes")
def outcomes() -> Any:
    query = app.current_event.query_string_parameters or {}
    return _audited(
        actions.LIST_OUTCOMES,
        None,
        lambda _who: operator.outcomes(query.get("from"), query.get("to")),
    )


@app.get("/conversations")
def recent() -> Any:
    return _audited(actions.LIST_RECENT, None, lambda _who: operator.recent())


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
