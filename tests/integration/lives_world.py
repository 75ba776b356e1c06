"""The world the life model (tests/integration/test_lives.py) drives: one stack per example,
built from template.yaml on the module's moto server, with the real handlers loaded as Lambda
loads them (webhook, consumer, compactor, admin), Scheduler's firing, DynamoDB's TTL with its
lag, the compactor fed the table's stream through the template's filter, and the admin API on
both doors (IAM's signed request, and the console's JWT door in front of the same function).

Time is the whole process's (time_machine): a step that lets months pass moves the clock every
handler, moto's SQS and Scheduler (devstack.clock.SQS_CLOCK follows time.time), DynamoDB's TTL
and the stand-ins read; nothing sleeps. Every step ends with nothing left to do: the event
queue drained (a failed record's backoff waited out by moving the clock the seconds it asks),
the TTL swept, the compactor handed what the stream's filter lets by.

The model of the people (who holds which phone, who opted out, what is dead) is the machine's;
this module only does what a person, whasp, Meta, AWS or an operator would do."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
import types
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import boto3
import pytest
import urllib3.util.retry

from devstack import RecordingServer, Reply
from devstack.apigw import http_api_event
from devstack.clock import SQS_CLOCK, next_visible_at
from devstack.events import (
    BUSINESS,
    META_DISPLAY_NUMBER,
    META_NUMBER_ID,
    http_event,
    meta_body,
    meta_contact,
    meta_headers,
    meta_message,
    meta_notification,
    meta_status,
    meta_tap,
    signed_headers,
)
from devstack.fake_openai import OFFLINE, notes_of, offline_model, turns_of
from devstack.lambda_harness import LambdaContext, retried, sqs_message_record, stream_filters
from devstack.resources import create_all
from devstack.scheduler import SchedulerFiring, due_at
from devstack.streams import StreamTap
from devstack.ttl import TimeToLive
from tests.conftest import AGENT, TEST_SECRET, _template, load_function

APP_SECRET = "meta-test-app-secret"  # tests.integration.test_meta's
ACCESS_TOKEN = "meta-test-access-token"
ROLE = "arn:aws:iam::123456789012:role/whasp-agent-FollowUpSchedulerRole"
OPERATOR_ARN = "arn:aws:iam::123456789012:user/operator"
LONDON = ZoneInfo("Europe/London")
RETENTION_DAYS = 2  # short, so that a run of a few hundred steps sees people expire
START = datetime(2027, 3, 1, 8, 0, tzinfo=UTC)  # every example starts here (time_machine)

# A person's words, facts, reminders and the operator's replies to them carry a tag:
# canary<person>q-<kind><n> (m: message, f: fact, r: reminder, o: operator's reply, s: summary)
TAG = re.compile(r"canary(\d+)q-([mfros])(\d+)", re.I)
CANARY = re.compile(r"canary(\d+)q", re.I)
REMIND = re.compile(r"remind me in (\d+) days? at (\d+) to (.+)", re.I)
DUE = "A follow-up you scheduled is due now"
REQUESTS: list[tuple[datetime, dict[str, Any]]] = []  # every request the model answered, when


def model(request: dict[str, Any]) -> str | dict[str, Any]:
    """The model, deterministic: devstack's offline model (it repeats what the person said, the
    facts and the summary it was given; at a follow-up's time, the reminder with its subject),
    and the built-in follow-up tools when asked "remind me in N days at H to ..." or "cancel
    the reminder"."""
    REQUESTS.append((datetime.now(UTC), request))
    text_format = (request.get("text") or {}).get("format") or {}
    notes = notes_of(request)
    if text_format.get("type") == "json_schema" or DUE in notes:
        return offline_model(request)
    said = next((t for r, t in reversed(turns_of(request)) if r == "user"), "")
    offered = {tool.get("name") for tool in request.get("tools") or []}
    answered = [
        i
        for i in request.get("input") or []
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    if answered:
        return f"{OFFLINE} Done: {json.loads(answered[-1]['output'])}"
    asked = REMIND.search(said)
    if asked and "schedule_follow_up" in offered:
        local = datetime.now(UTC).astimezone(LONDON) + timedelta(days=int(asked.group(1)))
        when = f"{local.date().isoformat()}T{int(asked.group(2)):02d}:00"
        return _call("schedule_follow_up", {"when": when, "about": asked.group(3).strip()})
    if "which slot suits me" in said and "offer_choices" in offered:
        # the slots to tap (issue 42): the offer's text carries the person's canary
        text = f"{said.split(' ', 1)[0]} pick a slot"
        return _call("offer_choices", {"text": text, "choices": ["09:00", "10:00"]})
    if "log my run" in said and "log_run" in offered:
        return _call("log_run", {"note": said.split(" ", 1)[0]})
    pending = re.findall(r"id (fu-[0-9a-f]+)", notes)
    if "cancel the reminder" in said and "cancel_follow_up" in offered and pending:
        return _call("cancel_follow_up", {"id": pending[0]})
    return offline_model(request)


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call_id = f"call_{name}"
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name}
    return {"output": [{**item, "arguments": json.dumps(arguments), "status": "completed"}]}


