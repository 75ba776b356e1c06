"""DynamoDB Streams as Lambda's event source mapping sees them, on moto.

moto records stream changes but does not run event source mappings, so it applies no
FilterCriteria. `StreamTap` reads new records from the stream, reshapes them exactly as Lambda
hands them to a function, and keeps only those matching the template's filter patterns
(devstack.lambda_harness: stream_record, passes_filters). With `ttl` (devstack.ttl), DynamoDB's
TTL runs before a read, at most once a second: what it deletes is in that read.
"""

from __future__ import annotations

import time
from typing import Any

import boto3

from devstack.lambda_harness import passes_filters, stream_record

TTL_SWEEP_SECONDS = 1.0  # real seconds between the TTL's sweeps (each reads every item)


class StreamTap:
    def __init__(
        self,
        stream_arn: str,
        patterns: list[str],
        *,
        client: Any | None = None,
        ttl: Any | None = None,  # devstack.ttl.TimeToLive
    ):
        self.stream_arn = stream_arn
        self.patterns = patterns
        self.ttl = ttl
        self._swept = float("-inf")
        self._streams = client or boto3.client("dynamodbstreams")
        self._iterators: dict[str, str | None] = {}
        self._shards: dict[str, str] = {}  # sequence number -> shard, for on-failure records

    def _refresh_shards(self) -> None:
        description = self._streams.describe_stream(StreamArn=self.stream_arn)["StreamDescription"]
        for shard in description["Shards"]:
            if shard["ShardId"] not in self._iterators:
                self._iterators[shard["ShardId"]] = self._streams.get_shard_iterator(
                    StreamArn=self.stream_arn,
                    ShardId=shard["ShardId"],
                    ShardIteratorType="TRIM_HORIZON",
                )["ShardIterator"]

    def skip_to_end(self) -> None:
        """Start from now on (like StartingPosition: LATEST)."""
        self.poll()

    def poll(self) -> list[dict[str, Any]]:
        """Every record written since the last poll, in Lambda's shape, unfiltered."""
        if self.ttl is not None and time.monotonic() - self._swept >= TTL_SWEEP_SECONDS:
            self._swept = time.monotonic()
            self.ttl.sweep()
        self._refresh_shards()
        records: list[dict[str, Any]] = []
        for shard, iterator in self._iterators.items():
            while iterator:
                response = self._streams.get_records(ShardIterator=iterator, Limit=1000)
                batch = response.get("Records", [])
                records.extend(stream_record(r, self.stream_arn) for r in batch)
                self._shards.update({r["dynamodb"]["SequenceNumber"]: shard for r in batch})
                iterator = response.get("NextShardIterator")
                if not batch:
                    break
            self._iterators[shard] = iterator
        return records

    def shard_of(self, sequence_number: str) -> str:
        """The shard a record read by this tap came from (Lambda's on-failure record names it)."""
        return self._shards[sequence_number]

    def matching(self) -> list[dict[str, Any]]:
        """New records that pass the filter: what Lambda would deliver to the function."""
        return [record for record in self.poll() if passes_filters(record, self.patterns)]
