"""S3: the optional archive of folded transcripts (the operator's choice; off by default).

The bucket (template.yaml, TranscriptArchiveBucket) is private, KMS-encrypted and expires objects
after ArchiveRetentionDays. Objects live under the person's hashed key, so forget() finds them.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3

from memagent.memory import Turn


class TranscriptArchive:
    """Optional S3 archive of folded transcripts (operator's choice; off by default)."""

    def __init__(self, bucket: str, *, expires_days: int = 365, client: Any | None = None):
        self.bucket = bucket
        self.expires_days = expires_days
        self._s3 = client or boto3.client("s3")

    def put(self, pk: str, turns: list[Turn]) -> str:
        # unique per attempt: two compactions folding the same turns write two objects, so the
        # loser withdrawing its copy can never delete the winner's
        attempt = uuid.uuid4().hex[:12]
        key = f"{pk}/{turns[0].seq:012d}-{turns[-1].seq:012d}-{attempt}.json"
        body = [
            {"seq": t.seq, "role": t.role, "text": t.text, "at": t.at.isoformat()} for t in turns
        ]
        self._s3.put_object(
            Bucket=self.bucket,
            Key=key,
            Body=json.dumps(body).encode(),
            ContentType="application/json",
            ServerSideEncryption="aws:kms",
        )
        return key

    def delete(self, key: str) -> None:
        self._s3.delete_object(Bucket=self.bucket, Key=key)

    def delete_person(self, pk: str) -> int:
        """Erase every archived transcript of a person (forget())."""
        removed = 0
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{pk}/"):
            keys = [{"Key": obj["Key"]} for obj in page.get("Contents", [])]
            if keys:
                response = self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
                if response.get("Errors"):
                    raise RuntimeError(f"{len(response['Errors'])} archived objects not deleted")
                removed += len(keys)
        return removed
