"""S3: the optional archive of folded transcripts (the operator's choice; off by default), and
the media kept between a record's attempts.

The archive bucket (template.yaml, TranscriptArchiveBucket) is private, KMS-encrypted and
expires objects after ArchiveRetentionDays. The media bucket (MediaBucket) is private,
KMS-encrypted, TLS only and expires objects after a day. Objects of both live under the person's
hashed key, so forget() finds them.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from memagent.errors import TransientError
from memagent.memory import Turn
from memagent.observability import logger

if TYPE_CHECKING:
    from memagent.providers import Provider


def _delete_prefix(s3: Any, bucket: str, prefix: str, before: datetime | None = None) -> int:
    """Delete the objects under `prefix`; `before`: only those written before that time."""
    removed = 0
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
        keys = [
            {"Key": obj["Key"]}
            for obj in page.get("Contents", [])
            if before is None or obj["LastModified"] <= before
        ]
        if keys:
            response = s3.delete_objects(Bucket=bucket, Delete={"Objects": keys})
            if response.get("Errors"):
                raise RuntimeError(f"{len(response['Errors'])} objects not deleted")
            removed += len(keys)
    return removed


class KeptMedia:
    """A voice note or photo, kept from its record's first attempt until its text is stored:
    provider media URLs are short-lived, and a retry may come hours later."""

    def __init__(self, bucket: str):
        self.bucket = bucket

    @functools.cached_property
    def _s3(self) -> Any:
        """Made on first use: a turn with no voice note, photo or document never needs it."""
        return boto3.client("s3")

    @staticmethod
    def key(pk: str, event_id: str) -> str:
        return f"{pk}/{hashlib.sha256(event_id.encode()).hexdigest()}"

    def get(self, pk: str, event_id: str) -> tuple[bytes, str] | None:
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=self.key(pk, event_id))
            return response["Body"].read(), response.get("ContentType") or ""
        except ClientError as error:
            if error.response["Error"]["Code"] in ("NoSuchKey", "404"):
                return None
            raise TransientError(
                f"kept media unreadable: {error.response['Error']['Code']}"
            ) from None
        except BotoCoreError as error:
            raise TransientError(f"kept media unreadable: {type(error).__name__}") from None

    def put(self, pk: str, event_id: str, data: bytes, content_type: str) -> None:
        self._s3.put_object(
            Bucket=self.bucket,
            Key=self.key(pk, event_id),
            Body=data,
            ContentType=content_type or "application/octet-stream",
            ServerSideEncryption="aws:kms",
        )

    def discard(self, pk: str, event_id: str) -> None:
        """The text is stored: the copy is no longer needed (S3 expires it anyway)."""
        try:
            self._s3.delete_object(Bucket=self.bucket, Key=self.key(pk, event_id))
        except (BotoCoreError, ClientError) as error:
            logger.warning("kept media not deleted", extra={"error": type(error).__name__})

    def export_person(self, pk: str, *, inline_bytes: int = 4 * 1024 * 1024) -> list[dict]:
        """Every kept file of a person (export, GDPR art. 15): what it is, when it was kept,
        and its bytes in base64 while they fit in `inline_bytes` in all (a Lambda response
        holds 6 MB); a file past that is listed without its bytes."""
        files: list[dict[str, Any]] = []
        left = inline_bytes
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{pk}/"):
            for obj in page.get("Contents", []):
                entry: dict[str, Any] = {
                    "kept_at": obj["LastModified"].isoformat(),
                    "bytes": obj["Size"],
                }
                if obj["Size"] <= left:
                    response = self._s3.get_object(Bucket=self.bucket, Key=obj["Key"])
                    entry["content_type"] = response.get("ContentType") or ""
                    entry["content_base64"] = base64.b64encode(response["Body"].read()).decode()
                    left -= obj["Size"]
                files.append(entry)
        return files

    def delete_person(self, pk: str, *, before: datetime | None = None) -> int:
        """Erase every kept file of a person (forget()); `before`: kept before that time."""
        return _delete_prefix(self._s3, self.bucket, f"{pk}/", before)

    def fetching_once(self, provider: Provider, pk: str, event_id: str) -> MediaOnce:
        return MediaOnce(provider, self, pk, event_id)


class MediaOnce:
    """The provider, with its media download kept: the first attempt downloads and keeps the
    file; a later attempt of the same event reads the kept copy and never needs the URL."""

    def __init__(self, provider: Provider, kept: KeptMedia, pk: str, event_id: str):
        self._provider = provider
        self._kept = kept
        self._pk = pk
        self._event_id = event_id

    def fetch_media(self, url: str, *, max_bytes: int) -> tuple[bytes, str]:
        held = self._kept.get(self._pk, self._event_id)
        if held is not None:
            logger.info("media read from the kept copy", extra={"bytes": len(held[0])})
            return held
        data, content_type = self._provider.fetch_media(url, max_bytes=max_bytes)
        try:
            self._kept.put(self._pk, self._event_id, data, content_type)
        except (BotoCoreError, ClientError) as error:  # this attempt has the bytes all the same
            logger.warning("media not kept", extra={"error": type(error).__name__})
        return data, content_type

    def __getattr__(self, name: str) -> Any:  # the rest of the provider, unchanged
        return getattr(self._provider, name)


class TranscriptArchive:
    """Optional S3 archive of folded transcripts (operator's choice; off by default)."""

    def __init__(self, bucket: str, *, client: Any | None = None):
        self.bucket = bucket
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

    def export_person(self, pk: str) -> list[dict[str, Any]]:
        """Every archived transcript of a person, oldest fold first (export, GDPR art. 15)."""
        transcripts = []
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=f"{pk}/"):
            for obj in page.get("Contents", []):
                body = self._s3.get_object(Bucket=self.bucket, Key=obj["Key"])["Body"].read()
                transcripts.append(
                    {
                        "archived_at": obj["LastModified"].isoformat(),
                        "messages": json.loads(body),
                    }
                )
        return sorted(transcripts, key=lambda t: t["messages"][0]["seq"] if t["messages"] else 0)

    def delete_person(self, pk: str, *, before: datetime | None = None) -> int:
        """Erase every archived transcript of a person (forget()); `before`: archived before
        that time."""
        return _delete_prefix(self._s3, self.bucket, f"{pk}/", before)