class RunLog(RecordingServer):
    """An operator's HTTPS tool (plain HTTP on loopback, as the local stack allows): it logs a
    run for the person who asks (the webhook's caller, never the model's word)."""

    def read(self, request: Any) -> dict[str, Any]:
        return {"json": request.json() if request.body else None}

    def answer(self, request: Any, record: dict[str, Any]) -> Reply:
        return Reply.json(200, {"output": {"logged": True}, "summary": "run logged"})

    def calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r["json"] for r in self.requests if r["path"] == "/tools/log-run"]


def declare_tools(folder: Path, run_log: RunLog) -> Path:
    """tools.json: one HTTPS tool, told the caller's phone."""
    tool = {
        "name": "log_run",
        "description": "Log a run in the person's training diary",
        "parameters": {
            "type": "object",
            "properties": {"note": {"type": "string"}},
            "required": ["note"],
        },
        "https": {"url": f"{run_log.url}/tools/log-run", "timeout_seconds": 2},
        "caller": "phone",
    }
    path = folder / "tools.json"
    path.write_text(json.dumps({"tools": [tool]}))
    return path


class _Tap(StreamTap):
    """The table's stream as Lambda reads it: moto keeps one shard a stream, so its shards are
    described once (a request less on every read)."""

    def _refresh_shards(self) -> None:
        if not self._iterators:
            super()._refresh_shards()


@dataclass
class Servers:
    """What the module starts once: moto, the stand-ins, the console's door, the clock."""

    openai: Any
    whasp: Any
    graph: Any
    door: Any  # tests.integration.test_console_door.Door
    clock: Any  # time_machine's traveller
    run_log: RunLog
    tools_file: Path
    moto: Any  # devstack.aws.MotoServer
    stack: Stack | None = None  # the example's, which the console's door invokes


