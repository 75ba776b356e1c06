"""Typed domain errors. Entry points map them to HTTP codes or batch failures in one place."""


class AgentError(Exception):
    """Base class for every error this package raises on purpose."""


class ConfigurationError(AgentError):
    """A setting is missing or invalid. Raised at cold start, naming the setting."""


class SecretUnavailable(AgentError):
    """A secret could not be read (SSM/Secrets Manager down, or not configured)."""


class InvalidSignature(AgentError):
    """A webhook request is not signed by whasp (missing, malformed, stale or wrong)."""


class BadRequest(AgentError):
    """A signed webhook request whose body we cannot accept (too big, not JSON, no envelope)."""


class BodyTooLarge(BadRequest):
    """A webhook body over the configured cap, refused before its signature is computed."""


class QueueUnavailable(AgentError):
    """SQS did not accept the message; the sender should retry."""


class MalformedEvent(AgentError):
    """A queued event that can never be processed (parked for an operator, never retried)."""


class MediaTooLarge(MalformedEvent):
    """A media file over the size cap its caller set (the download stops at the cap)."""


class TransientError(AgentError):
    """A dependency failed in a way that a retry may fix (5xx, 429, timeout). `dependency`
    names it ("model", "whasp", "meta", an AWS service), `status` is its HTTP status (None: no
    answer) and `error` the class of what it raised, so a retry's log line says which one
    keeps failing and how (`named_failure`), never only "retry"."""

    def __init__(
        self,
        message: str = "",
        *,
        dependency: str | None = None,
        status: int | None = None,
        error: str | None = None,
    ):
        super().__init__(message)
        self.dependency = dependency
        self.status = status
        self.error = error


class Deferred(TransientError):
    """Not a failure: too little time was left in the invocation to start this record. It is
    retried within seconds, not on the failure backoff."""


class ModelRejected(AgentError):
    """The model refused a request for good (400/413/415/422): retrying cannot help."""


class SendRejected(AgentError):
    """The provider refused a send for good (whasp: 4xx other than opt-out; Meta: a permanent
    error code such as 131047, the closed 24-hour window); retrying cannot help."""

    def __init__(self, status: int, code: int | None = None):
        detail = f" (code {code})" if code is not None else ""
        super().__init__(f"the provider rejected the send with HTTP {status}{detail}")
        self.status = status
        self.code = code


class OptedOut(AgentError):
    """whasp refused a send because the chat opted out (HTTP 409 opted_out)."""


class ConcurrentUpdate(AgentError):
    """An optimistic condition failed because someone else wrote first."""


class UnknownPerson(AgentError):
    """An operator named someone we hold no memory of (the admin API's 404)."""


class InvalidEdit(AgentError):
    """An operator's request we cannot act on as written (the admin API's 400); the message
    says what is wrong."""


class EditConflict(AgentError):
    """An operator's request that the memory's current state refuses (the admin API's 409):
    the summary changed since it was read, a fact is already there, the chat is not handed off."""


class WindowClosed(SendRejected):
    """Meta's 24-hour customer-service window is closed (code 131047): only an approved
    template may be sent until the person writes again."""

    def __init__(self) -> None:
        super().__init__(400, code=131047)


class TemplateRefused(SendRejected):
    """Meta refused an approved-template send for good: its parameters do not match the
    template (132000, 132012), it does not exist in that language or is not approved (132001),
    it is paused or disabled (132015, 132016)."""


class StreamUnreadable(TransientError):
    """A failed batch could not be read back from the memory table's stream (trimmed after
    24 hours, the stream replaced, or DynamoDB Streams failing)."""


class ScheduleRefused(AgentError):
    """EventBridge Scheduler did not create or delete a follow-up's schedule: a role it cannot
    assume (ValidationException), a missing grant (AccessDeniedException), throttling after
    botocore's retries, no answer. Nothing was scheduled or cancelled; the turn goes on (the
    model is told) and the admin API answers 503."""

    def __init__(self, operation: str, code: str):
        super().__init__(f"EventBridge Scheduler refused {operation} ({code})")
        self.operation = operation
        self.code = code


def named_failure(error: BaseException | None) -> dict[str, object]:
    """What failed, for a log line: the dependency, its HTTP status and the error's class, read
    from a TransientError that names them, an openai error (status_code) or a botocore one
    (the operation's service is not on it: the error code and status are). Never the message:
    it can hold a person's text or a URL with a key."""
    if error is None:
        return {"dependency": "unknown", "status": None, "error": None}
    if isinstance(error, TransientError) and error.dependency:
        return {
            "dependency": error.dependency,
            "status": error.status,
            "error": error.error or type(error).__name__,
        }
    response = getattr(error, "response", None)
    if isinstance(response, dict) and "Error" in response:  # botocore's ClientError
        return {
            "dependency": f"aws:{getattr(error, 'operation_name', 'unknown')}",
            "status": (response.get("ResponseMetadata") or {}).get("HTTPStatusCode"),
            "error": str(response["Error"].get("Code") or type(error).__name__),
        }
    if type(error).__module__.startswith(("openai", "httpx")):
        return {
            "dependency": "model",
            "status": getattr(error, "status_code", None),
            "error": type(error).__name__,
        }
    if type(error).__module__.startswith(("botocore", "urllib3")):
        return {"dependency": "aws", "status": None, "error": type(error).__name__}
    return {"dependency": "unknown", "status": None, "error": type(error).__name__}
