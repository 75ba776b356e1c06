"""Fixes to moto 5.2 (DynamoDB, Streams, SQS) that the local stack needs: correct under
concurrent clients, faithful to the AWS behaviour the design relies on, and fast enough.

`apply()` applies them all, once per process (they patch moto's classes, so every moto server and
`mock_aws()` of the process gets them). What they fix:

Concurrency (`make_dynamodb_thread_safe`). moto's DynamoDB was written for one client at a time:
- a cancelled TransactWriteItems (a condition failed: a duplicate event, a lost race) puts back a
  deep copy of the whole table taken before the transaction started. Every write other clients
  made meanwhile is lost, and as the copy holds the table's stream shard, so are their stream
  records, while stream readers keep reading the discarded shard. The copy also costs time in
  proportion to the table and its stream, and fails with "dictionary changed size during
  iteration" when another request writes meanwhile;
- reads iterate dicts that concurrent writes change in place.
The fix serialises moto's DynamoDB and Streams operations on one lock and gives transactions
DynamoDB's documented semantics: every condition is checked against the state before the
transaction, nothing is written if one fails, and a failure while applying undoes only the
transaction's own items and stream records.

FIFO order and time (`make_sqs_faithful`). When two messages of a group come back together
after a failed batch, moto delivers the second before the first; the fix keeps the group's
order. It also makes moto's SQS clock devstack.clock.SQS_CLOCK (real time unless a test or the
local stack scales or advances it, so retry schedules play out in AWS time without sleeping) and
stops a receive from computing every queue attribute (counts over all messages, each reading the
clock through datetime) once per received message.
ChangeMessageVisibility's 12-hour limit counts from the message's latest receive, as in SQS
(moto counts from its sending, refusing any change once a message is 12 hours old).

Scheduler's CreateSchedule (`make_scheduler_strict`): moto stores any schedule; EventBridge
Scheduler refuses a bad name, at() expression, time zone, flexible window, role ARN, a universal
target whose Input is no JSON object, and the templated SQS target on a FIFO queue without a
group id or without content-based deduplication (the event queue has none: follow-ups use the
universal target, memagent.aws.scheduler), a RetryPolicy past its bounds and a dead-letter queue
that is no standard queue. Its test: tests/integration/test_follow_up_schedules.py.

SNS's subscriptions (`make_sns_faithful`): moto confirms every subscription at once. SNS waits
for an email, email-json, http or https endpoint's owner to confirm it (Subscribe's API
reference: "the endpoint owner must run the ConfirmSubscription action"); until then
ListSubscriptionsByTopic lists its SubscriptionArn as "PendingConfirmation". The fix keeps those
pending (no one confirms locally: an address given to the local stack receives nothing), which
is what `make smoke` tells apart from a subscriber alarms reach.

Polly's SynthesizeSpeech (`make_polly_strict`): moto refuses `ogg_opus` (what WhatsApp plays
as a voice note), ignores the Engine, parses no SSML, counts SSML tags as text and answers eight
zero bytes. Polly refuses more than 3,000 billed characters or 6,000 in all, SSML tags not
billed (TextLengthExceededException); malformed SSML (InvalidSsmlException); an engine the
voice lacks (EngineNotSupportedException); an unknown voice (ValidationException); and answers
`ogg_opus` as an Ogg/Opus stream (devstack.ogg: pages, OpusHead, a length that follows the
text). API reference, SynthesizeSpeech and its errors.

Each correction above has a test in tests/test_moto_fixes.py that shows moto as released still
behaves that way (when it fails, moto has fixed it upstream: delete the patch) and that the patch
gives AWS's behaviour. The clock and the speed-ups below correct nothing, so they have none.

Speed (`make_dynamodb_faster`). A Query on the table's key reads only the queried partition
(moto sorts the whole table first), and item results and stream records are written as plain
JSON, which is what moto's shape-driven serializer produces for them, at a fraction of the cost.
`make_server_dispatch_faster`: for every request, moto's server lists its own package directory
(about 150 stat calls, twice) to find the service and lists the response class's methods with
inspect to find the action; both answers are fixed for the process, so they are computed once
(a third of the server's CPU per request). An UpdateExpression's check that it has one SET, one
REMOVE and one ADD at most runs once, on the whole expression: moto runs it again at each of the
nested nodes a list of actions parses into, each time walking the subtree below, so its cost
grew with the square of the actions (a person's state update has dozens: about a tenth of the
suite's CPU). A subtree's clauses are the whole's, so the one check refuses what they refused.
`make_models_untracked`: moto keeps every model it ever made for its dashboard; the fix keeps
none (S3's objects aside), so a dropped table's items are freed.
"""

