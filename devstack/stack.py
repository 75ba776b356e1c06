"""The whole pipeline on one machine: the real handlers, unchanged, behind local stand-ins.

    whasp or Meta (you) --signed POST--> LocalHttpApi --payload 2.0--> webhook  (environment)
                                                                  | SendMessage
    moto:  SQS FIFO  --QueueDelivery (batches, groups, retries, DLQ)--> consumer (environments)
           DynamoDB  <------------------------------------------------------'  |  \\
           stream --StreamDelivery (FilterCriteria, retries, OnFailure)--> compactor   \\
           SQS CompactionFailureQueue --QueueDelivery (later, on a backoff)--'
    FakeWhasp | FakeGraph <-- replies              model <-- Responses API, store=false

`provider="meta"` (or PROVIDER=meta) runs the stack as a Meta WhatsApp Cloud API deployment: the
template's Provider parameter is meta, people's messages arrive as Meta notifications signed
with X-Hub-Signature-256, and replies, read receipts and media go to a local Graph API stand-in
(devstack.fake_meta.FakeGraph).

Everything is read from template.yaml: the table and queues (devstack.resources), each function's
code, handler, timeout, memory and environment with its intrinsics resolved (devstack.cfn), the
HTTP routes, the SQS batch size and concurrency, the stream's filter, batch size, retries and
failure queue. Secrets are SecureStrings in moto's Parameter Store under the template's
SecretsPrefix, read by the functions exactly as in AWS.

    with DevStack() as stack:
        stack.send_message("+447700900123", "Hi! I start the new job on Monday")
        stack.wait_idle()
        stack.whasp.texts_to("+447700900123")

The model: `OPENAI_BASE_URL` (any OpenAI-compatible server: Ollama, vLLM, LM Studio) with
`OPENAI_API_KEY` or a dummy key; else `OPENAI_API_KEY` alone (OpenAI itself); else a local
stand-in answering with devstack.fake_openai.offline_model, which is not AI and says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self
from urllib.parse import quote

from devstack import Started, cfn, in_parallel, moto_fixes
from devstack.alarms import create_alarms
from devstack.apigw import LocalHttpApi, Route
from devstack.aws import REGION, MotoServer, aws_env
from devstack.clock import SQS_CLOCK
from devstack.console import Console
from devstack.delivery import QueueDelivery, StreamDelivery, queue_counts
from devstack.events import META_TEST_APP_SECRET, META_TEST_VERIFY_TOKEN
from devstack.lambda_harness import Outcome, memagent_logs_to, stream_filters
from devstack.resources import ROOT, LocalResources, create_all, create_table, load_template
from devstack.runtime import FunctionPool, base_environment
from devstack.ttl import DEFAULT_LAG_SECONDS, TimeToLive
from memagent.memory.person import LOCAL_PERSON_KEY

# The documented TEST-ONLY webhook secret (scripts/sign_events.py, tests/conftest.py). Public on
# purpose: the local endpoint accepts what the sample events and the docs sign with it.
TEST_SECRET = "whsec_bWVtYWdlbnQtdGVzdC1vbmx5LXNlY3JldC1kby1ub3QtdXNl"  # noqa: S105
BUSINESS_NUMBER = "+14155550100"
LOG_PATH = ROOT / "local" / "stack.log"
DUMMY_KEY = "sk-local-no-key-needed"
# Waits on this machine, kept within the tests' 50 ms bound: whasp retries a 5xx after seconds
# to minutes; here the retry only has to come after the failure, not at whasp's pace. The idle
# check reads the queue's counters over HTTP, so it polls rather than spins.
RETRY_PAUSE_SECONDS = 0.05
IDLE_POLL_SECONDS = 0.05
STOP_WORDS = frozenset({"stop", "unsubscribe"})  # what whasp treats as an opt-out


# The calls the stacks of this process were refused and nobody has read yet: tests/conftest.py
# fails the test during which a stack was refused one (a sufficiency check on every stack run).
_REFUSED: list[dict[str, Any]] = []  # from stacks stopped since the last read
_RUNNING: set[DevStack] = set()
_REFUSED_LOCK = threading.Lock()


def unread_refusals() -> list[dict[str, Any]]:
    """Refusals seen since the last call, from running and stopped stacks alike."""
    with _REFUSED_LOCK:
        found, _REFUSED[:] = list(_REFUSED), []
        running = list(_RUNNING)
    for stack in running:
        found += stack._unread_refusals()
    return found


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class ModelChoice:
    kind: str  # "offline" | "openai" | "compatible"
    model: str
    base_url: str | None  # None: api.openai.com
    api_key: str

    @property
    def offline(self) -> bool:
        return self.kind == "offline"

    @property
    def label(self) -> str:
        if self.kind == "offline":
            return "OFFLINE STAND-IN, NOT AI: a scripted echo that shows the memory mechanics"
        if self.kind == "openai":
            return f"{self.model} on api.openai.com (your OPENAI_API_KEY; store=false)"
        return f"{self.model} at {self.base_url} (OpenAI-compatible server)"


def choose_model(
    env: Mapping[str, str] | None = None,
    model: str | None = None,
    *,
    template: dict[str, Any] | None = None,
) -> ModelChoice:
    """OPENAI_BASE_URL -> that server; else OPENAI_API_KEY -> OpenAI; else the offline stand-in.
    The model is `model`, else OPENAI_MODEL, else the template's OpenAIModel default."""
    env = os.environ if env is None else env
    parameters = (template or load_template()).get("Parameters") or {}
    default = str((parameters.get("OpenAIModel") or {}).get("Default", "gpt-6-luna"))
    name = model or env.get("OPENAI_MODEL") or default
    base_url, key = env.get("OPENAI_BASE_URL"), env.get("OPENAI_API_KEY")
    if base_url:
        return ModelChoice("compatible", name, base_url.rstrip("/"), key or DUMMY_KEY)
    if key:
        return ModelChoice("openai", name, None, key)
    return ModelChoice("offline", name, None, DUMMY_KEY)


# --------------------------------------------------------------------------- what we read back


@dataclass(frozen=True)
class Delivery:
    """The answer of the local webhook endpoint to one POST."""

    event_id: str
    status: int
    body: Any


@dataclass(frozen=True)
class PersonView:
    """A person's memory as stored, for display and checks."""

    pk: str
    last_seq: int = 0
    marker: int = 0
    summary: str | None = None
    facts: list[str] = field(default_factory=list)
    turns: list[tuple[int, str, str]] = field(default_factory=list)  # (seq, role, text)
    opted_out: bool = False
    last_number: str | None = None
    erased_at: str | None = None
    compaction_due: bool = False
    items: list[dict[str, Any]] = field(default_factory=list)

    @property
    def pending(self) -> int:
        return self.last_seq - self.marker


# --------------------------------------------------------------------------- the stack


