"""DynamoDB Streams: a failed batch of the memory table's stream, read back.

Lambda's on-failure record for a stream batch says where the batch was (shard, first and last
sequence number), never what it held. The records stay in the stream for 24 hours; within that,
GetShardIterator(AT_SEQUENCE_NUMBER) and GetRecords return them again, in order. A read can
return an empty page before the records (the shard's pages are not all full), hence a few pages.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from memagent.errors import StreamUnreadable

PAGES = 10  # empty pages to read through before the batch counts as unreadable
# not on anyone's deadline: give a slow answer time, and retry a refused call a few times
STREAM_CONFIG = Config(
    connect_timeout=2.0, read_timeout=10.0, retries={"total_max_attempts": 5, "mode": "standard"}
)


class StreamReader:
    def __init__(self, client: Any | None = None):
        import boto3

        self._streams = client or boto3.client("dynamodbstreams", config=STREAM_CONFIG)

    def read(self, stream_arn: str, shard_id: str, first: str, last: str) -> list[dict[str, Any]]:
        """The records of one shard from sequence number `first` to `last`, both included, as
        Lambda delivers them (DynamoDB JSON; the creation time in epoch seconds). Raises
        StreamUnreadable when they cannot be read: trimmed (over 24 hours old), the stream gone,
        or not reached."""
        try:
            iterator = self._streams.get_shard_iterator(
                StreamArn=stream_arn,
                ShardId=shard_id,
                ShardIteratorType="AT_SEQUENCE_NUMBER",
                SequenceNumber=first,
            )["ShardIterator"]
            return self._pages(iterator, int(last))
        except (BotoCoreError, ClientError) as error:
            code = getattr(error, "response", {}).get("Error", {}).get("Code")
            raise StreamUnreadable(code or type(error).__name__) from error

    def _pages(self, iterator: str | None, last: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        for _ in range(PAGES):
            if not iterator:  # a closed shard, read to its end
                return records
            page = self._streams.get_records(ShardIterator=iterator, Limit=1000)
            for record in page.get("Records", []):
                if int(record["dynamodb"]["SequenceNumber"]) > last:
                    return records
                records.append(_as_lambda_delivers(record))
            if records and int(records[-1]["dynamodb"]["SequenceNumber"]) == last:
                return records
            iterator = page.get("NextShardIterator")
        raise StreamUnreadable(f"the batch's last record not reached in {PAGES} pages")


def _as_lambda_delivers(record: dict[str, Any]) -> dict[str, Any]:
    """boto3 parses ApproximateCreationDateTime into a datetime; Lambda's records (and
    memagent.lifecycle.rights.expired_by_ttl) hold epoch seconds. And the TTL's deletions name it
    as Lambda's records do (lambda_identity)."""
    change = record.get("dynamodb") or {}
    created = change.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        change = {**change, "ApproximateCreationDateTime": created.timestamp()}
        record = {**record, "dynamodb": change}
    if "userIdentity" in record:
        record = {**record, "userIdentity": lambda_identity(record["userIdentity"])}
    return record


def lambda_identity(identity: dict[str, Any]) -> dict[str, Any]:
    """A record's userIdentity as Lambda's records spell it (type, principalId), from GetRecords'
    Identity shape (Type, PrincipalId: botocore's dynamodbstreams model). Without this, the
    TTL's deletion read back from a failed batch was no expiry (lifecycle.expired_by_ttl)."""
    return {name[:1].lower() + name[1:]: value for name, value in identity.items()}