from __future__ import annotations

import calendar
import copy
import functools
import json
import re
import threading
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from typing import Any

_LOCK = threading.RLock()
_SQS_LOCK = threading.RLock()  # moto's receive is not atomic either
# Operations whose results moto already holds in wire format (DynamoDB JSON): item operations
# and the stream's records.
_PLAIN_JSON_OPERATIONS = frozenset(
    [
        *(
            ("dynamodb", name)
            for name in (
                "GetItem",
                "PutItem",
                "UpdateItem",
                "DeleteItem",
                "Query",
                "Scan",
                "BatchGetItem",
                "BatchWriteItem",
                "TransactGetItems",
                "TransactWriteItems",
            )
        ),
        ("dynamodbstreams", "GetRecords"),
    ]
)


def _once(fix: Callable[[], None]) -> Callable[[], None]:
    """A fix patches moto's classes: it is applied once per process, by whoever asks first."""
    done = False

    @functools.wraps(fix)
    def apply_once() -> None:
        nonlocal done
        with _LOCK:
            if not done:
                fix()
                done = True

    return apply_once


_DYNAMODB_OPERATIONS = (
    "create_table",
    "delete_table",
    "update_table",
    "describe_table",
    "put_item",
    "get_item",
    "query",
    "scan",
    "update_item",
    "delete_item",
    "batch_get_item",
    "batch_write_item",
    "transact_get_items",
    "execute_statement",
    "execute_transaction",
    "batch_execute_statement",
    "update_time_to_live",
)
_STREAM_OPERATIONS = ("describe_stream", "get_shard_iterator", "get_records", "list_streams")


@_once
def make_dynamodb_thread_safe() -> None:
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodbstreams.models import DynamoDBStreamsBackend

    for cls, names in (
        (DynamoDBBackend, _DYNAMODB_OPERATIONS),
        (DynamoDBStreamsBackend, _STREAM_OPERATIONS),
    ):
        for name in names:
            if hasattr(cls, name):
                setattr(cls, name, _locked(getattr(cls, name)))
    DynamoDBBackend.transact_write_items = _locked(_transact_write_items)


@_once
def make_dynamodb_faster() -> None:
    from moto.core.responses import ActionResult
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.parsing.validators import ActionCountValidator
    from moto.dynamodb.responses import DynamoResult

    Table.query = _partition_query(Table.query)
    ActionCountValidator.traverse = _count_actions_once
    generic = ActionResult.execute_result
    DynamoResult.execute_result = _plain_json_result(generic)
    ActionResult.execute_result = _plain_json_result(generic)


def apply() -> None:
    """Every fix above, once per process."""
    make_iam_simulate()  # adds a method to a response class: before the server's first request
    make_dynamodb_thread_safe()
    make_dynamodb_faster()
    make_server_dispatch_faster()
    make_sqs_faithful()
    make_scheduler_strict()
    make_sns_faithful()
    make_polly_strict()
    make_models_untracked()


@_once
def make_models_untracked() -> None:
    """moto appends every model it makes (each item, message, table, queue) to a class list for
    its web dashboard, and only a reset empties those: a table or queue dropped stays in memory
    with all it held. A test worker kept every test's items, and each of the garbage collector's
    full passes walked them all (about a tenth of the suite's CPU). Nothing here reads the
    dashboard. S3's objects stay tracked: moto's reset closes their buffers through that list."""
    from moto.core.common_models import BaseModel

    def __new__(cls: type, *args: Any, **kwargs: Any) -> Any:
        instance: Any = object.__new__(cls)
        if cls.__module__.startswith("moto.s3."):
            cls.instances_tracked.append(instance)  # type: ignore[attr-defined]
        return instance

    BaseModel.__new__ = __new__