class DevStack(Started):
    """See the module docstring. Options:

    agent_id            the AgentId parameter (memory is keyed by agent and phone); default:
                        the template's
    model               a model name (else OPENAI_MODEL, else the template's default)
    env                 where to look for OPENAI_BASE_URL / OPENAI_API_KEY (default os.environ)
    consumer_concurrency  environments of the consumer (different people in parallel)
    webhook_concurrency   environments of the webhook
    ttl_lag             how long (AWS time, seconds) DynamoDB's TTL leaves an expired item before
                        deleting it (devstack.ttl; on AWS "typically within two days")
    time_scale          how much faster than AWS the queue's clock runs (devstack.clock): a failed
                        record comes back after the backoff the consumer set, or the queue's
                        visibility timeout, divided by this
    idle_jump           when nothing is visible and nothing runs, jump the queue's clock to the next
                        retry (the schedule is kept, the waiting is skipped). Off by default: with
                        a real model that is down, `make chat` would otherwise run through every
                        retry in seconds; at 60x, the 15-minute cap is 15 s
    parameters          more template parameter overrides (SystemPromptFile, OptOutPolicy ...)
    extra_env           more environment variables for every function (COMPACT_THRESHOLD ...)
    template            a parsed template (default: template.yaml)
    provider            "whasp" or "meta" (default: PROVIDER, else whasp)
    console / level     where progress goes: "quiet", "normal" or "verbose"
    log_path            the detailed log (functions' Powertools JSON, the stack's own lines)
    warm                start each function's first execution environment with the stack (the
                        default); False: on its first invocation, as Lambda's cold start, for a
                        stack whose functions a test never invokes (its IAM, its resources)
    iam                 check every AWS call each function makes against its role, as IAM would
                        (devstack.iam; on by default): a refused call is AccessDenied, and
                        `iam_refusals()` lists them; "record": list them, refuse nothing (one
                        run names every missing grant, not only the first)
    """

    def __init__(
        self,
        *,
        agent_id: str | None = None,
        model: str | None = None,
        env: Mapping[str, str] | None = None,
        consumer_concurrency: int = 3,
        webhook_concurrency: int = 2,
        time_scale: float = 60.0,
        idle_jump: bool = False,
        ttl_lag: float = DEFAULT_LAG_SECONDS,
        parameters: Mapping[str, str] | None = None,
        extra_env: Mapping[str, str] | None = None,
        template: dict[str, Any] | None = None,
        webhook_secret: str = TEST_SECRET,
        business_number: str = BUSINESS_NUMBER,
        console: Console | None = None,
        level: str = "normal",
        log_path: Path | str = LOG_PATH,
        provider: str | None = None,
        iam: bool | str = True,
        warm: bool = True,
    ):
        self.template = template if template is not None else load_template()
        # the template's AgentId default unless told otherwise (make chat --agent-id, AGENT_ID)
        self.agent_id = agent_id or str(self.template["Parameters"]["AgentId"]["Default"])
        self.provider = provider or os.environ.get("PROVIDER") or "whasp"
        if self.provider not in ("whasp", "meta"):
            raise ValueError(f"provider must be whasp or meta, not {self.provider!r}")
        self.model = choose_model(env, model, template=self.template)
        self.consumer_concurrency = consumer_concurrency
        self.webhook_concurrency = webhook_concurrency
        self.time_scale = time_scale
        self.idle_jump = idle_jump
        self.ttl_lag = ttl_lag
        self.ttl: TimeToLive | None = None  # DynamoDB's TTL on the table, on AWS's clock
        self._undo = contextlib.ExitStack()  # the process-wide things the stack changed
        self.parameters = dict(parameters or {})
        self.extra_env = dict(extra_env or {})
        self.webhook_secret = webhook_secret
        self.business_number = business_number
        self.console = console or Console(level=level)
        self.log_path = Path(log_path)
        self.prefix = f"local-{uuid.uuid4().hex[:6]}"
        self.clock_offset = timedelta(0)  # events are dated now + offset ("let days pass")
        if iam not in (True, False, "record"):
            raise ValueError(f"iam must be True, False or 'record', not {iam!r}")
        self.warm = warm
        self.iam_enforced = bool(iam)  # each function's AWS calls checked against its role
        self.iam_refuses = iam is True  # "record": refusals recorded, the calls let through
        self.iam: Any = None  # devstack.iam.roles.StackIam, resolved at start
        self._iam_dir: Any = None  # tempfile.TemporaryDirectory: the guards' files, the record
        self._refusals_read = 0  # how many of the record's refusals unread_refusals() gave

        self.moto: MotoServer | None = None
        self.whasp: Any = None  # devstack.fake_whasp.FakeWhasp
        self.graph: Any = None  # devstack.fake_meta.FakeGraph (provider meta)
        self.openai: Any = None  # devstack.fake_openai.FakeOpenAI, when offline
        self.lambda_api: Any = None  # devstack.fake_lambda.FakeLambda: tools' functions
        self.resources: LocalResources | None = None
        self.functions: dict[str, cfn.FunctionSpec] = {}
        self.pools: dict[str, FunctionPool] = {}
        self.apis: dict[str, LocalHttpApi] = {}
        self.queue_delivery: QueueDelivery | None = None
        self.stream_delivery: StreamDelivery | None = None
        self.retry_delivery: QueueDelivery | None = None  # CompactionFailureQueue -> compactor
        self.schedule_group: str | None = None  # FollowUps=true: the stack's schedule group
        self.scheduler: Any = None  # devstack.scheduler.SchedulerFiring, on AWS's clock
        self.user_pool: Any = None  # devstack.cognito.LocalUserPool (OperatorConsole=true)
        self.console_api: LocalHttpApi | None = None  # its console's door (JWT)
        self.webhook_url = ""
        self.buckets: dict[str, str] = {}  # logical id -> bucket name
        self.alarms: dict[str, str] = {}  # logical id -> alarm name (devstack.alarms)
        self._cfn: cfn.Resolver | None = None
        self._webhook_route: tuple[str, str] | None = None  # (HTTP API, path)
        self._saved_env: dict[str, str | None] = {}
        self._log: Any = None
        self._log_lock = threading.Lock()
        self._sent = threading.Condition()
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> Self:
        if self._started:
            return self
        self._started = True
        began = time.monotonic()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.console.event(
            "stack", f"ready in {time.monotonic() - began:.1f} s; detailed log: {self._shown_log()}"
        )
        return self

    def _start(self) -> None:
        from devstack.fake_whasp import FakeWhasp

        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")  # a fresh log per run; everyone then appends (O_APPEND)
        self._log = open(self.log_path, "a", encoding="utf-8", buffering=1)  # noqa: SIM115
        moto_fixes.apply()
        self._undo.enter_context(SQS_CLOCK.scaled(self.time_scale))
        # operator actions run here (lifecycle.forget from the demo or the chat) log through
        # memagent's logger: into the detailed log too, like the functions' lines
        self._undo.enter_context(memagent_logs_to(self._log))
        self.moto = MotoServer().start()
        # the documented local person key: the functions read it from moto's Secrets Manager
        # (a local run: MEMAGENT_LOCAL_STACK lets the operator's calls made here use it too)
        self._use_aws_env(
            {**aws_env(self.moto.url), "PERSON_KEY": LOCAL_PERSON_KEY, "MEMAGENT_LOCAL_STACK": "1"}
        )
        self.resources = create_all(self.prefix, self.template)
        self.console.event(
            "stack",
            f"moto at {self.moto.url}: table and {len(self.resources.queue_urls)} queues "
            "created from template.yaml",
        )
        self.whasp = FakeWhasp(api_key=secrets.token_urlsafe(16), on_send=self._on_send).start()
        if self.meta:
            from devstack.events import META_NUMBER_ID
            from devstack.fake_meta import FakeGraph

            self.graph = FakeGraph(
                access_token=secrets.token_urlsafe(16),
                numbers={META_NUMBER_ID},
                on_send=self._on_send,
            ).start()
            self.business_number = META_NUMBER_ID
            self.console.event("stack", f"provider meta: Graph API stand-in at {self.graph.url}")
        base_url = self.model.base_url
        if self.model.offline:
            from devstack.fake_openai import FakeOpenAI

            # ModelProvider=bedrock: bedrock-runtime's path, and only the roles' (moto's) tokens
            bedrock = self.parameters.get("ModelProvider") == "bedrock"
            self.openai = FakeOpenAI(bedrock_key_id="testing" if bedrock else None).start()
            base_url = f"{self.openai.url}{'/openai' if bedrock else ''}/v1"
            if bedrock:
                self.console.event(
                    "model", "ModelProvider bedrock: bedrock-runtime's path, IAM token"
                )
        self.console.event("model", self.model.label)

        from devstack.fake_lambda import FakeLambda

        self.lambda_api = FakeLambda().start()  # the consumer invokes tools' functions here
        resolver = self._cfn = self._resolver(base_url)
        self._create_buckets(resolver)
        self.alarms = create_alarms(self.template, resolver, self.prefix)
        self.functions = cfn.functions(self.template, resolver, ROOT)
        if self.iam_enforced:
            self._resolve_iam(resolver)
        # moto's Parameter Store takes seconds to initialise: overlap it with the cold starts
        # (the functions read their secrets on first use, after both are done).
        in_parallel([self._start_functions, self._store_secrets])
        for logical_id, spec in self.functions.items():
            if self._role(spec) == "other":  # a tool's function (the example booking tool)
                self.lambda_api.functions[self.function_arn(logical_id)] = self._invoker(logical_id)
        self._start_apis()
        self._start_deliveries(resolver)

    # ------------------------------------------------------------------ IAM

    def _resolve_iam(self, resolver: cfn.Resolver) -> None:
        """The template's roles for this shape of the stack; the checks AWS makes when it
        creates the stack (the Lambda service assumes each function's role; an event source
        mapping's role may read its source); and each function's guard file."""
        import tempfile

        from devstack.iam.roles import StackIam

        self.iam = iam = StackIam.from_template(
            self.template,
            resolver,
            role_arn=lambda lid: f"arn:aws:iam::{cfn.ACCOUNT_ID}:role/{self.prefix}-{lid}",
        )
        self._create_roles(iam)
        self._iam_dir = tempfile.TemporaryDirectory(prefix="devstack-iam-")
        self.iam_record = Path(self._iam_dir.name) / "decisions.jsonl"
        self.iam_record.touch()
        for logical_id, spec in self.functions.items():
            role = iam.function_role[logical_id]
            if not iam.service_may_assume(role, "lambda.amazonaws.com", {}):
                raise cfn.TemplateError(
                    f"{logical_id}: the Lambda service cannot assume {role} (its trust policy)"
                )
            self._check_event_sources(spec, role, resolver)
            config = {
                "function": self.function_name(logical_id),
                "role": iam.roles[role].as_json(),
                "roles": [r.as_json() for r in iam.roles.values()],
                "resource_policies": iam.resource_policies,
                "record": str(self.iam_record),
                "enforce": self.iam_refuses,
                "region": REGION,
                "account": cfn.ACCOUNT_ID,
            }
            (Path(self._iam_dir.name) / f"{logical_id}.json").write_text(json.dumps(config))
        with _REFUSED_LOCK:
            _RUNNING.add(self)

    def _create_roles(self, iam: Any) -> None:
        """The roles in moto's IAM too, as CloudFormation creates them: what an operator reads
        from outside (GetRole, SimulatePrincipalPolicy: devstack.moto_fixes) is the template's."""
        import boto3

        client = boto3.client("iam")
        for role in iam.roles.values():
            name = role.arn.rsplit("/", 1)[-1]
            client.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(role.trust))
            for number, document in enumerate(role.policies):
                client.put_role_policy(
                    RoleName=name,
                    PolicyName=f"policy-{number}",
                    PolicyDocument=json.dumps(document),
                )

    def _check_event_sources(
        self, spec: cfn.FunctionSpec, role: str, resolver: cfn.Resolver
    ) -> None:
        """What CreateEventSourceMapping checks of the function's role (Lambda's guide: the
        execution role permissions for SQS and DynamoDB Streams), and what its OnFailure
        destination needs."""
        from devstack.iam.policy import Request

        assert self.iam is not None
        needed: list[Request] = []
        for event in spec.events.values():
            props = resolver.resolve(event.get("Properties") or {})
            if event.get("Type") == "SQS":
                needed += [
                    Request(f"sqs:{a}", props["Queue"])
                    for a in ("ReceiveMessage", "DeleteMessage", "GetQueueAttributes")
                ]
            elif event.get("Type") == "DynamoDB":
                needed += [
                    Request(f"dynamodb:{a}", props["Stream"])
                    for a in ("DescribeStream", "GetRecords", "GetShardIterator")
                ]
                # ListStreams too in Lambda's list, but it has no resource type (the Service
                # Authorization Reference): SAM's own DynamoDBStreamReadPolicy scopes it to the
                # stream, which IAM never matches, and mappings work: the poller does not need it
                failure = (props.get("DestinationConfig") or {}).get("OnFailure") or {}
                if failure.get("Destination"):
                    needed.append(Request("sqs:SendMessage", failure["Destination"]))
        for request in needed:
            decision = self.iam.decide(role, request)
            if not decision.allowed:
                raise cfn.TemplateError(
                    f"{spec.logical_id}'s event source: the execution role {role} may not "
                    f"{request.action} on {request.resource} ({decision.reason})"
                )

    def iam_decisions(self) -> list[dict[str, Any]]:
        """Every authorisation the functions asked for so far (devstack.iam.guard's record)."""
        record = getattr(self, "iam_record", None)
        if record is None or not Path(record).exists():
            return []
        return [json.loads(line) for line in Path(record).read_text().splitlines() if line]

    def iam_refusals(self) -> list[dict[str, Any]]:
        """The calls a function's role was refused: function, action, resource, why."""
        return [d for d in self.iam_decisions() if not d["allowed"]]

    def _unread_refusals(self) -> list[dict[str, Any]]:
        refusals = self.iam_refusals()
        found, self._refusals_read = refusals[self._refusals_read :], len(refusals)
        return found

    def _keep_refusals(self) -> None:
        """At stop: what was refused and not read stays readable (`unread_refusals`)."""
        found = self._unread_refusals()
        with _REFUSED_LOCK:
            _RUNNING.discard(self)
            _REFUSED.extend(found)

    def _invoker(self, logical_id: str) -> Any:
        pool = self.pools[logical_id]

        def invoke(event: Any, _context: Any) -> Any:
            outcome = pool.invoke(event)
            if not outcome.ok:
                raise RuntimeError(f"{outcome.error_type}: {outcome.error_message}")
            return outcome.result

        return invoke

    def stop(self) -> None:
        """Stop everything this stack started, newest first; safe to call twice."""
        for api in self.apis.values():
            api.stop()
        if self.console_api is not None:
            self.console_api.stop()
        if self.user_pool is not None:
            self.user_pool.stop()
            self.user_pool = self.console_api = None
        if self.scheduler is not None:
            self.scheduler.stop()
            self.scheduler = None
        for delivery in (self.queue_delivery, self.stream_delivery, self.retry_delivery):
            if delivery is not None:
                delivery.stop()
        in_parallel(pool.stop for pool in self.pools.values())
        for server in (self.whasp, self.graph, self.openai, self.lambda_api):
            if server is not None:
                server.stop()
        if self.moto is not None:
            self._delete_resources()
            self.moto.stop()
            self.moto = None
        self._restore_env()
        self._undo.close()
        if self._iam_dir is not None:
            self._keep_refusals()
            self._iam_dir.cleanup()
            self._iam_dir = None
        self.apis, self.pools = {}, {}
        self.queue_delivery = self.stream_delivery = self.retry_delivery = None
        if self._log is not None:
            self._log.close()
            self._log = None

    # ------------------------------------------------------------------ wiring

    def _use_aws_env(self, values: dict[str, str]) -> None:
        for key in [*values, "AWS_PROFILE"]:
            self._saved_env.setdefault(key, os.environ.get(key))
        os.environ.pop("AWS_PROFILE", None)
        os.environ.update(values)

    def _restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}

    def _resolver(self, base_url: str | None) -> cfn.Resolver:
        import boto3

        assert self.resources is not None
        resources = self.template.get("Resources") or {}
        refs: dict[str, str] = {}
        attributes: dict[tuple[str, str], str] = {}
        for logical_id, url in self.resources.queue_urls.items():
            refs[logical_id] = url
            attributes[(logical_id, "Arn")] = self.resources.queue_arns[logical_id]
            attributes[(logical_id, "QueueName")] = url.rsplit("/", 1)[-1]
            attributes[(logical_id, "QueueUrl")] = url
        for logical_id, resource in resources.items():
            kind = resource.get("Type")
            if kind == "AWS::DynamoDB::Table" and logical_id == "MemoryTable":
                refs[logical_id] = self.resources.table_name
                arn = (
                    f"arn:aws:dynamodb:{REGION}:{cfn.ACCOUNT_ID}:table/{self.resources.table_name}"
                )
                attributes[(logical_id, "Arn")] = arn
                attributes[(logical_id, "StreamArn")] = self.resources.stream_arn or ""
            elif kind == cfn.FUNCTION:
                name = self.function_name(logical_id)
                refs[logical_id] = name
                attributes[(logical_id, "Arn")] = self.function_arn(logical_id)
            elif kind == "AWS::Serverless::HttpApi":
                refs[logical_id] = logical_id.lower()[:10]
            elif kind == "AWS::SecretsManager::Secret":  # the person key, with the local value
                refs[logical_id] = boto3.client("secretsmanager").create_secret(
                    Name=f"{self.prefix}-{logical_id}", SecretString=LOCAL_PERSON_KEY
                )["ARN"]
            elif kind == "AWS::Serverless::LayerVersion":
                refs[logical_id] = f"arn:aws:lambda:{REGION}:{cfn.ACCOUNT_ID}:layer:{logical_id}:1"
        overrides = {
            "AgentId": self.agent_id,
            "OpenAIModel": self.model.model,
            "OpenAIBaseUrl": base_url or "",
            "WhaspApiUrl": self.whasp.url,
            "Provider": self.provider,
            **({"MetaGraphUrl": self.graph.url} if self.graph is not None else {}),
            **self.parameters,
        }
        declared = self.template.get("Parameters") or {}
        overrides = {k: v for k, v in overrides.items() if k in declared}
        values = cfn.parameter_values(self.template, overrides)
        resolver = cfn.Resolver(self.template, values, refs, attributes)
        if self._start_user_pool(resolver):  # its ids are Refs the functions' settings use
            assert self.user_pool is not None
            refs.update(self.user_pool.refs)
            resolver = cfn.Resolver(self.template, values, refs, attributes)
        return resolver

    def _start_user_pool(self, resolver: cfn.Resolver) -> bool:
        """OperatorConsole=true: the operators' user pool in moto, its managed login, and the
        console's API, bound now (the client's callback URL is its address), served later."""
        from devstack.cognito import LocalUserPool

        cognito = {
            logical_id: resource
            for logical_id, resource in (self.template.get("Resources") or {}).items()
            if resource.get("Type", "").startswith("AWS::Cognito::") and _holds(resolver, resource)
        }
        if not cognito:
            return False
        self.console_api = LocalHttpApi("ConsoleApi", [], on_request=self._on_request).start()
        self.user_pool = LocalUserPool.create(cognito, resolver.resolve, self.console_api.url + "/")
        self.console.event(
            "stack",
            f"operators' user pool {self.user_pool.pool_id}, managed login at "
            f"{self.user_pool.login.url}; console at {self.console_api.url}/",
        )
        return True

    def _create_buckets(self, resolver: cfn.Resolver) -> None:
        """Create the template's S3 buckets whose Condition holds (e.g. the transcript archive,
        when `parameters={"ArchiveBucket": "..."}`), named as the template names them, its
        EventBridge buses, and its tables but the memory table (the example tool's calendar,
        with ExampleBookingTool=true)."""
        import boto3

        for logical_id, resource in (self.template.get("Resources") or {}).items():
            if resource.get("Type") == "AWS::DynamoDB::Table" and logical_id != "MemoryTable":
                if "Condition" in resource and not resolver.condition(resource["Condition"]):
                    continue
                name = resolver.refs[logical_id] = f"{self.prefix}-{logical_id}".lower()
                create_table(self.template, name, logical_id=logical_id)
                arn = f"arn:aws:dynamodb:{REGION}:{cfn.ACCOUNT_ID}:table/{name}"
                resolver.attributes[(logical_id, "Arn")] = arn
            if resource.get("Type") == "AWS::Scheduler::ScheduleGroup":  # FollowUps=true
                if "Condition" in resource and not resolver.condition(resource["Condition"]):
                    continue
                name = resolver.refs[logical_id] = f"{self.prefix}-{logical_id}"
                resolver.attributes[(logical_id, "Arn")] = boto3.client(
                    "scheduler"
                ).create_schedule_group(Name=name)["ScheduleGroupArn"]
                self.schedule_group = name
            if resource.get("Type") == "AWS::IAM::Role":  # a role Scheduler assumes: its ARN
                arn = f"arn:aws:iam::{cfn.ACCOUNT_ID}:role/{self.prefix}-{logical_id}"
                resolver.attributes[(logical_id, "Arn")] = arn
            if resource.get("Type") == "AWS::Logs::LogGroup":  # what the logs policies name
                props = resource.get("Properties") or {}
                name = resolver.resolve(props.get("LogGroupName", f"/local/{logical_id}"))
                resolver.refs.setdefault(logical_id, str(name))
                arn = f"arn:aws:logs:{REGION}:{cfn.ACCOUNT_ID}:log-group:{name}:*"
                resolver.attributes[(logical_id, "Arn")] = arn
            if resource.get("Type") == "AWS::Events::EventBus":  # the operator notifications
                name = resolver.refs[logical_id] = f"{self.prefix}-{logical_id}"
                resolver.attributes[(logical_id, "Arn")] = boto3.client("events").create_event_bus(
                    Name=name
                )["EventBusArn"]
            if resource.get("Type") != "AWS::S3::Bucket":
                continue
            if "Condition" in resource and not resolver.condition(resource["Condition"]):
                continue
            props = resource.get("Properties") or {}
            given = resolver.resolve(props["BucketName"]) if "BucketName" in props else None
            name = str(given or f"{self.prefix}-{logical_id}".lower())
            boto3.client("s3").create_bucket(Bucket=name)
            resolver.refs[logical_id] = name
            resolver.attributes[(logical_id, "Arn")] = f"arn:aws:s3:::{name}"
            self.buckets[logical_id] = name

    def function_name(self, logical_id: str) -> str:
        return f"{self.prefix}-{logical_id}"

    def function_arn(self, logical_id: str) -> str:
        return f"arn:aws:lambda:{REGION}:{cfn.ACCOUNT_ID}:function:{self.function_name(logical_id)}"

    def _secret_values(self) -> dict[str, str]:
        return {
            "WEBHOOK_SECRET": self.webhook_secret,
            "WHASP_API_KEY": self.whasp.api_key,
            "OPENAI_API_KEY": self.model.api_key,
            "META_APP_SECRET": META_TEST_APP_SECRET,
            "META_VERIFY_TOKEN": META_TEST_VERIFY_TOKEN,
            "META_ACCESS_TOKEN": self.graph.access_token if self.graph else "unused-with-whasp",
        }

    def _store_secrets(self) -> None:
        """Put each secret a function reads from SSM (`<NAME>_PARAM`) into moto's Parameter
        Store as a SecureString, so the functions read them as they do in AWS."""
        import boto3

        ssm = boto3.client("ssm")
        values = self._secret_values()
        for spec in self.functions.values():
            for name, parameter in spec.environment.items():
                if not name.endswith("_PARAM") or not parameter:
                    continue
                secret = name.removesuffix("_PARAM")
                if secret not in values:
                    raise cfn.TemplateError(
                        f"{spec.logical_id} reads {secret} from {parameter}; "
                        "the local stack has no value for it"
                    )
                ssm.put_parameter(
                    Name=parameter, Value=values[secret], Type="SecureString", Overwrite=True
                )

    def _function_env(self, spec: cfn.FunctionSpec) -> dict[str, str]:
        assert self.moto is not None
        env = {
            **base_environment(),
            **aws_env(self.moto.url),
            "AWS_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": self.function_name(spec.logical_id),
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{self.function_name(spec.logical_id)}",
            "LAMBDA_TASK_ROOT": str(spec.code.parent),
            "_HANDLER": f"{spec.code.stem}.{spec.handler}",
            **spec.environment,
            # No X-Ray daemon here: Tracer off (the template's `Tracing: Active` is AWS-only).
            "POWERTOOLS_TRACE_DISABLED": "true",
            # a local run: the webhook accepts the published test-only secret
            "MEMAGENT_LOCAL_STACK": "1",
        }
        if self.lambda_api is not None:
            env["AWS_ENDPOINT_URL_LAMBDA"] = self.lambda_api.url
        if self._iam_dir is not None:
            from devstack.iam.guard import ENV

            env[ENV] = str(Path(self._iam_dir.name) / f"{spec.logical_id}.json")
        if "CONSOLE_LOGIN_URL" in env and self.user_pool is not None:
            # the template names Cognito's domain for the managed login; here, its stand-in
            env["CONSOLE_LOGIN_URL"] = self.user_pool.login.url
        env.update(self.extra_env)
        return env

    def _role(self, spec: cfn.FunctionSpec) -> str:
        kinds = {event.get("Type") for event in spec.events.values()}
        if "DynamoDB" in kinds:  # the compactor also reads its failure queue (SQS)
            return "compactor"
        if "SQS" in kinds:
            return "consumer"
        if "HttpApi" in kinds:
            return "webhook" if "QUEUE_URL" in spec.environment else "admin"
        return "other"

    def _start_functions(self) -> None:
        sizes = {
            "consumer": self.consumer_concurrency,
            "compactor": 1,
            "webhook": self.webhook_concurrency,
        }
        warm = {"consumer": 1, "compactor": 1, "webhook": 1} if self.warm else {}
        for logical_id, spec in self.functions.items():
            role = self._role(spec)
            size = sizes.get(role, 1)
            if role == "consumer":
                scaling = spec.event_of_type("SQS").get("ScalingConfig") or {}
                limit = scaling.get("MaximumConcurrency")
                if limit is not None and self._cfn is not None:
                    size = min(size, int(self._cfn.resolve(limit)))
            self.pools[logical_id] = FunctionPool(
                spec,
                function_name=self.function_name(logical_id),
                env=self._function_env(spec),
                log_path=self.log_path,
                size=size,
                warm=warm.get(role, 0),
            )
        self.console.event(
            "stack",
            "execution environments: "
            + ", ".join(
                f"{self._role(spec)} (up to {self.pools[lid].size})"
                for lid, spec in self.functions.items()
            ),
        )
        in_parallel(pool.start for pool in self.pools.values())

    def _start_apis(self) -> None:
        routes: dict[str, list[Route]] = {}
        for logical_id, spec in self.functions.items():
            for event in spec.events.values():
                if event.get("Type") != "HttpApi":
                    continue
                props = event.get("Properties") or {}
                api = cfn.logical_id_of(props["ApiId"]) if "ApiId" in props else "ServerlessHttpApi"
                route = Route(
                    method=str(props.get("Method", "ANY")).upper().replace("*", "ANY"),
                    path=str(props.get("Path", "/{proxy+}")),
                    invoke=self.pools[logical_id].invoke,
                    auth=self._route_auth(api, props),
                )
                routes.setdefault(api, []).append(route)
                if self._role(spec) == "webhook":
                    self._webhook_route = (api, route.path)
        for api, api_routes in routes.items():
            server = LocalHttpApi(api, api_routes, on_request=self._on_request)
            self.apis[api] = server.start()
            listing = ", ".join(r.key for r in server.routes)
            self.console.event("stack", f"{api} at {server.url}: {listing}", level="verbose")
        if self.console_api is not None:
            self._serve_console_api()
        if self._webhook_route is None:
            raise cfn.TemplateError("no function has an HttpApi event and a QUEUE_URL: no webhook")
        api, path = self._webhook_route
        self.webhook_url = f"{self.apis[api].url}{path}"
        signer = "Meta" if self.meta else "whasp"
        self.console.event("webhook", f"POST {self.webhook_url} (signed as {signer} signs)")

    def _route_auth(self, api: str, event: dict[str, Any]) -> str:
        """A SAM HttpApi event's authorization: its own, else its API's default."""
        own = ((event.get("Auth") or {}).get("Authorizer") or "").upper()
        if own:
            return "AWS_IAM" if own == "AWS_IAM" else "NONE" if own == "NONE" else "JWT"
        resource = (self.template.get("Resources") or {}).get(api) or {}
        auth = (resource.get("Properties") or {}).get("Auth") or {}
        return "AWS_IAM" if auth.get("DefaultAuthorizer") == "AWS_IAM" else "NONE"

    def _serve_console_api(self) -> None:
        """The console's API (plain AWS::ApiGatewayV2 resources): its routes, each to its
        integration's function, and its JWT authorizer over the local user pool."""
        from devstack.cognito import JwtAuthorizer

        assert self._cfn is not None and self.console_api is not None and self.moto is not None
        resources = self.template.get("Resources") or {}
        kept = {
            lid: r.get("Properties") or {}
            for lid, r in resources.items()
            if r.get("Type", "").startswith("AWS::ApiGatewayV2::") and _holds(self._cfn, r)
        }
        authorizer = next(
            self._cfn.resolve(p["JwtConfiguration"])
            for p in kept.values()
            if p.get("AuthorizerType") == "JWT"
        )
        self.console_api.authorizer = JwtAuthorizer(
            issuer=authorizer["Issuer"],
            audience=tuple(authorizer["Audience"]),
            jwks_url=f"{self.moto.url}/{self.user_pool.pool_id}/.well-known/jwks.json",
        )
        routes = []
        for logical_id, props in kept.items():
            if resources[logical_id]["Type"] != "AWS::ApiGatewayV2::Route":
                continue
            target = re.search(r"\$\{(\w+)\}", str(props["Target"]))  # integrations/${X}
            assert target is not None, f"{logical_id}: a Target of integrations/${{...}}"
            integration = resources[target.group(1)]
            function = cfn.logical_id_of(integration["Properties"]["IntegrationUri"])
            method, path = props["RouteKey"].split(" ", 1)
            auth = str(props.get("AuthorizationType", "NONE"))
            routes.append(Route(method, path, self.pools[function].invoke, auth=auth))
        self.console_api.route(routes)
        self.console.event("stack", f"ConsoleApi at {self.console_api.url}", level="verbose")

    def _start_deliveries(self, resolver: cfn.Resolver) -> None:
        import boto3

        assert self.resources is not None
        sqs = boto3.client("sqs")
        for logical_id, spec in self.functions.items():
            role = self._role(spec)
            if role == "consumer":
                report = self._report_for("consumer")
                size = self.pools[logical_id].size
                self.queue_delivery = self._queue_delivery(
                    spec, sqs, resolver, concurrency=size, idle_jump=self.idle_jump, report=report
                )
            elif role == "compactor":
                from devstack.streams import StreamTap

                props = spec.event_of_type("DynamoDB")
                destination = ((props.get("DestinationConfig") or {}).get("OnFailure") or {}).get(
                    "Destination"
                )
                failure_queue = (
                    self.resources.queue_urls[cfn.logical_id_of(destination)]
                    if destination
                    else None
                )
                assert self.resources.stream_arn, "the compactor needs the table's stream"
                # AWS's clock: devstack.clock.SQS_CLOCK
                self.ttl = TimeToLive(lag=self.ttl_lag, table=self.resources.table_name)
                self.stream_delivery = StreamDelivery(
                    tap=StreamTap(
                        self.resources.stream_arn,
                        stream_filters(self.template, logical_id),
                        ttl=self.ttl,
                    ),
                    invoke=self.pools[logical_id].invoke,
                    batch_size=int(resolver.resolve(props.get("BatchSize", 100))),
                    max_retries=int(resolver.resolve(props.get("MaximumRetryAttempts", -1))),
                    sqs=sqs,
                    failure_queue_url=failure_queue,
                    function_arn=self.function_arn(logical_id),
                    report=self._report_for("compactor"),
                )
                if "SQS" in {event.get("Type") for event in spec.events.values()}:
                    # its failure queue, whose jobs it does again later
                    report = self._report_for("compactor")
                    self.retry_delivery = self._queue_delivery(
                        spec, sqs, resolver, concurrency=1, report=report, label="compactor-retries"
                    )
        for delivery in (self.queue_delivery, self.stream_delivery, self.retry_delivery):
            if delivery is not None:
                delivery.start()
        if self.schedule_group is not None:  # follow-ups: Scheduler's firing, on AWS's clock
            from devstack.scheduler import SchedulerFiring

            scheduler = boto3.client("scheduler")
            self.scheduler = SchedulerFiring(
                scheduler,
                sqs,
                self.schedule_group,
                iam=self.iam,
                group_arn=scheduler.get_schedule_group(Name=self.schedule_group)["Arn"],
            ).start()

    def _queue_delivery(
        self, spec: cfn.FunctionSpec, sqs: Any, resolver: cfn.Resolver, **options: Any
    ) -> QueueDelivery:
        """The event source mapping of a function's SQS event: its queue and batch size."""
        assert self.resources is not None
        props = spec.event_of_type("SQS")
        queue = cfn.logical_id_of(props["Queue"])
        return QueueDelivery(
            sqs=sqs,
            queue_url=self.resources.queue_urls[queue],
            queue_arn=self.resources.queue_arns[queue],
            invoke=self.pools[spec.logical_id].invoke,
            batch_size=int(resolver.resolve(props.get("BatchSize", 10))),
            **options,
        )

    # ------------------------------------------------------------------ progress and logs

    def log(self, source: str, message: str, **details: Any) -> None:
        """One JSON line of the stack's own in the detailed log, beside the functions' lines."""
        if self._log is None:
            return
        line = {
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "source": f"devstack.{source}",
            "message": message,
            **details,
        }
        with self._log_lock:
            self._log.write(json.dumps(line, default=str) + "\n")

    def _shown_log(self) -> str:
        with contextlib.suppress(ValueError):
            return str(self.log_path.relative_to(Path.cwd()))
        return str(self.log_path)

    def _report_for(self, tag: str) -> Callable[..., None]:
        def report(kind: str, message: str, *, level: str = "info", **details: Any) -> None:
            outcome: Outcome | None = details.get("outcome")
            extra = {}
            if outcome is not None:
                extra = {
                    "ok": outcome.ok,
                    "ms": round(outcome.duration_ms, 1),
                    "cold": outcome.cold,
                    "error": outcome.error_type,
                }
            self.log(tag, message, kind=kind, **extra)
            if kind == "stream" and outcome is not None and outcome.ok:
                self._report_compaction(details.get("records") or [])
                return
            timing = ""
            if outcome is not None:
                timing = f" ({outcome.duration_ms:.0f} ms{', cold' if outcome.cold else ''})"
            first_line = message.splitlines()[0][:160] if message else ""
            self.console.event(
                tag,
                first_line + timing,
                level="verbose" if level == "info" else "normal",
                warn=level == "warn",
            )

        return report

    def _report_compaction(self, records: list[dict[str, Any]]) -> None:
        """Show what a compactor invocation did, read back from the table."""
        markers: dict[str, int] = {}
        for record in records:
            image = record.get("dynamodb", {}).get("NewImage") or {}
            pk = (record.get("dynamodb", {}).get("Keys") or {}).get("pk", {}).get("S")
            if pk:
                marker = int((image.get("marker") or {}).get("N", 0))
                markers[pk] = min(marker, markers.get(pk, marker))
        for pk, before in markers.items():
            after = self.view_key(pk)
            if after.marker > before:
                self.console.event(
                    "compactor",
                    f"{pk[:10]}…: folded turns {before + 1}-{after.marker} into the summary "
                    f"({len((after.summary or '').split())} words, {len(after.facts)} fact(s)); "
                    f"{after.pending} turn(s) stay raw",
                )
                self.log("compactor", "compacted", person=pk, marker=after.marker, before=before)

    def _on_request(self, route: str, status: int, ms: float) -> None:
        self.log("apigw", "request", route=route, status=status, ms=round(ms, 1))
        self.console.event(
            "webhook", f"{route} -> {status} ({ms:.0f} ms)", level="verbose", warn=status >= 500
        )

    def _on_send(self, sent: dict[str, Any]) -> None:
        self.log(self.provider, "message sent", id=sent["id"], chars=len(sent["text"]))
        with self._sent:
            self._sent.notify_all()

    @property
    def meta(self) -> bool:
        return self.provider == "meta"

    # ------------------------------------------------------------------ acting as whasp

    def now(self) -> datetime:
        """The stack's clock: real time plus `clock_offset` (to let days pass)."""
        return datetime.now(UTC) + self.clock_offset

    def post(
        self,
        event: dict[str, Any],
        *,
        secret: str | None = None,
        timestamp: int | None = None,
        attempts: int = 3,
    ) -> Delivery:
        """POST one event to the local webhook over HTTP, signed as whasp signs it (Standard
        Webhooks). Like whasp, retries a 5xx or a refused connection (at-least-once)."""
        from devstack.events import signed_headers

        body = json.dumps(event).encode()
        key = secret or self.webhook_secret

        def headers() -> dict[str, str]:  # signed afresh for each attempt, as whasp does
            signed = signed_headers(body, event["id"], secret=key, timestamp=timestamp)
            return {
                "Content-Type": "application/json",
                "User-Agent": "whasp-webhooks/1.0",
                **signed,
            }

        return self._post_webhook(event["id"], body, headers, attempts)

    def _post_webhook(
        self, delivery_id: str, body: bytes, headers: Callable[[], dict[str, str]], attempts: int
    ) -> Delivery:
        """POST `body` to the local webhook as a provider does: at least once, retrying a 5xx or
        a refused connection, with `headers()` made for each attempt."""
        status, answer = 0, b""
        for attempt in range(attempts):
            request = urllib.request.Request(  # noqa: S310 (our own loopback URL)
                self.webhook_url, data=body, method="POST", headers=headers()
            )
            try:
                with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                    status, answer = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, answer = error.code, error.read()
            except OSError:
                status, answer = 0, b""
            if (status and status < 500) or attempt + 1 == attempts:
                break
            time.sleep(RETRY_PAUSE_SECONDS)
        try:
            parsed = json.loads(answer or b"null")
        except ValueError:
            parsed = (answer or b"").decode("utf-8", "replace")
        return Delivery(delivery_id, status, parsed)

    def _stamp(self, at: datetime | None) -> str:
        at = (at or self.now()).astimezone(UTC)
        return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def message_event(
        self,
        phone: str,
        text: str,
        *,
        at: datetime | None = None,
        number: str | None = None,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        """A `message.received` event, as whasp sends it."""
        from devstack.events import whasp_message

        return whasp_message(
            text,
            chat=phone,
            created_at=self._stamp(at),
            event_id=event_id or f"evt_{uuid.uuid4().hex[:16]}",
            number=number or self.business_number,
            label=self.agent_id.title(),
        )

    def send_message(
        self,
        phone: str | None,
        text: str,
        *,
        at: datetime | None = None,
        number: str | None = None,
        event_id: str | None = None,
        bsuid: str | None = None,
        name: str = "WhatsApp user",
    ) -> dict[str, Any]:
        """The person `phone` writes `text`: whasp delivers `message.received` to the webhook.

        whasp's own opt-out rules come with it: a message lifts an opt-out, and STOP opts the
        chat out of sends and is followed by `chat.opted_out`. With provider meta, Meta posts a
        notification from `phone` and/or `bsuid` (no opt-out event: STOP is ours to honour),
        their profile named `name` (the same for everyone unless a caller names them: a
        recycled number's new owner is not Maya)."""
        if self.meta:
            from devstack.events import meta_message

            stamp = int((at or self.now()).timestamp())
            message = meta_message(text, phone=phone, bsuid=bsuid, timestamp=stamp, wamid=event_id)
            return self._meta_from(message, phone, bsuid, name)
        assert phone is not None
        event = self.message_event(phone, text, at=at, number=number, event_id=event_id)
        stop = text.strip().casefold() in STOP_WORDS
        if not stop:
            self.whasp.opted_out.discard(phone)
        delivery = self.post(event)
        self._expect_accepted(delivery)
        if stop:
            self.opt_out(phone, number=number)
        return event

    def opt_out(self, phone: str, *, at: datetime | None = None, number: str | None = None) -> dict:
        """whasp unsubscribes the chat (sends get 409) and delivers `chat.opted_out`."""
        self.whasp.opted_out.add(phone)
        data = {"number": number or self.business_number, "chat": phone}
        return self._deliver_whasp("chat.opted_out", data, at)

    def replace_number(self, new_number: str, *, at: datetime | None = None) -> dict[str, Any]:
        """whasp retires the business number and hands over `new_number`: `number.replaced`.
        Later messages from people arrive with the new number."""
        data = {"old_number": self.business_number, "new_number": new_number}
        event = self._deliver_whasp("number.replaced", {**data, "label": self.agent_id.title()}, at)
        self.business_number = new_number
        return event

    def _deliver_whasp(self, kind: str, data: dict[str, Any], at: datetime | None) -> dict:
        event = {"id": f"evt_{uuid.uuid4().hex[:16]}", "type": kind, "created_at": self._stamp(at)}
        self._expect_accepted(self.post({**event, "data": data}))
        return {**event, "data": data}

    # ------------------------------------------------------------------ acting as Meta

    def post_meta(self, notification: dict[str, Any], *, attempts: int = 3) -> Delivery:
        """POST one notification to the local webhook, signed as Meta signs it; like Meta,
        retry what is not a 200."""
        from devstack.events import meta_body, meta_headers

        body = meta_body(notification)
        headers = {
            "Content-Type": "application/json",
            **meta_headers(body, app_secret=META_TEST_APP_SECRET),
        }
        values = notification["entry"][0]["changes"][0]["value"]
        first = (values.get("messages") or values.get("statuses") or [{}])[0].get("id", "meta")
        return self._post_webhook(first, body, lambda: headers, attempts)

    def change_identity(self, kind: str, sender: dict, *, at: datetime | None = None, **system):
        """Meta reports a person's new identifier: a `user_changed_user_id` or
        `user_changed_number` system message from `sender` (`from_user_id` and/or `from`)."""
        from devstack.events import meta_notification

        stamp = str(int((at or self.now()).timestamp()))
        message: dict[str, Any] = {
            "id": f"wamid.SYSTEM{uuid.uuid4().hex[:16].upper()}",
            "timestamp": stamp,
        }
        message |= {**sender, "type": "system", "system": {"type": kind, "body": kind, **system}}
        notification = meta_notification(messages=[message], number_id=self.business_number)
        self._expect_accepted(self.post_meta(notification))
        return notification

    def _meta_from(
        self, message: dict[str, Any], phone: str | None, bsuid: str | None, name: str
    ) -> dict[str, Any]:
        """POST `message` as Meta delivers a person's message (their contact entry alongside);
        return the notification once the webhook accepted it."""
        from devstack.events import meta_contact, meta_notification

        notification = meta_notification(
            contacts=[meta_contact(phone=phone, bsuid=bsuid, name=name)],
            messages=[message],
            number_id=self.business_number,
        )
        self._expect_accepted(self.post_meta(notification))
        return notification

    @staticmethod
    def _expect_accepted(delivery: Delivery) -> None:
        if delivery.status != 200:
            raise RuntimeError(
                f"the local webhook answered {delivery.status} {delivery.body!r} "
                f"to {delivery.event_id}; see the detailed log"
            )

    # ------------------------------------------------------------------ waiting and reading

    def wait_idle(self, timeout: float = 120.0) -> bool:
        """Wait until the queue is empty, nothing is in flight and the stream has nothing
        pending; False if that did not happen within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._queue_idle():
                stream = self.stream_delivery
                if stream is None:
                    return True
                # Two full stream cycles after the queue went quiet: the first may have started
                # before the consumer's last write, the second began after it.
                started = stream.stats.batches
                if not stream.wait_cycles(2, timeout=max(0.1, deadline - time.monotonic())):
                    return False
                if stream.stats.batches == started and self._queue_idle():
                    return True
                continue
            time.sleep(IDLE_POLL_SECONDS)
        return False

    def _queue_idle(self) -> bool:
        return self.queue_delivery is None or self.queue_delivery.idle()

    def wait_for_replies(self, phone: str, count: int, timeout: float = 30.0) -> bool:
        """Wait until the provider has accepted at least `count` messages to `phone` (with
        Meta: a phone or a BSUID)."""
        with self._sent:
            return self._sent.wait_for(
                lambda: len(self.replies_to(phone)) >= count, timeout=timeout
            )

    def tap(self, phone: str | None, option: str, *, bsuid: str | None = None) -> None:
        """The person picks `option` from the last reply that offered choices: on Meta a tap
        on its button or list row (`interactive` button_reply / list_reply); on whasp, whose
        messages are text, they write the option."""
        if not self.meta:
            self.send_message(phone, option, bsuid=bsuid)
            return
        from devstack.events import meta_tap

        offered = [s for s in self.replies_to(phone or bsuid or "") if s.get("interactive")]
        stamp = int(self.now().timestamp())
        message = meta_tap(offered[-1], option, phone=phone, bsuid=bsuid, timestamp=stamp)
        self._meta_from(message, phone, bsuid, "WhatsApp user")

    def send_voice_note(
        self, phone: str | None, said: str, *, bsuid: str | None = None, name: str = "WhatsApp user"
    ) -> dict[str, Any]:
        """Provider meta: the person sends a voice note saying `said` (devstack.ogg, its audio
        at the Graph stand-in, fetched by its media id)."""
        from devstack.events import meta_message
        from devstack.ogg import voice_note

        assert self.graph is not None, "voice notes: provider meta"
        media_id = self.graph.add_media(voice_note(said), "audio/ogg; codecs=opus")
        body = {"mime_type": "audio/ogg; codecs=opus", "id": media_id, "voice": True}
        stamp = int(self.now().timestamp())
        message = meta_message(phone=phone, bsuid=bsuid, kind="audio", body=body, timestamp=stamp)
        return self._meta_from(message, phone, bsuid, name)

    def send_document(
        self,
        phone: str | None,
        data: bytes,
        *,
        filename: str,
        mime_type: str = "application/pdf",
        bsuid: str | None = None,
        name: str = "WhatsApp user",
    ) -> dict[str, Any]:
        """The person sends a document: with provider meta, its bytes at the Graph stand-in
        (fetched by its media id; Meta's `document` with its `filename`); with whasp, at the
        whasp stand-in's media URL (whasp's contract names no file)."""
        from devstack.events import meta_message, whasp_message

        if self.meta:
            assert self.graph is not None
            media_id = self.graph.add_media(data, mime_type)
            body = {"id": media_id, "mime_type": mime_type, "filename": filename}
            stamp = int(self.now().timestamp())
            message = meta_message(
                phone=phone, bsuid=bsuid, kind="document", body=body, timestamp=stamp
            )
            return self._meta_from(message, phone, bsuid, name)
        assert phone is not None
        url = self.whasp.add_media(data, mime_type)
        event_id = f"evt_{uuid.uuid4().hex[:16]}"
        created_at = self._stamp(None)
        media = {"url": url, "mime_type": mime_type, "size": len(data)}
        event = whasp_message(
            "",
            chat=phone,
            created_at=created_at,
            event_id=event_id,
            number=self.business_number,
            label=self.agent_id.title(),
            message={
                "id": f"msg_{event_id[4:]}",
                "type": "document",
                "timestamp": created_at,
                "media": media,
            },
        )
        self._expect_accepted(self.post(event))
        return event

    def replies_to(self, phone: str) -> list[dict[str, Any]]:
        if self.graph is not None:  # Meta: `to` is a wa_id (no "+") or a BSUID
            who = phone.removeprefix("+")
            return [dict(s) for s in list(self.graph.sent) if s["to"] == who]
        return [dict(s) for s in list(self.whasp.sent) if s["to"] == phone]

    def table(self) -> Any:
        import boto3

        assert self.resources is not None
        return boto3.resource("dynamodb").Table(self.resources.table_name)

    def scan(self) -> list[dict[str, Any]]:
        """Every item of the memory table."""
        table = self.table()
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"ConsistentRead": True}
        while True:
            page = table.scan(**kwargs)
            items.extend(page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def person_key(self, phone: str) -> str:
        from memagent.memory.person import person_key

        return person_key(self.agent_id, phone)

    def view(self, phone: str) -> PersonView:
        """The person an identifier (phone or BSUID) reaches now."""
        from memagent.lifecycle.rights import resolve

        return self.view_key(resolve(self.store(), self.agent_id, phone))

    def view_key(self, pk: str) -> PersonView:
        items = self.store().everything(pk)
        state: dict[str, Any] = next((i for i in items if i["sk"] == "STATE"), {})
        facts = sorted(
            (i for i in items if i["sk"].startswith("FACT#")), key=lambda i: str(i.get("at", ""))
        )
        turns = sorted(
            (int(i["seq"]), str(i["role"]), str(i.get("text", "")))
            for i in items
            if i["sk"].startswith("MSG#")
        )
        return PersonView(
            pk=pk,
            last_seq=int(state.get("last_seq", 0)),
            marker=int(state.get("marker", 0)),
            summary=next((i.get("text") for i in items if i["sk"] == "SUMMARY"), None),
            facts=[str(f["text"]) for f in facts],
            turns=turns,
            opted_out=bool(state.get("opted_out", False)),
            last_number=state.get("last_number"),
            erased_at=state.get("erased_at"),
            compaction_due=bool(state.get("compaction_due", False)),
            items=items,
        )

    def queue_depth(self, logical_id: str) -> int:
        """Messages held by a queue of the template (visible, in flight and delayed)."""
        import boto3

        assert self.resources is not None
        url = self.resources.queue_urls[logical_id]
        return sum(queue_counts(boto3.client("sqs"), url).values())

    def dead_letter_queue(self) -> str:
        """The logical id of the consumer queue's dead-letter queue (from its RedrivePolicy)."""
        for resource in (self.template.get("Resources") or {}).values():
            redrive = (resource.get("Properties") or {}).get("RedrivePolicy")
            if redrive:
                return cfn.logical_id_of(redrive["deadLetterTargetArn"])
        raise LookupError("no queue of the template has a dead-letter queue")

    def admin(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        """Call the local admin API over HTTP, as an operator (the console, scripts/people.py):
        (status, parsed body). The path's person is URL-encoded here."""
        path = re.sub(r"/people/([^/]+)", lambda m: "/people/" + quote(m[1], safe=""), path)
        request = urllib.request.Request(  # noqa: S310 (our own loopback URL)
            self.apis["AdminApi"].url + path,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def outputs(self) -> dict[str, str]:
        """The template's Outputs as CloudFormation's DescribeStacks lists them for this stack:
        each whose Condition holds, resolved; an API's execute-api address is its local
        server's (what `make smoke` reads, as it reads a deployed stack's)."""
        assert self._cfn is not None
        served = {name: api.url for name, api in self.apis.items()}
        if self.console_api is not None:
            served["ConsoleApi"] = self.console_api.url
        refs = {name: self._cfn.refs.get(name, name.lower()) for name in served}
        resolver = cfn.Resolver(
            self.template, self._cfn.parameters, {**self._cfn.refs, **refs}, self._cfn.attributes
        )
        outputs = {}
        for key, output in (self.template.get("Outputs") or {}).items():
            if not _holds(resolver, output):
                continue
            value = cfn.as_text(resolver.resolve(output["Value"]))
            for name, url in served.items():
                value = value.replace(
                    f"https://{refs[name]}.execute-api.{REGION}.amazonaws.com", url
                )
            outputs[key] = value
        return outputs

    def resolve(self, value: Any) -> Any:
        """A template value (a parameter's Ref, a function's Role ...) as this stack resolved
        it."""
        assert self._cfn is not None
        return self._cfn.resolve(value)

    def invoke(self, logical_id: str, event: Any) -> Outcome:
        """Invoke any function of the template directly (like `aws lambda invoke`)."""
        return self.pools[logical_id].invoke(event)

    def store(self) -> Any:
        """A memagent MemoryStore on the local table (for operator actions such as forget)."""
        from memagent.store.memory_store import MemoryStore

        assert self.resources is not None
        return MemoryStore(self.resources.table_name)

    def _delete_resources(self) -> None:
        import boto3

        if self.resources is None:
            return
        with contextlib.suppress(Exception):
            boto3.client("dynamodb").delete_table(TableName=self.resources.table_name)
        sqs = boto3.client("sqs")
        for url in self.resources.queue_urls.values():
            with contextlib.suppress(Exception):
                sqs.delete_queue(QueueUrl=url)
        s3 = boto3.resource("s3")
        for name in self.buckets.values():
            with contextlib.suppress(Exception):
                bucket = s3.Bucket(name)
                bucket.objects.all().delete()
                bucket.delete()


def _holds(resolver: cfn.Resolver, resource: dict[str, Any]) -> bool:
    """A resource's Condition holds (or it has none)."""
    return "Condition" not in resource or resolver.condition(resource["Condition"])
