"""Compactor Lambda: fired by the memory table's stream, where the template's FilterCriteria
lets two kinds of record through: a state item's compaction flag (fold the person's memory),
and the TTL's deletion of a state item (the person was silent for InactiveRetentionDays: forget
them, as an operator's erasure would)."""

from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from memagent.archive import KeptMedia, TranscriptArchive
from memagent.compaction import Compactor
from memagent.lifecycle import expire, expired_by_ttl
from memagent.model import ModelClient
from memagent.observability import logger, metrics
from memagent.settings import CompactorSettings, secrets_of
from memagent.snapstart import after_restore
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
processor = BatchProcessor(event_type=EventType.DynamoDBStreams)
# with SnapStart: each restored environment reseeds `random`, drops the model client and secrets
after_restore(model.renew, *(secret.renew for secret in secrets_of(settings)))


def _person(record: DynamoDBRecord) -> str:
    key = (record.dynamodb.keys if record.dynamodb else None) or {}
    pk = key.get("pk")
    return pk["S"] if isinstance(pk, dict) else pk  # plain or DynamoDB-JSON, across versions


def record_handler(record: DynamoDBRecord) -> str:
    expiry = expired_by_ttl(record.raw_event)
    if expiry is not None:
        store = compactor.store
        expire(store, expiry.person, deleted_at=expiry.at, archive=compactor.archive, media=media)
        return "expired"
    return compactor.compact(_person(record))


@logger.inject_lambda_context(clear_state=True)
@metrics.log_metrics
def handler(event: dict, context: LambdaContext) -> dict:
    return process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )
