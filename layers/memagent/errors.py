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


class TransientError(AgentError):
    """A dependency failed in a way that a retry may fix (5xx, 429, timeout)."""


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
