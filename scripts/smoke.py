"""Does the stack answer? A deployed stack checked from outside, with your AWS credentials.

    make smoke STACK=whasp-agent     # python scripts/smoke.py --stack whasp-agent [--wait 120]
    make smoke                       # the same checks against a local stack (no AWS, no key)
    make smoke PROVIDER=meta         # ... a local stack serving Meta's Cloud API

One line per check, `pass` or `FAIL` and why, and exit status 1 if any failed:

- outputs: every Output of the stack's template is there (one with a Condition only when it
  holds for the deployed parameters);
- secrets: each SSM parameter and Secrets Manager secret a function reads (for the provider and
  the model home the stack serves: its settings are asked, as the function reads its
  environment) exists, and the function's role may read it (IAM's policy simulator,
  SimulatePrincipalPolicy, with the role, the action and the secret's ARN; and kms:Decrypt on
  its key, when that is a customer managed key). Values are never
  printed: the webhook's signing secret (and Meta's verify token) is read only to sign the test
  event below (and to answer Meta's check);
- webhook: an unsigned POST is refused with 401; with Meta, the subscription check (GET with the
  verify token) is answered with its challenge, and refused with a wrong token;
- test person: a signed message from the reserved test person (+1 202 555-0173, a number from the
  range reserved for fiction, memagent.providers.void) is taken (2xx), remembered, answered by
  the model, and sent nowhere: the stack's provider seam sends the test person nothing. The
  answer is read back through the admin API (AdminApiUrl, SigV4 with your credentials) within
  --wait seconds, then the test person is erased (DELETE /people/{id}) and nothing of them
  remains;
- alarms: every alarm of the template is in the stack, has actions, and the SNS topic it
  notifies has a confirmed subscriber ("PendingConfirmation" is not one: confirm the email).

What a run costs: one model call with your system prompt and one short message (a fraction of a
cent with OpenAI's small models; it counts toward StackDailyTokenBudget), a few Lambda
invocations and DynamoDB writes, and a handful of audited admin API calls (the exports read
while it waits, the erasure). Nothing is sent through whasp or Meta, so no channel fee.

Your credentials need: cloudformation:DescribeStacks, ListStackResources and GetTemplate;
lambda:GetFunctionConfiguration; ssm:DescribeParameters and GetParameter (the signing secret);
secretsmanager:DescribeSecret; kms:DescribeKey (a key of yours, named by its alias);
iam:SimulatePrincipalPolicy; cloudwatch:DescribeAlarms; sns:ListSubscriptionsByTopic;
execute-api:Invoke on the admin API (as scripts/people.py).
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import quote, urlencode

from botocore.exceptions import BotoCoreError, ClientError

from devstack import cfn
from memagent.providers import TEST_PERSON
from memagent.store.ledger import FOR_HUMAN, OPTED_OUT, PARKED, SENT, SKIPPED

# each function's settings, by logical id: asked which secrets the function reads (every
# function of template.yaml naming one is here: tests/unit/test_smoke.py)
SETTINGS = {
    "WebhookFunction": ("memagent.webhook", "WebhookSettings"),
    "ConsumerFunction": ("memagent.turn", "ConsumerSettings"),
    "CompactorFunction": ("memagent.compaction", "CompactorSettings"),
    "AdminFunction": ("memagent.operator", "AdminSettings"),
}
WEBHOOK = "WebhookFunction"
ALARM = "AWS::CloudWatch::Alarm"
# where a function's environment names a secret, and what reading it takes
STORES = {
    "_PARAM": ("SSM parameter", "ssm:GetParameter"),
    "_SECRET_ARN": ("secret", "secretsmanager:GetSecretValue"),
}
PENDING = "PendingConfirmation"  # SNS lists an unconfirmed subscription's ARN as this
# what the test person writes (stored until erased at the end of the run); the business number
# it writes to is fictional too (whasp's `number`: nothing is sent from it)
TEXT = "Automated check of this deployment (make smoke). Please answer in one short sentence."
SMOKE_NUMBER = "+12025550100"
META_NUMBER_ID = "100000000000000"  # a Meta phone_number_id no stack has
WAIT_SECONDS = 120.0
POLL_SECONDS = 2.0
MAX_POLL_SECONDS = 10.0  # each read is an audited export: a dozen or so in two minutes
HTTP_TIMEOUT = 30


@dataclass(frozen=True)
class Result:
    ok: bool
    check: str
    why: str

    def line(self) -> str:
        return f"{'pass' if self.ok else 'FAIL'}  {self.check}: {self.why}"


@dataclass(frozen=True)
class Function:
    logical_id: str
    role_arn: str
    environment: Mapping[str, str]


class Deployed(Protocol):
    """Where the checks read the stack: CloudFormation and Lambda in AWS (CloudFormationStack),
    the local stack's own resolution of template.yaml here (LocalStack)."""

    name: str

    def template(self) -> dict[str, Any]:
        """The template the stack was deployed from."""
        ...

    def description(self) -> tuple[dict[str, str], dict[str, str]]:
        """Its outputs and parameters (DescribeStacks)."""
        ...

    def resources(self) -> dict[str, str]:
        """Logical id -> physical id, for its functions and alarms at least (ListStackResources)."""
        ...

    def function(self, logical_id: str, physical_id: str) -> Function:
        """A function's role and environment (GetFunctionConfiguration)."""
        ...