@_once
def make_server_dispatch_faster() -> None:
    """Compute once what moto's server recomputes on every request (see the module docstring)."""
    import moto.backends
    import moto.core.responses

    modules = tuple(moto.backends.list_of_moto_modules())  # moto's own folders: fixed
    moto.backends.list_of_moto_modules = lambda: modules
    # keyed by response class; moto (and this module) never adds methods to those at run time
    methods = functools.cache(moto.core.responses.method_names_from_class)
    moto.core.responses.method_names_from_class = methods


@_once
def make_sqs_faithful() -> None:
    from moto.sqs import models

    from devstack.clock import SQS_CLOCK

    original_time, original_millis = models.unix_time, models.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return SQS_CLOCK.now() if dt is None else original_time(dt)

    def unix_time_millis(dt: Any = None) -> float:
        return SQS_CLOCK.now() * 1000.0 if dt is None else original_millis(dt)

    def is_message_valid_based_on_retention_period(
        backend: Any, queue_name: str, message: Any
    ) -> bool:
        retention = int(backend.get_queue(queue_name).message_retention_period)
        return retention + message.sent_timestamp / 1000 > SQS_CLOCK.now()

    models.unix_time, models.unix_time_millis = unix_time, unix_time_millis
    backend = models.SQSBackend
    backend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period  # type: ignore[assignment]
    backend.receive_message = _in_group_order(backend.receive_message)
    models.Message.mark_received = _noting_receipt(models.Message.mark_received)
    backend.change_message_visibility = _change_message_visibility  # type: ignore[assignment]


def _noting_receipt(mark_received: Any) -> Any:
    @functools.wraps(mark_received)
    def mark(message: Any, *args: Any, **kwargs: Any) -> None:
        from moto.sqs.models import unix_time_millis

        message.last_received_ms = unix_time_millis()
        mark_received(message, *args, **kwargs)

    return mark


def _change_message_visibility(
    backend: Any, queue_name: str, receipt_handle: str, visibility_timeout: int
) -> None:
    """SQS caps a message's visibility at 12 hours from the receive that returned it; moto counts
    from when the message was sent, so it refuses every change to a message older than 12 hours
    (any message retried through a long outage)."""
    from moto.sqs.exceptions import InvalidParameterValue, ReceiptHandleIsInvalid
    from moto.sqs.models import unix_time_millis

    queue = backend.get_queue(queue_name)
    for message in queue._messages:
        if message.had_receipt_handle(receipt_handle):
            until = unix_time_millis() + int(visibility_timeout) * 1000
            received = getattr(message, "last_received_ms", None) or message.sent_timestamp
            if until - received > 43200 * 1000:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. "
                    "Reason: Total VisibilityTimeout for the message is beyond the limit "
                    "[43200 seconds]"
                )
            message.change_visibility(visibility_timeout)
            if message.visible and message in queue.pending_messages:
                queue.pending_messages.remove(message)
            return
    raise ReceiptHandleIsInvalid