@dataclass
class Stack:
    """One example's stack: fresh table, queues, schedule group; the handlers loaded on it."""

    servers: Servers
    provider: str
    lag: float
    monkeypatch: pytest.MonkeyPatch = field(default_factory=pytest.MonkeyPatch)
    logs: io.StringIO = field(default_factory=io.StringIO)
    number: str = BUSINESS  # whasp's business number (number.replaced changes it)
    tokens: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    statuses_seen: int = 0  # Graph sends whose status Meta has POSTed
    pauses: list[float] = field(default_factory=list)
    _stream_read: int = 0  # the stream's records the tap has read

    def __post_init__(self) -> None:
        from memagent.observability import logger

        servers = self.servers
        for server in (servers.openai, servers.whasp, servers.graph):
            server.reset()
        servers.run_log.requests.clear()
        servers.openai.responder = model
        servers.graph.templates["reminder"] = {"languages": {"en_GB"}, "parameters": 1}
        self.monkeypatch.setattr(logger.registered_handler, "stream", self.logs)
        # urllib3's pauses between a provider's retries (whasp's backoff) are recorded, not
        # waited: the model's clock is the process's, and real sleeping is for no test
        clock = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if n[0] != "_"})
        clock.sleep = self.pauses.append
        self.monkeypatch.setattr(urllib3.util.retry, "time", clock)
        self.resources = res = create_all(
            f"l{uuid.uuid4().hex[:10]}", _template(), sqs=self.servers.moto.queue_maker()
        )
        self.media = f"{res.table_name}-media"
        boto3.client("s3").create_bucket(Bucket=self.media)
        self.group = f"g-{res.table_name}"
        self.scheduler = boto3.client("scheduler")
        self.scheduler.create_schedule_group(Name=self.group)
        self.sqs = boto3.client("sqs")
        self.queue_url = res.queue_urls["EventQueue"]
        self.queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        provider = self._provider_env()
        follow_ups = {
            "FOLLOW_UP_SCHEDULE_GROUP": self.group,
            "FOLLOW_UP_ROLE_ARN": ROLE,
            "FOLLOW_UP_MAX_PENDING": "3",
            "FOLLOW_UP_DEAD_LETTER_ARN": res.queue_arns["FollowUpDeadLetterQueue"],
        }
        model_env = {
            "OPENAI_API_KEY": "sk-test",
            "OPENAI_MODEL": "gpt-6-luna",
            "OPENAI_BASE_URL": f"{servers.openai.url}/v1",
        }
        table = {"TABLE_NAME": res.table_name, "AGENT_ID": AGENT}
        self.consumer = self._load(
            "consumer",
            {
                **table,
                **provider,
                **model_env,
                **follow_ups,
                "FOLLOW_UP_TEMPLATE": "reminder",
                "FOLLOW_UP_TEMPLATE_LANGUAGE": "en_GB",
                "SYSTEM_PROMPT": "You are Coach, a warm running coach.",
                "PARKING_QUEUE_URL": res.queue_urls["EventDeadLetterQueue"],
                "QUEUE_URL": self.queue_url,
                "MEDIA_BUCKET": self.media,
                "LEDGER_TTL_DAYS": "3650",
                "INACTIVE_RETENTION_DAYS": str(RETENTION_DAYS),
                "TOOLS_FILE": str(servers.tools_file),
                "TOOL_HOSTS": servers.run_log.url,
                # a voice note is answered with one (Meta only: whasp sends text)
                "VOICE_REPLIES": "mirror",
            },
        )
        self.compactor = self._load(
            "compactor",
            {
                **table,
                **model_env,
                "MEDIA_BUCKET": self.media,
                "FAILURE_QUEUE_URL": res.queue_urls["CompactionFailureQueue"],
                "FOLLOW_UP_SCHEDULE_GROUP": self.group,  # an expiry deletes the schedules
            },
        )
        self.admin = self._load(
            "admin",
            {
                **table,
                **provider,
                **follow_ups,
                "FOLLOW_UP_QUEUE_URL": self.queue_url,
                "CSAT_QUEUE_URL": self.queue_url,  # a hand-back's rating question
                "MEDIA_BUCKET": self.media,
                "LEDGER_TTL_DAYS": "3650",
                "CONSOLE_CLIENT_ID": servers.door.pool.client_id,
                "CONSOLE_LOGIN_URL": servers.door.pool.login.url,
            },
        )
        if self.provider == "meta":
            webhook_env = {"PROVIDER": "meta", "META_APP_SECRET": APP_SECRET}
            webhook_env["META_VERIFY_TOKEN"] = "meta-test-verify-token"
        else:
            webhook_env = {"WEBHOOK_SECRET": TEST_SECRET}
        self.webhook = self._load(
            "webhook", {"QUEUE_URL": self.queue_url, "AGENT_ID": AGENT, **webhook_env}
        )
        self.firing = SchedulerFiring(self.scheduler, self.sqs, self.group)
        self.tap = _Tap(res.stream_arn, stream_filters(_template()))
        self.tap.skip_to_end()
        self._stream_grew()  # read
        self.ttl = TimeToLive(lag=self.lag, table=res.table_name)
        servers.stack = self

    def _provider_env(self) -> dict[str, str]:
        if self.provider == "meta":
            graph = self.servers.graph
            return {
                "PROVIDER": "meta",
                "META_GRAPH_URL": graph.url,
                "META_ACCESS_TOKEN": ACCESS_TOKEN,
            }
        whasp = self.servers.whasp
        return {"PROVIDER": "whasp", "WHASP_API_URL": whasp.url, "WHASP_API_KEY": "whasp-test-key"}

    def _load(self, name: str, env: dict[str, str]) -> Any:
        return load_function(name, env, self.monkeypatch)

    def close(self) -> None:
        self.monkeypatch.undo()
        self.servers.stack = None
        if hasattr(self, "resources"):  # freed: its items would stay in moto's memory
            self.servers.moto.forget(self.resources)

    # ------------------------------------------------------------------ the clock

    def now(self) -> datetime:
        return datetime.now(UTC)

    def let_pass(self, seconds: float) -> None:
        self.servers.clock.shift(timedelta(seconds=seconds))

    # ------------------------------------------------------------------ the providers' POSTs

    def whasp_post(self, event: dict[str, Any]) -> None:
        body = json.dumps(event).encode()
        response = self.webhook.handler(
            http_event(body, signed_headers(body, event["id"], secret=TEST_SECRET)), LambdaContext()
        )
        assert response["statusCode"] == 200, response

    def whasp_message(self, chat: str, text: str, event_id: str) -> dict[str, Any]:
        stamp = self.now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
        message = {"id": f"msg_{event_id[4:]}", "type": "text", "text": text, "timestamp": stamp}
        data = {"number": self.number, "chat": chat, "label": "Coach", "message": message}
        return {"id": event_id, "type": "message.received", "created_at": stamp, "data": data}

    def whasp_event(self, kind: str, data: dict[str, Any], event_id: str) -> dict[str, Any]:
        stamp = self.now().isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return {"id": event_id, "type": kind, "created_at": stamp, "data": data}

    def meta_post(self, notification: dict[str, Any]) -> None:
        body = meta_body(notification)
        event = http_event(body, meta_headers(body, app_secret=APP_SECRET))
        response = self.webhook.handler(event, LambdaContext())
        assert response["statusCode"] == 200, response

    def meta_text(self, text: str, *, phone: str | None, bsuid: str | None, wamid: str) -> dict:
        at = int(self.now().timestamp())
        return meta_notification(
            contacts=[meta_contact(phone=phone, bsuid=bsuid)],
            messages=[meta_message(text, phone=phone, bsuid=bsuid, timestamp=at, wamid=wamid)],
        )

    def meta_voice(self, said: str, *, phone: str | None, bsuid: str | None, wamid: str) -> dict:
        """A voice note saying `said` (devstack.ogg), its audio at the Graph stand-in."""
        from devstack.ogg import voice_note

        media_id = self.servers.graph.add_media(voice_note(said), "audio/ogg; codecs=opus")
        body = {"mime_type": "audio/ogg; codecs=opus", "id": media_id, "voice": True}
        at = int(self.now().timestamp())
        note = meta_message(
            phone=phone, bsuid=bsuid, kind="audio", body=body, timestamp=at, wamid=wamid
        )
        return meta_notification(contacts=[meta_contact(phone=phone, bsuid=bsuid)], messages=[note])

    def meta_tapped(
        self, sent: dict, option: str, *, phone: str | None, bsuid: str | None, wamid: str
    ) -> dict:
        """The person taps `option` on the interactive message `sent` (the Graph's record)."""
        at = int(self.now().timestamp())
        tap = meta_tap(sent, option, phone=phone, bsuid=bsuid, timestamp=at, wamid=wamid)
        return meta_notification(contacts=[meta_contact(phone=phone, bsuid=bsuid)], messages=[tap])

    def meta_echo(self, text: str, *, phone: str | None, bsuid: str | None, wamid: str) -> dict:
        """What staff typed in the WhatsApp Business app (smb_message_echoes), to a person."""
        echo = {"from": META_DISPLAY_NUMBER, "id": wamid, "type": "text", "text": {"body": text}}
        echo["timestamp"] = str(int(self.now().timestamp()))
        if phone:
            echo["to"] = phone.removeprefix("+")
        if bsuid:
            echo["to_user_id"] = bsuid
        return meta_notification(field="smb_message_echoes", message_echoes=[echo])

    def meta_user_id_changed(self, old: str, new: str, wamid: str) -> dict:
        at = int(self.now().timestamp())
        message = {"id": wamid, "timestamp": str(at), "type": "system", "from_user_id": old}
        message["system"] = {
            "type": "user_changed_user_id",
            "body": "User changed",
            "user_id": new,
            "previous_user_id": old,
        }
        return meta_notification(messages=[message])

    # ------------------------------------------------------------------ AWS doing its part

    def settle(self, *, rounds: int = 40) -> list[str]:
        """Everything due done: Scheduler fires what is due (twice: at least once), the queue
        is drained into the consumer (a failed record's backoff waited out by moving the clock
        to when it is visible again), the TTL sweeps and the compactor gets what the stream's
        filter lets by. Returns what went wrong on the way (for the model to judge)."""
        problems: list[str] = []
        for _ in range(rounds):
            if self.firing.retrying or self._due_in_moto():
                self.firing.fire_due(repeat=2)
            while self._deliver() + self._statuses():
                pass
            self.ttl.sweep()
            problems += self._compact()
            visible_at = next_visible_at(self.queue_url)
            if visible_at is None:
                return problems
            self.let_pass(max(0.0, visible_at - self.now().timestamp()) + 0.01)
        problems.append("the event queue never drained")
        return problems

    # What moto holds, looked at in-process (as devstack.ttl and devstack.clock do), so that a
    # step with nothing to do sends no request: a short run's time goes to the handlers' work.

    def _due_in_moto(self) -> bool:
        """Whether a schedule of the group is due by now (fire_due would invoke something)."""
        now = self.now()
        return any(
            (at := due_at(schedule.to_dict())) is not None and at <= now
            for schedule in self._moto_schedules()
        )

    def _moto_schedules(self) -> list[Any]:
        from moto.scheduler.models import scheduler_backends

        return [
            schedule
            for regions in scheduler_backends.values()
            for backend in regions.values()
            if (group := backend.schedule_groups.get(self.group)) is not None
            for schedule in list(group.schedules.values())
        ]

    def _moto_table(self) -> Any:
        from moto.dynamodb.models import dynamodb_backends

        name = self.resources.table_name
        return next(
            backend.tables[name]
            for regions in dynamodb_backends.values()
            for backend in regions.values()
            if name in backend.tables
        )

    def _visible_in_moto(self) -> bool:
        """Whether the event queue holds a message a receive could return now."""
        from moto.sqs.models import sqs_backends

        name = self.queue_url.rstrip("/").rsplit("/", 1)[-1]
        now_ms = SQS_CLOCK.now() * 1000
        for regions in sqs_backends.values():
            for backend in regions.values():
                if (queue := backend.queues.get(name)) is not None:
                    for message in list(queue._messages):
                        delayed = getattr(message, "delayed_until", 0) or 0
                        if max(message.visible_at, delayed) <= now_ms:
                            return True
        return False

    def _stream_grew(self) -> bool:
        """Whether the table's stream holds records the tap has not read."""
        from devstack.moto_fixes import locked

        with locked():
            shard = self._moto_table().stream_shard
            length = 0 if shard is None else len(shard.items)
        grew, self._stream_read = length != self._stream_read, length
        return grew

    def _deliver(self) -> int:
        messages: list[dict[str, Any]] = []
        while self._visible_in_moto() and (
            batch := self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=10,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0,
            ).get("Messages", [])
        ):
            messages.extend(batch)
        if not messages:
            return 0
        records = {"Records": [sqs_message_record(m, self.queue_arn) for m in messages]}
        failed = set(retried(self.consumer.handler, records, LambdaContext()))
        # what succeeded is deleted (Lambda's event source mapping does it, in batches); a
        # failed one stays in flight until its visibility ends (the consumer sets it)
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": m["ReceiptHandle"]}
                for n, m in enumerate(done[start : start + 10])
            ]
            answer = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            assert not answer.get("Failed"), answer["Failed"]
        return len(messages)

    def _statuses(self) -> int:
        """Meta's `sent` status of each message the Graph stand-in accepted since the last
        look, POSTed to the webhook as Meta does (it carries our send key: delivery.py records
        the part as sent from it). whasp keeps its own idempotency keys: nothing to do."""
        if self.provider != "meta":
            return 0
        sent = self.servers.graph.sent[self.statuses_seen :]
        self.statuses_seen += len(sent)
        for message in sent:
            who = {"phone" if message["field"] == "to" else "bsuid": message["to"]}
            status = meta_status(message["id"], "sent", callback=message["callback"], **who)
            self.meta_post(meta_notification(statuses=[status]))
        return len(sent)

    def _compact(self) -> list[str]:
        if not self._stream_grew():
            return []
        records = self.tap.matching()
        for _ in range(4):
            if not records:
                return []
            response = self.compactor.handler({"Records": records}, LambdaContext())
            failed = {f["itemIdentifier"] for f in response.get("batchItemFailures", [])}
            records = [r for r in records if r["dynamodb"]["SequenceNumber"] in failed]
        return [f"the compactor kept failing {len(records)} stream record(s)"] if records else []

    def items(self) -> list[dict[str, Any]]:
        """Every item of the table, as a consistent Scan through boto3's resource returns it."""
        from devstack.moto_fixes import locked

        with locked():
            return [
                {name: _plain(value) for name, value in item.attrs.items()}
                for item in self._moto_table().all_items()
            ]

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule of the group, as GetSchedule has it (the fields the model reads)."""
        return [schedule.to_dict() for schedule in self._moto_schedules()]

    # ------------------------------------------------------------------ the operator's doors

    def admin_call(
        self, door: str, method: str, path: str, body: Any = None, **headers: str
    ) -> tuple[int, Any]:
        """One request to the admin API: through IAM ("iam": a signed request's event), or
        through the console's door, signed in as an admin ("console-admin") or an operator
        ("console-operator"): an access token, over HTTP, through the JWT authorizer."""
        raw = json.dumps(body).encode() if body is not None else b""
        headers = {"content-type": "application/json", **headers}
        if door == "iam":
            path, _, query = path.partition("?")
            event = http_api_event(
                method=method,
                path=path,
                headers=headers,
                body=raw,
                query=query,
                caller=OPERATOR_ARN,
            )
            response = self.admin.handler(event, LambdaContext())
            return response["statusCode"], json.loads(response["body"] or "null")
        token = self._token(door.removeprefix("console-"))
        request = urllib.request.Request(
            self.servers.door.api.url + path,
            data=raw or None,
            method=method,
            headers={**headers, "Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def _token(self, user: str) -> str:
        """A fresh access token (they last an hour: the clock may have moved months)."""
        name = "admin" if user == "admin" else "operator"
        token, at = self.tokens.get(name, ("", START - timedelta(days=1)))
        if self.now() - at > timedelta(minutes=30) or self.now() < at:
            token = self.servers.door.sign_in(name)["access_token"]
            self.tokens[name] = (token, self.now())
        return token


@contextlib.contextmanager
def console_door(servers: Callable[[], Servers | None]) -> Iterator[Any]:
    """The console's API (ConsoleApi) as tests.integration.test_console_door builds it: moto's
    Cognito pool from template.yaml, its managed login, API Gateway's JWT authorizer, in front
    of the admin function of the example's stack (`servers().stack.admin`)."""
    from devstack import cfn
    from devstack.apigw import LocalHttpApi, Route
    from devstack.aws import REGION
    from devstack.cognito import JwtAuthorizer, LocalUserPool
    from devstack.lambda_harness import Outcome
    from devstack.resources import load_template
    from tests.integration.test_console_door import Door

    template = load_template()
    cognito = {
        lid: r for lid, r in template["Resources"].items() if r["Type"].startswith("AWS::Cognito::")
    }
    api = LocalHttpApi("ConsoleApi", []).start()

    # the intrinsics the pool's properties use, resolved as the local stack resolves them
    resolver = cfn.Resolver(template, cfn.parameter_values(template, {}))
    pool = LocalUserPool.create(cognito, resolver.resolve, api.url + "/")
    moto = boto3.client("cognito-idp")._endpoint.host
    jwks = f"{moto}/{pool.pool_id}/.well-known/jwks.json"
    api.authorizer = JwtAuthorizer(
        issuer=f"https://cognito-idp.{REGION}.amazonaws.com/{pool.pool_id}",
        audience=(pool.client_id,),
        jwks_url=jwks,
    )

    def invoke(event: dict[str, Any]) -> Outcome:
        stack = servers().stack  # type: ignore[union-attr]
        return Outcome(ok=True, result=stack.admin.handler(event, LambdaContext()))

    api.route([Route("GET", "/", invoke), Route("ANY", "/{proxy+}", invoke, auth="JWT")])
    try:
        yield Door(pool, api, jwks)
    finally:
        api.stop()
        pool.stop()


def _plain(value: Any) -> Any:
    """A moto attribute value as boto3's TypeDeserializer gives it (numbers as Decimal)."""
    kind, raw = value.type, value.value
    if kind == "M":
        return {name: _plain(each) for name, each in raw.items()}
    if kind == "L":
        return [_plain(each) for each in raw]
    if kind == "N":
        return Decimal(raw)
    if kind == "NS":
        return {Decimal(each) for each in raw}
    if kind in ("SS", "BS"):
        return set(raw)
    if kind == "NULL":
        return None
    return raw  # S, B, BOOL


def whasp_opt_out(stack: Stack, phone: str, opted_out: bool) -> None:
    """whasp's own opt-out list (it refuses sends to a chat that wrote STOP: 409)."""
    if opted_out:
        stack.servers.whasp.opted_out.add(phone)
    else:
        stack.servers.whasp.opted_out.discard(phone)


__all__ = ["BUSINESS", "META_NUMBER_ID", "Servers", "Stack", "model"]
