"""Compactor Lambda: fired by the memory table's stream, where the template's FilterCriteria
lets two kinds of record through: a state item's compaction flag (fold the person's memory),
and a state item's deletion; the TTL's (the person was silent for InactiveRetentionDays) is
forgetting them, as an operator's erasure would, anyone else's is ignored (a filter on a
DynamoDB stream can name only the record's dynamodb key, not its userIdentity). Also fired by
CompactionFailureQueue, where the stream's mapping sends what failed all its retries: those
jobs are done again later, on a backoff (memagent.compaction.retry)."""

from typing import Any

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.aws import (
    BackoffProcessor,
    FailureQueue,
    FollowUpSchedules,
    KeptMedia,
    Retries,
    RetrySchedule,
    StreamReader,
    TranscriptArchive,
    after_restore,
)
from memagent.compaction import (
    FOLD,
    Compactor,
    CompactorSettings,
    FailedCompactions,
    Job,
    job_of,
)
from memagent.environment import secrets_of
from memagent.lifecycle import Elsewhere, expire
from memagent.model import ModelClient
from memagent.observability import logger, metrics
from memagent.store import MemoryStore

settings = CompactorSettings.from_env()
model = ModelClient(settings)
model.preload()  # at init: in the SnapStart snapshot, not on the first fold
compactor = Compactor(
    settings,
    MemoryStore(settings.table_name),
    model,
    TranscriptArchive(settings.archive_bucket) if settings.archive_bucket else None,
)
media = KeptMedia(settings.media_bucket) if settings.media_bucket else None
# a silent person's follow-ups' schedules are deleted with them (cancel only: no role, no queue)
group = settings.follow_up_group
schedules = FollowUpSchedules(group, "", "") if group else None
elsewhere = Elsewhere(archive=compactor.archive, media=media, schedules=schedules)
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
failure_queue = FailureQueue(settings.failure_queue_url) if settings.failure_queue_url else None
schedule = RetrySchedule(
    base_seconds=settings.retry_base_seconds,
    cap_seconds=settings.retry_max_seconds,
    jitter=settings.retry_jitter,
)
retries = Retries(failure_queue, schedule, defer_seconds=settings.retry_base_seconds)
retry_processor = BackoffProcessor(retries)
# with SnapStart: each restored environment reseeds `random`, drops the model client and secrets
after_restore(model.renew, retries.renew, *(secret.renew for secret in secrets_of(settings)))


def run(job: Job) -> str:
    """One person's job, from the stream or from the failure queue."""
    if job.action == FOLD:
        return compactor.compact(job.person)
    store = compactor.store
    expire(store, job.person, deleted_at=job.at, elsewhere=elsewhere)
    return "expired"


failed = FailedCompactions(StreamReader(), failure_queue, run, delay=settings.retry_base_seconds)


def _person(record: DynamoDBRecord) -> str:
    key = (record.dynamodb.keys if record.dynamodb else None) or {}
    pk: Any = key.get("pk")  # the table's key: in every stream record
    return pk["S"] if isinstance(pk, dict) else pk  # plain or DynamoDB-JSON, across versions


def record_handler(record: DynamoDBRecord) -> str:
    job = job_of(record.raw_event)
    if job is None and record.raw_event.get("eventName") == "REMOVE":
        # the filter lets every deletion of a state item by (it can name only the dynamodb
        # key): one by anyone but the TTL (userIdentity, checked by job_of) is no expiry
        logger.info("a state item deleted, not by the TTL: ignored")
        return "ignored"
    return run(job or Job(_person(record), FOLD))


def retry_handler(record: SQSRecord) -> str:
    return failed.handle(record.body)


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> PartialItemFailureResponse:
    if (event.get("Records") or [{}])[0].get("eventSource") == "aws:sqs":
        return process_partial_response(
            event=event, record_handler=retry_handler, processor=retry_processor, context=context
        )
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