class CloudFormationStack:
    def __init__(self, name: str, session: Any):
        self.name = name
        self._cfn = session.client("cloudformation")
        self._lambda = session.client("lambda")

    def template(self) -> dict[str, Any]:
        body = self._cfn.get_template(StackName=self.name, TemplateStage="Original")["TemplateBody"]
        if isinstance(body, dict):  # botocore parses a JSON template
            return body
        from samtranslator.yaml_helper import yaml_parse  # CloudFormation's short tags (!Ref)

        return yaml_parse(body)

    def description(self) -> tuple[dict[str, str], dict[str, str]]:
        stack = self._cfn.describe_stacks(StackName=self.name)["Stacks"][0]
        outputs = {o["OutputKey"]: o.get("OutputValue", "") for o in stack.get("Outputs", [])}
        parameters = {
            p["ParameterKey"]: p.get("ResolvedValue", p.get("ParameterValue", ""))
            for p in stack.get("Parameters", [])
        }
        return outputs, parameters

    def resources(self) -> dict[str, str]:
        found = {}
        for page in self._cfn.get_paginator("list_stack_resources").paginate(StackName=self.name):
            for resource in page["StackResourceSummaries"]:
                found[resource["LogicalResourceId"]] = resource.get("PhysicalResourceId", "")
        return found

    def function(self, logical_id: str, physical_id: str) -> Function:
        config = self._lambda.get_function_configuration(FunctionName=physical_id)
        variables = (config.get("Environment") or {}).get("Variables") or {}
        return Function(logical_id, config["Role"], variables)


class LocalStack:
    """A devstack.stack.DevStack read as a deployed stack: its resolved outputs and parameters,
    its functions' environments and roles as it resolved them from template.yaml, its alarms
    in moto."""

    def __init__(self, stack: Any):
        self.stack = stack
        self.name = f"local stack {stack.prefix}"

    def template(self) -> dict[str, Any]:
        return self.stack.template

    def description(self) -> tuple[dict[str, str], dict[str, str]]:
        declared = self.stack.template.get("Parameters") or {}
        parameters = {name: cfn.as_text(self.stack.resolve({"Ref": name})) for name in declared}
        return self.stack.outputs(), parameters

    def resources(self) -> dict[str, str]:
        functions = {lid: self.stack.function_name(lid) for lid in self.stack.functions}
        return {**functions, **self.stack.alarms}

    def function(self, logical_id: str, physical_id: str) -> Function:
        props = self.stack.template["Resources"][logical_id].get("Properties") or {}
        role = str(self.stack.resolve(props["Role"])) if "Role" in props else ""
        return Function(logical_id, role, self.stack.functions[logical_id].environment)


