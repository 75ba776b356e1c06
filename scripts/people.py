"""A person's memory and chat, by hand: export or forget them (through boto3), read and edit
their facts and summary, take their chat over and answer (through the admin API).

    python scripts/people.py export +447700900123 --stack whasp-agent > maya.json
    python scripts/people.py forget +447700900123 --stack whasp-agent
    python scripts/people.py forget +447700900123 --table t-memory --agent coach   # local stack

    python scripts/people.py waiting --stack whasp-agent          # who asked for a human
    python scripts/people.py outcomes --stack whasp-agent         # the last 7 days' outcomes
    python scripts/people.py conversation +447700900123 --stack whasp-agent
    python scripts/people.py facts +447700900123 --stack whasp-agent
    python scripts/people.py add-fact +447700900123 "Runs on Sundays" --stack whasp-agent
    python scripts/people.py correct-fact +447700900123 "Works days" --fact 3f2a... --stack ...
    python scripts/people.py delete-fact +447700900123 --fact 3f2a... --stack whasp-agent
    python scripts/people.py summary +447700900123 "Maya is a nurse ..." --stack whasp-agent
    python scripts/people.py take-over +447700900123 --stack whasp-agent
    python scripts/people.py say +447700900123 "Hi Maya, Sam here" --stack whasp-agent
    python scripts/people.py templates --stack whasp-agent    # Meta: the approved templates
    python scripts/people.py send-template +447700900123 session_reminder --language en_US \
        --param Maya --param "Thursday 6pm" --stack whasp-agent   # reopens a closed window
    python scripts/people.py hand-back +447700900123 --stack whasp-agent
    python scripts/people.py follow-ups +447700900123 --stack whasp-agent     # pending ones
    python scripts/people.py schedule-follow-up +447700900123 "ask how the move went" \
        --when 2026-12-07T18:00 --stack whasp-agent
    python scripts/people.py cancel-follow-up +447700900123 --follow-up fu-3f2a... --stack ...

The operator's verbs go through the admin API (the stack's AdminApiUrl output, or --url), signed
with SigV4 and your usual AWS credentials (none for a local stack's loopback URL), so each is
audited like a console action. `say` sends exactly once per --key (a fresh one if not given,
printed: retry a failed send with it).

With --stack, the table name, agent id, buckets and person key are read from the CloudFormation
stack (its MemoryTableName, MediaBucketName, TranscriptArchiveBucketName and PersonKeySecretArn
outputs and AgentId parameter), with your usual AWS credentials; kept media and archived
transcripts are exported and erased too. For the local stack, point boto3 at it with
AWS_ENDPOINT_URL, set PERSON_KEY to its documented local value
(memagent.memory.person.LOCAL_PERSON_KEY) with MEMAGENT_LOCAL_STACK=1 (the functions' rule: that key
is refused outside a local run), and pass --table and --agent (and --media-bucket,
--archive-bucket). The same operations are served over HTTP by the admin API (AdminApiUrl output,
AWS_IAM).

Export and forget run only under the stack's own person key: under any other every phone's key
is another, so an export would find nothing and a forget erase nothing, and both would say so
with exit 0. With --table, a table a CloudFormation stack made names its stack (the
aws:cloudformation:stack-name tag CloudFormation puts on it), and the key in your environment
must be that stack's; a key that is not is refused, exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from typing import Any, NoReturn
from urllib.parse import quote

import boto3

from devstack.resources import parameter_default
from memagent.aws.archive import KeptMedia, TranscriptArchive
from memagent.errors import ConfigurationError, SecretUnavailable, UnknownPerson
from memagent.lifecycle.rights import Elsewhere, export, forget
from memagent.memory import person_key_secret
from memagent.operator.routes import ROUTES as ADMIN_ROUTES
from memagent.providers.seam import PERSON_ID
from memagent.store.memory_store import MemoryStore

# CloudFormation's own tag on what a stack creates (the CloudFormation user guide, "Resource
# tag": aws:cloudformation:stack-name, logical-id and stack-id, created automatically)
STACK_TAG = "aws:cloudformation:stack-name"


def _outputs(stack: str) -> tuple[dict[str, str], dict[str, str]]:
    description = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])}
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in description.get("Parameters", [])}
    return outputs, parameters


def from_stack(stack: str) -> tuple[str, str, str | None, str | None]:
    outputs, parameters = _outputs(stack)
    # person keys under this stack's key, whatever the shell holds (the secret wins over a
    # PERSON_KEY; another stack's PERSON_KEY_SECRET_ARN is replaced)
    os.environ["PERSON_KEY_SECRET_ARN"] = outputs["PersonKeySecretArn"]
    return (
        outputs["MemoryTableName"],
        parameters["AgentId"],  # CloudFormation lists every parameter, defaults included
        outputs.get("TranscriptArchiveBucketName"),
        outputs.get("MediaBucketName"),
    )


# each operator verb and the admin API route it calls, from the routes' table (export and
# forget go through boto3); tests/infra/test_template.py holds them to the template's routes
ROUTES = {route.verb: (route.method, route.path) for route in ADMIN_ROUTES if route.verb}
OPERATOR_VERBS = tuple(ROUTES)


def operate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Any:
    """One operator verb through the admin API; returns its JSON answer."""
    from console.server import AdminApi

    url = args.url or from_stack_admin_url(args.stack)
    api = AdminApi(url, region=args.region)

    def call(verb: str, body: Any = None, **headers: str) -> Any:
        method, route = ROUTES[verb]
        path = route.format(
            id=quote(args.phone or "", safe=""),
            fact=quote(args.fact or ""),
            follow_up=quote(args.follow_up or ""),
        )
        data = json.dumps(body).encode() if body is not None else b""
        status, answer = api.call(
            method, path, data, {"Content-Type": "application/json", **headers}
        )
        parsed = json.loads(answer or b"null")
        if status >= 400:
            raise SystemExit(f"{status}: {(parsed or {}).get('error', parsed)}")
        return parsed

    verb = args.action
    if "{id}" in ROUTES[verb][1] and not args.phone:
        parser.error(f"{verb} needs the person's phone or Meta user id")
    if verb in ("add-fact", "correct-fact", "summary", "say") and not args.text:
        parser.error(f"{verb} needs the text")
    if verb in ("correct-fact", "delete-fact") and not args.fact:
        parser.error(f"{verb} needs --fact ID (the id `facts` lists)")
    if verb == "schedule-follow-up":
        if not (args.text and args.when):
            parser.error(f"{verb} needs what it is about and --when YYYY-MM-DDTHH:MM")
        key = args.key or f"cli-{uuid.uuid4()}"
        sys.stderr.write(f"idempotency key: {key} (retry a failed request with --key {key})\n")
        body = {"when": args.when, "about": args.text}
        return call(verb, body, **{"Idempotency-Key": key})
    if verb == "cancel-follow-up" and not args.follow_up:
        parser.error(f"{verb} needs --follow-up ID (the id `follow-ups` lists)")
    if verb == "summary":  # based on the summary as read now: a fold meanwhile is a 409
        read = call("conversation")["summary"]
        return call(verb, {"text": args.text, "based_on": read["at"] if read else None})
    if verb == "send-template":  # an approved template's name as the text, its parameters
        if not (args.text and args.language):
            parser.error(f"{verb} needs the template's name and --language (as `templates` lists)")
        key = args.key or f"cli-{uuid.uuid4()}"
        sys.stderr.write(f"idempotency key: {key} (retry a failed send with --key {key})\n")
        body = {"name": args.text, "language": args.language, "parameters": args.param or []}
        return call(verb, body, **{"Idempotency-Key": key})
    if verb == "say":
        key = args.key or f"cli-{uuid.uuid4()}"
        sys.stderr.write(f"idempotency key: {key} (retry a failed send with --key {key})\n")
        return call(verb, {"text": args.text}, **{"Idempotency-Key": key})
    return call(verb, {"text": args.text} if verb in ("add-fact", "correct-fact") else None)


def owning_stack(table: str) -> str | None:
    """The CloudFormation stack that made `table`, by its tag; None for a table no stack made
    (the local stack's)."""
    client = boto3.client("dynamodb")
    arn = client.describe_table(TableName=table)["Table"]["TableArn"]
    tags = client.list_tags_of_resource(ResourceArn=arn).get("Tags", [])
    return next((tag["Value"] for tag in tags if tag["Key"] == STACK_TAG), None)


def stacks_person_key(stack: str | None) -> None:
    """Exit 2, saying why, unless person keys are computed under `stack`'s own key (with no
    stack: a key the functions would accept, the published local one in a local run only)."""
    try:
        key = person_key_secret(os.environ).get()
        if stack is None:
            return
        arn = _outputs(stack)[0]["PersonKeySecretArn"]
        own = person_key_secret({"PERSON_KEY_SECRET_ARN": arn}).get()
    except (ConfigurationError, SecretUnavailable) as error:
        _refuse(str(error))
    if key != own:
        _refuse(
            f"the person key in your environment is not stack {stack}'s (its "
            f"PersonKeySecretArn): under it no phone reaches its memory. Give --stack {stack}"
        )


def _refuse(why: str) -> NoReturn:
    sys.stderr.write(f"people.py: refused, nothing read or erased: {why}\n")
    raise SystemExit(2)


def from_stack_admin_url(stack: str) -> str:
    description = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])}
    return outputs["AdminApiUrl"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["export", "forget", *OPERATOR_VERBS])
    parser.add_argument(
        "phone",
        nargs="?",
        help="the person's number in E.164 (+447700900123) or Meta user id (US.1349120865530274)",
    )
    parser.add_argument(
        "text", nargs="?", help="a fact, the summary, what to say, or a template's name"
    )
    parser.add_argument("--fact", help="a fact's id (correct-fact, delete-fact)")
    parser.add_argument("--follow-up", help="a follow-up's id (cancel-follow-up)")
    parser.add_argument("--language", help="send-template: the template's language (en_US)")
    parser.add_argument(
        "--param", action="append", help="send-template: a parameter, in order (repeat it)"
    )
    parser.add_argument("--when", help="schedule-follow-up: YYYY-MM-DDTHH:MM on the person's clock")
    parser.add_argument(
        "--key",
        help="say, send-template, schedule-follow-up: the idempotency key (the same each retry)",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--stack", help="CloudFormation stack name (deployed)")
    source.add_argument("--table", help="memory table name (e.g. the local stack's)")
    source.add_argument("--url", help="the admin API's URL (operator verbs; a local stack's)")
    parser.add_argument("--region", help="the admin API's region (default: your AWS config's)")
    parser.add_argument(
        "--agent", help="agent id (default: the stack's AgentId, or the template's default)"
    )
    parser.add_argument(
        "--archive-bucket", help="transcript archive bucket (default: the stack's, if any)"
    )
    parser.add_argument("--media-bucket", help="kept media bucket (default: the stack's)")
    args = parser.parse_args(argv)

    if args.phone is not None and not PERSON_ID.match(args.phone):
        parser.error("phone must be E.164 (+447700900123) or a Meta user id (US.13491208655302)")
    if args.action in OPERATOR_VERBS:
        if args.table:
            parser.error(f"{args.action} goes through the admin API: give --stack or --url")
        json.dump(operate(args, parser), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if args.phone is None or args.url:
        parser.error(f"{args.action} needs the phone, and --stack or --table")
    table, agent, bucket, media_bucket = (
        from_stack(args.stack)
        if args.stack
        else (args.table, parameter_default("AgentId"), None, None)
    )
    stacks_person_key(args.stack or owning_stack(table))
    agent = args.agent or agent
    bucket = args.archive_bucket or bucket
    media_bucket = args.media_bucket or media_bucket
    store = MemoryStore(table)
    archive = TranscriptArchive(bucket) if bucket else None
    media = KeptMedia(media_bucket) if media_bucket else None
    elsewhere = Elsewhere(archive=archive, media=media)
    if args.action == "export":
        try:
            person = export(store, agent, args.phone, elsewhere=elsewhere)
        except UnknownPerson:  # their retention ended: gone, whether or not the TTL ran yet
            sys.stderr.write("no memory is held for this person (their retention has ended)\n")
            return 1
        json.dump(person, sys.stdout, indent=2, default=str)
    else:
        receipt = forget(store, agent, args.phone, elsewhere=elsewhere)
        json.dump(receipt.as_dict(), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
