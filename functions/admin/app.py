"""Admin Lambda: a person's rights, for operators. HTTP API with AWS_IAM authorization.

GET    /people/{phone}   export everything held about the person (JSON)
DELETE /people/{phone}   forget the person; returns a receipt without content

Each request writes one audit line (memagent.audit): the caller's IAM ARN, the action, the
person's hashed key, the time and the outcome.

`{phone}` is any of the person's identifiers: a phone in E.164, or a Meta business-scoped user id.
"""

from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.archive import KeptMedia, TranscriptArchive
from memagent.audit import ERASE, EXPORT, audit
from memagent.lifecycle import export, forget
from memagent.observability import logger, metrics
from memagent.person import person_key
from memagent.provider import PERSON_ID
from memagent.settings import MemorySettings
from memagent.store import MemoryStore

settings = MemorySettings.from_env()
store = MemoryStore(settings.table_name)
archive = TranscriptArchive(settings.archive_bucket) if settings.archive_bucket else None
media = KeptMedia(settings.media_bucket) if settings.media_bucket else None
app = APIGatewayHttpResolver()


def _phone(raw: str) -> str | None:
    phone = unquote(raw).strip()
    return phone if PERSON_ID.match(phone) else None


def _invalid() -> Response:
    return Response(
        status_code=400,
        content_type=content_types.APPLICATION_JSON,
        body={
            "error": "phone must be E.164, e.g. +447700900123 (URL-encode the +), "
            "or a Meta business-scoped user id, e.g. US.13491208655302741918"
        },
    )


def _caller() -> str | None:
    """The IAM ARN that signed the request (HTTP API AWS_IAM authorizer)."""
    iam = app.current_event.get("requestContext", {}).get("authorizer", {}).get("iam") or {}
    return iam.get("userArn")


def _audited(action: str, raw: str, run: Callable[[str], dict[str, Any]]) -> Any:
    """Run one admin action and write its one audit line, however it ends."""
    caller, identifier = _caller(), _phone(raw)
    if identifier is None:
        audit(action, caller=caller, person=None, outcome="refused")
        return _invalid()
    try:
        result = run(identifier)
    except Exception:
        audit(
            action,
            caller=caller,
            person=person_key(settings.agent_id, identifier),
            outcome="failed",
        )
        raise
    audit(action, caller=caller, person=result["person"], outcome="done")
    return result


@app.get("/people/<phone>")
def get_person(phone: str):
    return _audited(
        EXPORT,
        phone,
        lambda person: export(store, settings.agent_id, person, archive=archive, kept_media=media),
    )


@app.delete("/people/<phone>")
def delete_person(phone: str):
    return _audited(
        ERASE,
        phone,
        lambda person: forget(
            store, settings.agent_id, person, archive=archive, media=media
        ).as_dict(),
    )


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return app.resolve(event, context)