@dataclass
class Smoke:
    """The checks of one stack. `session`: a boto3 Session (the region, the credentials)."""

    deployed: Deployed
    session: Any
    wait_seconds: float = WAIT_SECONDS
    poll_seconds: float = POLL_SECONDS  # the first wait between two reads; doubled each time
    max_poll_seconds: float = MAX_POLL_SECONDS
    report: Callable[[Result], None] = lambda result: None
    results: list[Result] = field(default_factory=list)

    def run(self) -> bool:
        """Every check, each reported as it ends; True if all passed."""
        template = self.deployed.template()
        outputs, parameters = self.deployed.description()
        conditions = cfn.Resolver(template, _declared(template, parameters))
        self._add(check_outputs(template, outputs, conditions))
        physical = self.deployed.resources()
        functions = [
            self.deployed.function(lid, physical[lid])
            for lid, resource in (template.get("Resources") or {}).items()
            if resource.get("Type") == cfn.FUNCTION
            and _holds(conditions, resource)
            and lid in physical
        ]
        for result in check_secrets(functions, self.session):
            self._add(result)
        webhook = next((f for f in functions if f.logical_id == WEBHOOK), None)
        keys = _signing_keys(webhook, self.session)
        url = outputs.get("WebhookUrl")
        for result in check_webhook(url, keys):
            self._add(result)
        for result in self._test_person(url, outputs.get("AdminApiUrl"), keys):
            self._add(result)
        for result in check_alarms(template, conditions, physical, self.session):
            self._add(result)
        return all(result.ok for result in self.results)

    def _add(self, result: Result) -> None:
        self.results.append(result)
        self.report(result)

    def _test_person(
        self, webhook_url: str | None, admin_url: str | None, keys: SigningKeys
    ) -> Iterator[Result]:
        check = "test person"
        if not webhook_url or not admin_url:
            yield Result(False, check, "not tried: the stack has no WebhookUrl or AdminApiUrl")
            return
        if keys.problem:
            yield Result(False, check, f"not tried: {keys.problem}")
            return
        from console.server import AdminApi

        admin = AdminApi(admin_url, region=self.session.region_name)
        event_id, body, headers = keys.signed_event(datetime.now(UTC))
        status, _ = _http("POST", webhook_url, body, headers)
        if not 200 <= status < 300:
            hint = " (is this machine's clock within 5 minutes?)" if status == 401 else ""
            yield Result(False, check, f"the webhook answered {status} to a signed message{hint}")
            return
        yield Result(True, check, f"a signed message was taken ({status})")
        try:
            answered = self._answered(admin, event_id)
        except Exception as error:  # whatever went wrong, the test person is erased below
            answered = Result(False, check, f"not read back: {type(error).__name__}: {error}")
        yield answered
        yield _erased(admin)

    def _answered(self, admin: Any, event_id: str) -> Result:
        check = "test person"
        began = time.monotonic()
        delay = self.poll_seconds
        seen = "nothing yet"
        while True:
            status, person = _admin(admin, "GET")
            if status != 200:
                why = f"the admin API answered {status} to an export{_said(person)}"
                return Result(False, check, why)
            entry = next(
                (e for e in person.get("processed_events", []) if e.get("event_id") == event_id),
                None,
            )
            replies = [m for m in person.get("messages", []) if m.get("role") == "assistant"]
            if entry is not None and entry.get("status") == SENT and replies:
                took = time.monotonic() - began
                return Result(
                    True,
                    check,
                    f"answered within {took:.0f} s, the reply remembered and sent into the void",
                )
            if entry is not None:
                seen = f"its message is {entry.get('status')}"
                if entry.get("status") in (PARKED, OPTED_OUT, SKIPPED, FOR_HUMAN):  # for good
                    return Result(False, check, f"not answered: {seen}")
            if time.monotonic() - began >= self.wait_seconds:
                return Result(
                    False,
                    check,
                    f"not answered within {self.wait_seconds:.0f} s ({seen}): read the "
                    "consumer's log, the event queue's age and its dead-letter queue",
                )
            time.sleep(delay)
            delay = min(delay * 2, self.max_poll_seconds)


# --------------------------------------------------------------------------- the checks


def check_outputs(
    template: dict[str, Any], outputs: Mapping[str, str], conditions: cfn.Resolver
) -> Result:
    expected = [
        key for key, output in (template.get("Outputs") or {}).items() if _holds(conditions, output)
    ]
    missing = [key for key in expected if not outputs.get(key)]
    if missing:
        return Result(False, "outputs", f"missing: {', '.join(missing)}")
    return Result(True, "outputs", f"all {len(expected)} present")


@dataclass(frozen=True)
class StoredSecret:
    store: str  # "SSM parameter" | "secret"
    name: str  # the parameter's name, or the secret's ARN
    action: str
    readers: tuple[tuple[str, str], ...]  # (function, the variable naming it)