def _in_group_order(receive_message: Any) -> Any:
    """moto frees a FIFO group from "in flight" only when its receive loop reaches each expired
    message, so when two messages of a group come back together (both failed in one batch),
    the first is skipped as "group in flight" and the second is delivered before it. SQS
    delivers a group in order: forget every expired message's flight before the loop starts."""

    @functools.wraps(receive_message)
    def receive_in_order(backend: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        with _SQS_LOCK:
            queue = backend.get_queue(queue_name)
            # a snapshot (list() of a set is one step under the GIL): moto's other request
            # threads (a send, a delete) change the set while this one reads it
            for message in [m for m in list(queue.pending_messages) if m.visible]:
                queue.pending_messages.discard(message)
            return receive_message(backend, queue_name, *args, **kwargs)

    return receive_in_order


def locked() -> Any:
    """The lock every moto DynamoDB and Streams operation holds (make_dynamodb_thread_safe):
    for a stand-in that changes moto's tables itself (devstack.ttl)."""
    return _LOCK


def _locked(method: Any) -> Any:
    @functools.wraps(method)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _LOCK:
            return method(*args, **kwargs)

    return call


def _plain_json_result(generic: Any) -> Any:
    """An item operation's result as plain JSON (moto's shape-driven serializer is most of the
    cost of a Query); anything else, or anything json cannot encode (bytes, datetimes), goes
    through moto's serializer as before."""

    @functools.wraps(generic)
    def execute_result(result: Any, context: Any) -> Any:
        operation = (context.service_model.service_name, context.operation_model.name)
        if operation in _PLAIN_JSON_OPERATIONS and isinstance(result.result, dict):
            try:
                body = json.dumps(result.result, separators=(",", ":"), default=_epoch_seconds)
            except (TypeError, ValueError):
                return generic(result, context)
            return 200, {"Content-Type": "application/x-amz-json-1.0"}, body
        return generic(result, context)

    return execute_result


def _count_actions_once(validator: Any, node: Any) -> Any:
    """ActionCountValidator's traversal, at the root alone (see the module's docstring)."""
    return validator.verify_action_counts(node)


def _epoch_seconds(value: Any) -> float:
    """A naive-UTC datetime as JSON protocol timestamps travel: seconds since the epoch."""
    if isinstance(value, datetime):
        return calendar.timegm(value.utctimetuple()) + value.microsecond / 1e6
    raise TypeError(type(value).__name__)


def _partition_query(query: Any) -> Any:
    """Table.query, shown only the queried partition when it reads the table's own key (moto
    would otherwise sort the whole table first). Runs under the lock, so no writer sees the
    narrowed view."""

    @functools.wraps(query)
    def partition_query(table: Any, hash_key: Any, *args: Any, **kwargs: Any) -> Any:
        index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
        if index_name is not None or hash_key is None:
            return query(table, hash_key, *args, **kwargs)
        with _LOCK:
            everything = table.items
            partition = everything.get(hash_key)
            table.items = defaultdict(dict)
            if partition is not None:
                table.items[hash_key] = partition
            try:
                return query(table, hash_key, *args, **kwargs)
            finally:
                table.items = everything

    return partition_query


def _transact_write_items(backend: Any, transact_items: list[dict[str, Any]]) -> None:
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()

    # 1. Check: every operation's condition against the state before the transaction.
    operations: list[tuple[str, dict[str, Any], Any, dict[str, Any]]] = []
    targets: set[tuple[str, str]] = set()
    errors: list[tuple[Any, Any, Any]] = []
    for entry in transact_items:
        if len(entry) > 1:
            raise TransactWriteSingleOpException
        op_type, op = next(iter(entry.items()))
        original = None
        try:
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table = backend.get_table(op["TableName"])
            if op_type == "Put":
                key = {table.hash_key_attr: op["Item"][table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = op["Item"][table.range_key_attr]
            else:
                key = op["Key"]
            target = (str(op["TableName"]), str(dict(sorted(key.items()))))
            if target in targets:
                raise MultipleTransactionsException()
            targets.add(target)
            current = backend.get_item(op["TableName"], key)
            if op.get("ConditionExpression") is not None:
                condition = get_filter_expression(
                    op["ConditionExpression"],
                    op.get("ExpressionAttributeNames"),
                    op.get("ExpressionAttributeValues"),
                )
                if not condition.expr(current):
                    if op.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                        original = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original)
            operations.append((op_type, op, table, key))
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            raise
        except ConditionalCheckFailed as error:
            errors.append(("ConditionalCheckFailed", str(error.message), original))
        except Exception as error:
            errors.append((type(error).__name__, str(error), original))
    if any(code is not None for code, _, _ in errors):
        raise TransactionCanceledException(errors)

    # 2. Apply, keeping what is needed to undo this transaction alone.
    undo: list[tuple[Any, Any, Any, Any]] = []
    stream_lengths = {
        id(table): (table, len(table.stream_shard.items))
        for _, _, table, _ in operations
        if table.stream_shard is not None
    }
    try:
        for op_type, op, table, key in operations:
            if op_type == "ConditionCheck":
                continue
            hash_key, range_key = backend.get_keys_value(table, key)
            undo.append(
                (table, hash_key, range_key, copy.deepcopy(table.get_item(hash_key, range_key)))
            )
            arguments = {
                "condition_expression": op.get("ConditionExpression"),
                "expression_attribute_names": op.get("ExpressionAttributeNames"),
                "expression_attribute_values": op.get("ExpressionAttributeValues"),
            }
            if op_type == "Put":
                backend.put_item(op["TableName"], op["Item"], **arguments)
            elif op_type == "Delete":
                backend.delete_item(op["TableName"], key, **arguments)
            else:
                backend.update_item(
                    op["TableName"], key, update_expression=op["UpdateExpression"], **arguments
                )
    except BaseException:
        for table, hash_key, range_key, previous in reversed(undo):
            _restore(table, hash_key, range_key, previous)
        for table, length in stream_lengths.values():
            del table.stream_shard.items[length:]
        raise


def _restore(table: Any, hash_key: Any, range_key: Any, previous: Any) -> None:
    if range_key is not None:
        if previous is None:
            table.items[hash_key].pop(range_key, None)
        else:
            table.items[hash_key][range_key] = previous
    elif previous is None:
        table.items.pop(hash_key, None)
    else:
        table.items[hash_key] = previous


# EventBridge Scheduler's CreateSchedule (API reference: CreateSchedule, Target, SqsParameters):
# what it refuses that moto 5.2 accepts
_SCHEDULE_NAME = re.compile(r"^[0-9a-zA-Z\-_.]{1,64}$")
_ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)?:iam::\d{12}:role/[\w+=,.@/-]+$")
_AT = re.compile(r"^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$")
_SQS_ARN = re.compile(r"^arn:aws(-[a-z]+)?:sqs:[a-z0-9-]+:\d{12}:(?P<queue>[\w-]+(\.fifo)?)$")


def schedule_problems(backend: Any, kwargs: dict[str, Any]) -> list[str]:
    """Why Scheduler would refuse this CreateSchedule (empty: it would take it)."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    problems = []
    if not _SCHEDULE_NAME.match(kwargs.get("name") or ""):
        problems.append("Name: 1 to 64 of [0-9a-zA-Z-_.]")
    expression = kwargs.get("schedule_expression") or ""
    if expression.startswith("at(") and not _AT.match(expression):
        problems.append("ScheduleExpression: at(yyyy-mm-ddThh:mm:ss)")
    zone = kwargs.get("schedule_expression_timezone")
    if zone:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            problems.append(f"ScheduleExpressionTimezone: {zone!r} is not a time zone")
    window = kwargs.get("flexible_time_window") or {}
    if window.get("Mode") not in ("OFF", "FLEXIBLE"):
        problems.append("FlexibleTimeWindow.Mode: OFF or FLEXIBLE")
    if kwargs.get("action_after_completion") not in (None, "NONE", "DELETE"):
        problems.append("ActionAfterCompletion: NONE or DELETE")
    target = kwargs.get("target") or {}
    if not _ROLE_ARN.match(target.get("RoleArn") or ""):
        problems.append("Target.RoleArn: an IAM role's ARN")
    arn = target.get("Arn") or ""
    if (queue := _SQS_ARN.match(arn)) and queue.group("queue").endswith(".fifo"):
        # the templated SQS target on a FIFO queue: a group id, and content-based deduplication
        if not (target.get("SqsParameters") or {}).get("MessageGroupId"):
            problems.append("Target.SqsParameters.MessageGroupId: required for a FIFO queue")
        if not _content_based(backend, queue.group("queue")):
            problems.append("Target: a FIFO queue needs content-based deduplication enabled")
    if arn.startswith("arn:aws:scheduler:::aws-sdk:"):
        try:
            sent = json.loads(target.get("Input") or "")
        except ValueError:
            sent = None
        if not isinstance(sent, dict):
            problems.append("Target.Input: the API's request parameters, as a JSON object")
    return problems + _failure_problems(target)


# RetryPolicy's and DeadLetterConfig's bounds (API reference: RetryPolicy, DeadLetterConfig);
# the Arn's pattern admits no ".fifo": Scheduler takes no FIFO queue as a dead-letter queue
_DEAD_LETTER_ARN = re.compile(r"^arn:aws(-[a-z]+)?:sqs:[a-z0-9\-]+:\d{12}:[a-zA-Z0-9\-_]+$")


def _failure_problems(target: dict[str, Any]) -> list[str]:
    """Why Scheduler would refuse a target's retry policy or dead-letter queue."""
    problems = []
    policy = target.get("RetryPolicy") or {}
    age = policy.get("MaximumEventAgeInSeconds")
    if age is not None and not 60 <= age <= 86400:
        problems.append("Target.RetryPolicy.MaximumEventAgeInSeconds: 60 to 86400")
    attempts = policy.get("MaximumRetryAttempts")
    if attempts is not None and not 0 <= attempts <= 185:
        problems.append("Target.RetryPolicy.MaximumRetryAttempts: 0 to 185")
    dead_letters = (target.get("DeadLetterConfig") or {}).get("Arn")
    if dead_letters is not None and not _DEAD_LETTER_ARN.match(dead_letters):
        problems.append("Target.DeadLetterConfig.Arn: a standard SQS queue's ARN")
    return problems


def _content_based(backend: Any, queue_name: str) -> bool:
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[backend.account_id][backend.region_name].queues.get(queue_name)
    return bool(queue and str(getattr(queue, "content_based_deduplication", "")).lower() == "true")


@_once
def make_scheduler_strict() -> None:
    """CreateSchedule refuses what EventBridge Scheduler refuses (schedule_problems)."""
    from moto.scheduler.exceptions import ValidationException
    from moto.scheduler.models import EventBridgeSchedulerBackend

    create = EventBridgeSchedulerBackend.create_schedule

    def create_schedule(self: Any, **kwargs: Any) -> Any:
        if problems := schedule_problems(self, kwargs):
            raise ValidationException("; ".join(problems))
        return create(self, **kwargs)

    EventBridgeSchedulerBackend.create_schedule = create_schedule  # type: ignore[assignment]


@_once
def make_iam_simulate() -> None:
    """IAM's SimulatePrincipalPolicy, which moto lacks, answered by the local stack's own
    evaluation (devstack.iam.policy) over the role's inline policies in moto's IAM: how an
    operator checks from outside that a role may read a secret (`make smoke`), and what the
    local stack then answers the same way. Identity policies only, as the API does when no
    ResourcePolicy is given; decisions are allowed, explicitDeny or implicitDeny."""
    import json as json_
    from urllib.parse import unquote

    from moto.core.responses import ActionResult
    from moto.iam.responses import IamResponse

    from devstack.iam.policy import Request, decide

    def simulate_principal_policy(self: Any) -> Any:
        source = self._get_param("PolicySourceArn")
        role = self.backend.get_role(source.rsplit("/", 1)[-1])
        documents = []
        for document in role.policies.values():
            text = document if isinstance(document, str) else json_.dumps(document)
            documents.append(json_.loads(unquote(text)))
        actions = self._get_param("ActionNames") or []
        resources = self._get_param("ResourceArns") or ["*"]
        context = {
            entry["ContextKeyName"]: entry["ContextKeyValues"]
            for entry in self._get_param("ContextEntries") or []
        }
        results = []
        for action in actions:
            for resource in resources:
                decision = decide(Request(action, resource, context), identity=documents)
                verdict = (
                    "allowed"
                    if decision.allowed
                    else ("explicitDeny" if "explicit deny" in decision.reason else "implicitDeny")
                )
                results.append(
                    {
                        "EvalActionName": action,
                        "EvalResourceName": resource,
                        "EvalDecision": verdict,
                    }
                )
        return ActionResult({"EvaluationResults": results, "IsTruncated": False})

    IamResponse.simulate_principal_policy = simulate_principal_policy  # type: ignore[attr-defined]


# the protocols whose endpoint's owner confirms a subscription (SNS's Subscribe reference)
CONFIRMED_BY_THEIR_OWNER = frozenset({"email", "email-json", "http", "https"})
PENDING = "PendingConfirmation"  # the SubscriptionArn SNS lists until then


@_once
def make_sns_faithful() -> None:
    """Subscriptions that their endpoint's owner must confirm stay pending (nobody does here)."""
    from moto.sns.models import SNSBackend

    subscribe = SNSBackend.subscribe

    def subscribe_pending(self: Any, topic_arn: str, endpoint: str, protocol: str) -> Any:
        subscription = subscribe(self, topic_arn, endpoint, protocol)
        if protocol in CONFIRMED_BY_THEIR_OWNER:
            subscription.attributes["PendingConfirmation"] = "true"
        return subscription

    def listed(method: Any) -> Any:
        def list_subscriptions(self: Any, *args: Any, **kwargs: Any) -> Any:
            subscriptions, next_token = method(self, *args, **kwargs)
            return [_as_listed(s) for s in subscriptions], next_token

        return list_subscriptions

    SNSBackend.subscribe = subscribe_pending
    SNSBackend.list_subscriptions = listed(SNSBackend.list_subscriptions)
    SNSBackend.list_subscriptions_by_topic = listed(SNSBackend.list_subscriptions_by_topic)


def _as_listed(subscription: Any) -> dict[str, str]:
    pending = subscription.attributes.get("PendingConfirmation") == "true"
    return {
        "SubscriptionArn": PENDING if pending else subscription.arn,
        "Owner": subscription.owner,
        "Protocol": subscription.protocol,
        "Endpoint": subscription.endpoint,
        "TopicArn": subscription.topic.arn,
    }


POLLY_MAX_BILLED, POLLY_MAX_TOTAL = 3000, 6000
_POLLY_FORMATS = {
    "ogg_opus": "audio/ogg",
    "ogg_vorbis": "audio/ogg",
    "mp3": "audio/mpeg",
    "pcm": "audio/pcm",
    "json": "audio/json",
}


def polly_refusal(params: dict[str, Any]) -> tuple[str, str] | None:
    """What Polly's SynthesizeSpeech refuses in `params` (its error code and message), or None."""
    import xml.etree.ElementTree as ElementTree

    from moto.polly.resources import VOICE_DATA

    voices = {v["Id"]: v for v in VOICE_DATA}
    text, kind = params.get("Text"), params.get("TextType", "text")
    if not isinstance(text, str) or params.get("OutputFormat") not in _POLLY_FORMATS:
        return "ValidationException", "Text and OutputFormat (one of Polly's formats) required"
    voice = voices.get(str(params.get("VoiceId")))
    if voice is None:
        return "ValidationException", f"Value '{params.get('VoiceId')}' at 'voiceId' failed"
    engine = params.get("Engine", "standard")
    if engine not in voice["SupportedEngines"]:
        return "EngineNotSupportedException", (
            "This voice does not support the selected engine: " + str(engine)
        )
    billed = text
    if kind == "ssml":
        try:
            root = ElementTree.fromstring(text)  # noqa: S314 (the tests' own requests, locally)
        except ElementTree.ParseError:
            return "InvalidSsmlException", "Invalid SSML request"
        if root.tag != "speak":
            return "InvalidSsmlException", "Invalid SSML request: the root must be <speak>"
        billed = "".join(root.itertext())  # SSML tags are not billed characters
    if len(text) > POLLY_MAX_TOTAL or len(billed) > POLLY_MAX_BILLED:
        return "TextLengthExceededException", (
            f"Maximum text length has been exceeded ({POLLY_MAX_BILLED} billed characters, "
            f"{POLLY_MAX_TOTAL} in all)"
        )
    return None


@_once
def make_polly_strict() -> None:
    """SynthesizeSpeech as Polly answers it (see the module docstring)."""
    from moto.polly.responses import PollyResponse

    from devstack.ogg import voice_note

    def speech(self: Any) -> Any:
        params = self.json
        refused = polly_refusal(params)
        if refused is not None:
            return self._error(*refused)
        output = params["OutputFormat"]
        spoken = params["Text"]
        audio = voice_note(spoken) if output == "ogg_opus" else b"\0" * max(8, len(spoken))
        return audio, {"Content-Type": _POLLY_FORMATS[output]}

    PollyResponse.speech = speech
