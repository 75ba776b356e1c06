"""Export or forget a person, through boto3, against a deployed stack or the local stack.

    python scripts/people.py export +447700900123 --stack whasp-agent > maya.json
    python scripts/people.py forget +447700900123 --stack whasp-agent
    python scripts/people.py forget +447700900123 --table t-memory --agent coach   # local stack

With --stack, the table name, agent id, buckets and person key are read from the CloudFormation
stack (its MemoryTableName, MediaBucketName, TranscriptArchiveBucketName and PersonKeySecretArn
outputs and AgentId parameter), with your usual AWS credentials; kept media and archived
transcripts are exported and erased too. For the local stack, point boto3 at it with
AWS_ENDPOINT_URL, set PERSON_KEY to its documented local value (memagent.person.LOCAL_PERSON_KEY)
and pass --table and --agent (and --media-bucket, --archive-bucket). The same operations are
served over HTTP by the admin API (AdminApiUrl output, AWS_IAM).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import boto3

from memagent.archive import KeptMedia, TranscriptArchive
from memagent.lifecycle import export, forget
from memagent.provider import PERSON_ID
from memagent.store import MemoryStore


def from_stack(stack: str) -> tuple[str, str, str | None, str | None]:
    description = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in description["Parameters"]}
    os.environ.setdefault("PERSON_KEY_SECRET_ARN", outputs["PersonKeySecretArn"])  # person keys
    return (
        outputs["MemoryTableName"],
        parameters.get("AgentId", "coach"),
        outputs.get("TranscriptArchiveBucketName"),
        outputs.get("MediaBucketName"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["export", "forget"])
    parser.add_argument(
        "phone",
        help="the person's number in E.164 (+447700900123) or Meta user id (US.1349120865530274)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="CloudFormation stack name (deployed)")
    source.add_argument("--table", help="memory table name (e.g. the local stack's)")
    parser.add_argument("--agent", help="agent id (default: the stack's AgentId, or coach)")
    parser.add_argument(
        "--archive-bucket", help="transcript archive bucket (default: the stack's, if any)"
    )
    parser.add_argument("--media-bucket", help="kept media bucket (default: the stack's)")
    args = parser.parse_args(argv)

    if not PERSON_ID.match(args.phone):
        parser.error("phone must be E.164 (+447700900123) or a Meta user id (US.13491208655302)")
    table, agent, bucket, media_bucket = (
        from_stack(args.stack) if args.stack else (args.table, "coach", None, None)
    )
    agent = args.agent or agent
    bucket = args.archive_bucket or bucket
    media_bucket = args.media_bucket or media_bucket
    store = MemoryStore(table)
    archive = TranscriptArchive(bucket) if bucket else None
    media = KeptMedia(media_bucket) if media_bucket else None
    if args.action == "export":
        person = export(store, agent, args.phone, archive=archive, kept_media=media)
        json.dump(person, sys.stdout, indent=2, default=str)
    else:
        receipt = forget(store, agent, args.phone, archive=archive, media=media)
        json.dump(receipt.as_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