def secrets_read(function: Function) -> list[tuple[str, str, str, str]]:
    """(variable, store, name, action) of each secret `function` reads: the variables its
    settings read from its environment, asked of the settings themselves (a whasp stack's
    webhook declares Meta's parameters but never reads them)."""
    environment = dict(function.environment)
    read: Iterable[str] = environment
    if function.logical_id in SETTINGS:
        import importlib

        module, name = SETTINGS[function.logical_id]
        settings = getattr(importlib.import_module(module), name)
        read = cfn.variables_read(settings, environment)
    found = []
    for variable in sorted(read):
        for suffix, (store, action) in STORES.items():
            if variable.endswith(suffix) and environment.get(variable):
                found.append((variable, store, environment[variable], action))
    return found


def check_secrets(functions: list[Function], session: Any) -> Iterator[Result]:
    stored: dict[tuple[str, str], StoredSecret] = {}
    for function in functions:
        for variable, store, name, action in secrets_read(function):
            known = stored.get((store, name)) or StoredSecret(store, name, action, ())
            readers = (*known.readers, (function.logical_id, variable))
            stored[(store, name)] = StoredSecret(store, name, action, readers)
    roles = {f.logical_id: f.role_arn for f in functions}
    for secret in stored.values():
        check = f"{secret.store} {secret.name}"
        who = ", ".join(f"{lid} ({variable})" for lid, variable in secret.readers)
        missing, key = _described(secret, session)
        if missing:
            yield Result(False, check, f"{missing}; read by {who}")
            continue
        who_reads = ", ".join(dict.fromkeys(lid for lid, _ in secret.readers))
        # reading it: the store's action on it, and Decrypt on its key when it is one of yours
        # (an AWS managed key's policy lets every role the store serves use it)
        needs = [(secret.action, "it")] + ([("kms:Decrypt", f"its key {key}")] if key else [])
        refused = []
        try:
            for logical_id, _ in secret.readers:
                for action, what in needs:
                    arn = (
                        key if action == "kms:Decrypt" else _arn(secret, roles[logical_id], session)
                    )
                    decision = _simulated(session, roles[logical_id], action, str(arn))
                    if decision != "allowed":
                        refused.append(f"{logical_id}'s role may not {action} {what} ({decision})")
        except Unasked as error:
            yield Result(
                False, check, f"exists; whether {who_reads} may read it is unknown: {error}"
            )
            continue
        if refused:
            yield Result(False, check, "; ".join(refused))
        else:
            yield Result(True, check, f"exists, and {who_reads} may read it")


class Unasked(Exception):
    """IAM's policy simulator could not be asked."""


# the keys AWS manages for the stores: their key policies let the store use them for any
# principal of the account that may read the secret
AWS_MANAGED_KEYS = ("alias/aws/ssm", "alias/aws/secretsmanager")


def _described(secret: StoredSecret, session: Any) -> tuple[str | None, str | None]:
    """(why the secret cannot be there, or None; the ARN of the KMS key of yours it is
    encrypted with, or None). Its value is never read here."""
    try:
        if secret.store == "secret":
            key = session.client("secretsmanager").describe_secret(SecretId=secret.name)
            return None, _key_arn(key.get("KmsKeyId"), session)
        found = session.client("ssm").describe_parameters(
            ParameterFilters=[{"Key": "Name", "Option": "Equals", "Values": [secret.name]}]
        )["Parameters"]
        if not found:
            return "does not exist: create it (docs/deploy.md, step 1)", None
        return None, _key_arn(found[0].get("KeyId"), session)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return "does not exist", None
        return f"could not be described ({code})", None


def _key_arn(key: str | None, session: Any) -> str | None:
    """The ARN of a customer managed key (an alias, an id or an ARN); None for none or AWS's."""
    if not key or key in AWS_MANAGED_KEYS:
        return None
    if key.startswith("arn:") and ":key/" in key:
        return key
    return str(session.client("kms").describe_key(KeyId=key)["KeyMetadata"]["Arn"])


def _arn(secret: StoredSecret, role_arn: str, session: Any) -> str:
    if secret.store == "secret":
        return secret.name  # an ARN already
    account = role_arn.split(":")[4] if role_arn.count(":") >= 5 else "*"
    partition = role_arn.split(":")[1] if role_arn.count(":") >= 5 else "aws"
    name = secret.name if secret.name.startswith("/") else f"/{secret.name}"
    return f"arn:{partition}:ssm:{session.region_name}:{account}:parameter{name}"


def _simulated(session: Any, role_arn: str, action: str, resource: str) -> str:
    """IAM's decision for the role, the action and the resource (EvalDecision: allowed,
    explicitDeny or implicitDeny); Unasked when the simulator could not be asked."""
    if not role_arn:
        return "the function has no role"
    try:
        answer = session.client("iam").simulate_principal_policy(
            PolicySourceArn=role_arn, ActionNames=[action], ResourceArns=[resource]
        )
    except Exception as error:  # refused (AccessDenied), or no simulator (moto has none)
        code = getattr(error, "response", {}).get("Error", {}).get("Code") or type(error).__name__
        raise Unasked(f"IAM's policy simulator could not be asked ({code})") from None
    decisions = {r.get("EvalDecision") for r in answer.get("EvaluationResults", [])}
    return "allowed" if decisions == {"allowed"} else ", ".join(sorted(map(str, decisions)))


@dataclass(frozen=True)
class SigningKeys:
    """What the webhook signs and checks with (read from SSM, never printed)."""

    provider: str
    webhook_secret: str | None = field(default=None, repr=False)
    app_secret: str | None = field(default=None, repr=False)
    verify_token: str | None = field(default=None, repr=False)
    problem: str | None = None

    def signed_event(self, at: datetime) -> tuple[str, bytes, dict[str, str]]:
        """(event id, body, headers) of a message from the test person, signed as the
        provider signs it."""
        from devstack import events

        if self.provider == "meta":
            assert self.app_secret is not None
            wamid = f"wamid.SMOKE{uuid.uuid4().hex.upper()}"
            message = events.meta_message(
                TEXT, phone=TEST_PERSON, wamid=wamid, timestamp=int(at.timestamp())
            )
            notification = events.meta_notification(
                contacts=[events.meta_contact(phone=TEST_PERSON, name="make smoke")],
                messages=[message],
                number_id=META_NUMBER_ID,
            )
            body = events.meta_body(notification)
            return (
                wamid,
                body,
                {
                    "Content-Type": "application/json",
                    **events.meta_headers(body, app_secret=self.app_secret),
                },
            )
        assert self.webhook_secret is not None
        event_id = f"evt_smoke{uuid.uuid4().hex[:16]}"
        stamp = at.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        event = events.whasp_message(
            TEXT,
            chat=TEST_PERSON,
            created_at=stamp,
            event_id=event_id,
            number=SMOKE_NUMBER,
            label="make smoke",
        )
        body = json.dumps(event).encode()
        headers = events.signed_headers(body, event_id, secret=self.webhook_secret.split()[0])
        return event_id, body, {"Content-Type": "application/json", **headers}


def _signing_keys(webhook: Function | None, session: Any) -> SigningKeys:
    if webhook is None:
        return SigningKeys("whasp", problem=f"the stack has no {WEBHOOK}")
    provider = webhook.environment.get("PROVIDER") or "whasp"
    names = {
        "whasp": {"webhook_secret": "WEBHOOK_SECRET_PARAM"},
        "meta": {"app_secret": "META_APP_SECRET_PARAM", "verify_token": "META_VERIFY_TOKEN_PARAM"},
    }[provider]
    values = {}
    for key, variable in names.items():
        parameter = webhook.environment.get(variable)
        if not parameter:
            return SigningKeys(provider, problem=f"{WEBHOOK} has no {variable}")
        try:
            values[key] = session.client("ssm").get_parameter(Name=parameter, WithDecryption=True)[
                "Parameter"
            ]["Value"]
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            return SigningKeys(provider, problem=f"{parameter} could not be read ({code})")
    return SigningKeys(provider, **values)


def check_webhook(url: str | None, keys: SigningKeys) -> Iterator[Result]:
    if not url:
        yield Result(False, "webhook", "not tried: the stack has no WebhookUrl")
        return
    body = json.dumps({"id": f"evt_unsigned{uuid.uuid4().hex[:12]}", "type": "message.received"})
    status, _ = _http("POST", url, body.encode(), {"Content-Type": "application/json"})
    if status == 401:
        yield Result(True, "webhook", "refuses an unsigned POST (401)")
    elif 200 <= status < 300:
        yield Result(
            False,
            "webhook",
            f"accepted an unsigned POST ({status}): anyone can write to the agent as anyone",
        )
    else:
        yield Result(False, "webhook", f"answered {status} to an unsigned POST, not 401")
    if keys.provider != "meta":
        return
    if keys.verify_token is None:
        yield Result(False, "webhook", f"Meta's subscription check not tried: {keys.problem}")
        return
    challenge = secrets.token_hex(8)
    for token, right in ((keys.verify_token, True), (secrets.token_hex(16), False)):
        query = urlencode(
            {"hub.mode": "subscribe", "hub.verify_token": token, "hub.challenge": challenge}
        )
        status, answer = _http("GET", f"{url}?{query}", b"", {})
        echoed = status == 200 and answer.decode(errors="replace") == challenge
        if right:
            why = "answers Meta's subscription check with its challenge"
            yield Result(echoed, "webhook", why if echoed else f"{why}: no, it answered {status}")
        else:
            refused = 400 <= status < 500
            yield Result(
                refused,
                "webhook",
                f"{'refuses' if refused else 'does not refuse'} a wrong verify token ({status})",
            )


def _erased(admin: Any) -> Result:
    status, receipt = _admin(admin, "DELETE")
    if status != 200:
        why = f"not erased: the admin API answered {status}{_said(receipt)}"
        return Result(False, "test person", why)
    status, person = _admin(admin, "GET")
    left = len(person.get("messages", [])) + len(person.get("facts", [])) if status == 200 else -1
    if left:
        return Result(False, "test person", f"erased, yet {left} messages or facts remain")
    return Result(
        True, "test person", f"erased ({receipt.get('removed', 0)} items), nothing remains"
    )


def check_alarms(
    template: dict[str, Any],
    conditions: cfn.Resolver,
    physical: Mapping[str, str],
    session: Any,
) -> Iterator[Result]:
    expected = [
        lid
        for lid, resource in (template.get("Resources") or {}).items()
        if resource.get("Type") == ALARM and _holds(conditions, resource)
    ]
    absent = [lid for lid in expected if not physical.get(lid)]
    names = {physical[lid]: lid for lid in expected if physical.get(lid)}
    cloudwatch = session.client("cloudwatch")
    found: dict[str, dict[str, Any]] = {}
    listed = list(names)
    for start in range(0, len(listed), 100):  # DescribeAlarms takes 100 names a call
        answer = cloudwatch.describe_alarms(
            AlarmNames=listed[start : start + 100], AlarmTypes=["MetricAlarm", "CompositeAlarm"]
        )
        for alarm in answer.get("MetricAlarms", []) + answer.get("CompositeAlarms", []):
            found[names[alarm["AlarmName"]]] = alarm
    absent += [lid for lid in names.values() if lid not in found]
    silent = [
        lid
        for lid, alarm in found.items()
        if not (alarm.get("ActionsEnabled", True) and alarm.get("AlarmActions"))
    ]
    if absent or silent:
        problems = []
        if absent:
            problems.append(f"not in the stack: {', '.join(absent)}")
        if silent:
            problems.append(f"no alarm actions: {', '.join(silent)}")
        yield Result(False, "alarms", "; ".join(problems))
    else:
        yield Result(True, "alarms", f"all {len(expected)} exist, each with its actions")
    topics = sorted(
        {a for alarm in found.values() for a in alarm.get("AlarmActions", []) if ":sns:" in a}
    )
    for topic in topics:
        yield _subscribed(topic, session)


def _subscribed(topic: str, session: Any) -> Result:
    check = f"alarm topic {topic}"
    sns = session.client("sns")
    subscriptions: list[dict[str, Any]] = []
    try:
        for page in sns.get_paginator("list_subscriptions_by_topic").paginate(TopicArn=topic):
            subscriptions.extend(page.get("Subscriptions", []))
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        return Result(False, check, f"cannot be read ({code}): alarms reach nobody")
    confirmed = [s for s in subscriptions if s.get("SubscriptionArn", "").startswith("arn:")]
    pending = [s for s in subscriptions if s.get("SubscriptionArn") == PENDING]
    if confirmed:
        kinds = ", ".join(sorted({s.get("Protocol", "?") for s in confirmed}))
        return Result(True, check, f"{len(confirmed)} confirmed subscriber(s) ({kinds})")
    why = "no confirmed subscriber: alarms reach nobody"
    if pending:
        why += f" ({len(pending)} pending confirmation: follow the link AWS emailed)"
    return Result(False, check, why + "; subscribe AlarmEmail, a pager or a chat to it")


# --------------------------------------------------------------------------- small parts


def _declared(template: dict[str, Any], parameters: Mapping[str, str]) -> dict[str, str]:
    """The deployed parameters the template declares (the rest take its defaults)."""
    declared = template.get("Parameters") or {}
    return cfn.parameter_values(template, {k: v for k, v in parameters.items() if k in declared})


def _holds(conditions: cfn.Resolver, item: Mapping[str, Any]) -> bool:
    return "Condition" not in item or conditions.condition(item["Condition"])


def _http(method: str, url: str, body: bytes, headers: Mapping[str, str]) -> tuple[int, bytes]:
    """(status, body) of one request; 0 when nothing answered."""
    if not url.startswith(("https://", "http://")):
        return 0, b""
    request = urllib.request.Request(  # noqa: S310 (http(s) only: checked above)
        url, data=body or None, method=method, headers=dict(headers)
    )
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:  # noqa: S310
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def _said(answer: Mapping[str, Any]) -> str:
    """The admin API's reason for a refusal, when it gave one; else where to look."""
    error = answer.get("error") or answer.get("message")
    return f" ({error})" if error else " (read the admin function's log)"


def _admin(admin: Any, method: str) -> tuple[int, dict[str, Any]]:
    path = f"/people/{quote(TEST_PERSON, safe='')}"
    status, answer = admin.call(method, path, b"", {"Content-Type": "application/json"})
    try:
        parsed = json.loads(answer or b"null")
    except ValueError:
        parsed = None
    return status, parsed if isinstance(parsed, dict) else {}


# --------------------------------------------------------------------------- the command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--stack", help="the CloudFormation stack's name (deployed)")
    where.add_argument("--local", action="store_true", help="a local stack, started and stopped")
    parser.add_argument("--region", help="the stack's region (default: your AWS config's)")
    parser.add_argument("--provider", choices=["whasp", "meta"], help="--local: the provider")
    parser.add_argument(
        "--wait", type=float, default=WAIT_SECONDS, help="seconds the test person's answer may take"
    )
    args = parser.parse_args(argv)
    if args.local:
        return _local(args.provider, args.wait)
    import boto3

    session = boto3.Session(region_name=args.region)
    if session.region_name is None:
        parser.error("no region: give --region or set AWS_REGION")
    print(f"stack {args.stack} in {session.region_name}")
    return _ran(Smoke(CloudFormationStack(args.stack, session), session, args.wait))


def _ran(smoke: Smoke) -> int:
    smoke.report = lambda result: print(result.line(), flush=True)
    try:
        ok = smoke.run()
    except (ClientError, BotoCoreError) as error:
        print(f"FAIL  stack: {error}")
        return 1
    failed = sum(not r.ok for r in smoke.results)
    print(
        f"{len(smoke.results)} checks, {failed} failed"
        if failed
        else f"all {len(smoke.results)} checks passed"
    )
    return 0 if ok else 1


def _local(provider: str | None, wait: float) -> int:
    """The checks against a local stack (the offline model), whose alarm topic has a local
    queue subscribed, standing in for your pager."""
    import boto3

    from devstack.stack import DevStack

    with DevStack(env={}, provider=provider, level="quiet") as stack:
        queue = boto3.client("sqs").create_queue(QueueName=f"{stack.prefix}-alarm-pager")
        arn = boto3.client("sqs").get_queue_attributes(
            QueueUrl=queue["QueueUrl"], AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        topic = stack.outputs()["AlarmTopic"]
        boto3.client("sns").subscribe(TopicArn=topic, Protocol="sqs", Endpoint=arn)
        print(
            f"local stack {stack.prefix} ({stack.provider}); a local queue stands in for your pager"
        )
        # IAM's policy simulator answers from the local stack's own evaluation of its roles
        # (devstack.moto_fixes.make_iam_simulate)
        return _ran(Smoke(LocalStack(stack), boto3.Session(), wait))


if __name__ == "__main__":
    sys.exit(main())
