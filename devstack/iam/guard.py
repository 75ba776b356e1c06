"""IAM in a local execution environment: every AWS call the function's process makes is
authorised against its role before it leaves, as IAM would authorise it in AWS.

devstack.runtime installs the guard before it imports the function, from the file the parent
names in DEVSTACK_IAM (the stack's resolved IAM and which role this function runs as):

    botocore clients   BaseClient._make_api_call       (boto3 clients and resources, Powertools)
    the webhook's SQS  memagent.aws.sqs.SqsSender._call  (its hand-built SendMessage)

A call the role does not allow raises botocore's ClientError with AWS's error code and message
("User: arn:aws:sts::...:assumed-role/ROLE/FUNCTION is not authorized to perform: ACTION on
resource: ARN ..."), before any request is sent. CreateSchedule also checks what Scheduler checks
on the role it is given: that its trust policy lets scheduler.amazonaws.com assume it with the
schedule GROUP's ARN as aws:SourceArn (else ValidationException, as Scheduler answers).
Every decision is appended to the stack's record (one JSON line each), which the sufficiency
tests read. With `enforce` off the guard only records: one run then names every call a role
would be refused, not just the first one that stops the rest.

The patches are applied when botocore.client / memagent.aws.sqs are first imported (an import
hook), so the guard costs a function's cold start nothing it would not pay anyway: the webhook
never imports botocore.client.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.iam.actions import Place, UnknownOperation, requests_for
from devstack.iam.roles import Role, StackIam

ENV = "DEVSTACK_IAM"

# the error code each service answers AccessDenied with (their API references)
_DENIED_CODE = {"sqs": "AccessDenied", "s3": "AccessDenied", "sts": "AccessDenied"}
_DENIED_STATUS = {"sqs": 403, "s3": 403, "sts": 403}
SCHEDULER = "scheduler.amazonaws.com"


@dataclass
class Guard:
    function: str  # the function's name (the assumed role's session name)
    role: Role  # the function's own
    iam: StackIam  # every role of the stack (PassRole targets' trust), the resources' policies
    record: str | None  # a file to append each decision to
    place: Place
    enforce: bool = True  # False: record what IAM would refuse, and let the call through

    _lock = threading.Lock()

    @classmethod
    def load(cls, path: str) -> Guard:
        config = json.loads(Path(path).read_text())
        roles = {r["logical_id"]: Role(**r) for r in config["roles"]}
        iam = StackIam(roles, {}, config["resource_policies"], account=config["account"])
        return cls(
            function=config["function"],
            role=roles[config["role"]["logical_id"]],
            iam=iam,
            record=config.get("record"),
            place=Place(region=config["region"], account=config["account"]),
            enforce=config.get("enforce", True),
        )

    @property
    def caller(self) -> str:
        name = self.role.arn.rsplit("/", 1)[-1]
        return f"arn:aws:sts::{self.place.account}:assumed-role/{name}/{self.function}"

    def check(self, service: str, operation: str, params: Mapping[str, Any]) -> None:
        """Raise ClientError as AWS would when the role may not make this call."""
        try:
            wanted = requests_for(service, operation, params, self.place)
        except UnknownOperation as unknown:
            self._note(service, operation, "?", "?", False, f"unknown to the local IAM: {unknown}")
            raise _client_error(
                service,
                operation,
                "AccessDeniedException",
                f"the local stack does not know how IAM authorises {unknown}: add it to "
                "devstack/iam/actions.py",
                403,
            ) from None
        for request in wanted:
            decision = self.iam.decide(self.role.logical_id, request)
            self._note(
                service,
                operation,
                request.action,
                request.resource,
                decision.allowed,
                decision.reason,
            )
            if not decision.allowed and self.enforce:
                raise _client_error(
                    service,
                    operation,
                    _DENIED_CODE.get(service, "AccessDeniedException"),
                    f"User: {self.caller} is not authorized to perform: {request.action} on "
                    f"resource: {request.resource} because {decision.reason}",
                    _DENIED_STATUS.get(service, 400),
                )
        if service == "scheduler" and operation in ("CreateSchedule", "UpdateSchedule"):
            self._scheduler_may_assume(operation, params)

    def _scheduler_may_assume(self, operation: str, params: Mapping[str, Any]) -> None:
        """Scheduler's own check of the execution role ("Confused deputy prevention in
        EventBridge Scheduler": it presents the schedule group's ARN and the account)."""
        role_arn = (params.get("Target") or {}).get("RoleArn", "")
        group = params.get("GroupName") or "default"
        context = {
            "aws:SourceArn": self.place.arn("scheduler", f"schedule-group/{group}"),
            "aws:SourceAccount": self.place.account,
        }
        role = self.iam.role_by_arn(role_arn)
        trusted = role is not None and self.iam.service_may_assume(
            role.logical_id, SCHEDULER, context
        )
        self._note(
            "scheduler",
            operation,
            "sts:AssumeRole (by scheduler.amazonaws.com)",
            role_arn,
            trusted,
            "trust policy" if trusted else "the trust policy refuses",
        )
        if not trusted and self.enforce:
            raise _client_error(
                "scheduler",
                operation,
                "ValidationException",
                "The execution role you provide must allow AWS EventBridge Scheduler to assume "
                "the role.",
                400,
            )

    def _note(
        self, service: str, operation: str, action: str, resource: str, allowed: bool, reason: str
    ) -> None:
        if not self.record:
            return
        line = json.dumps(
            {
                "function": self.function,
                "role": self.role.logical_id,
                "operation": f"{service}:{operation}",
                "action": action,
                "resource": resource,
                "allowed": allowed,
                "reason": reason,
            }
        )
        with self._lock, open(self.record, "a", encoding="utf-8") as out:
            out.write(line + "\n")


def _client_error(service: str, operation: str, code: str, message: str, status: int) -> Exception:
    from botocore.exceptions import ClientError

    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            # botocore-stubs want every ResponseMetadata key; botocore reads what is there
            "ResponseMetadata": {"HTTPStatusCode": status},  # type: ignore[typeddict-item]
        },
        operation,
    )


# --------------------------------------------------------------------------- installing


def _patch_botocore(module: Any, guard: Guard) -> None:
    original = module.BaseClient._make_api_call

    def _make_api_call(self: Any, operation_name: str, api_params: dict[str, Any]) -> Any:
        guard.check(self.meta.service_model.service_name, operation_name, api_params)
        return original(self, operation_name, api_params)

    module.BaseClient._make_api_call = _make_api_call


def _patch_sqs_sender(module: Any, guard: Guard) -> None:
    original = module.SqsSender._call

    def _call(self: Any, operation: str, members: dict[str, Any]) -> Any:
        guard.check("sqs", operation, members)
        return original(self, operation, members)

    module.SqsSender._call = _call


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs a patch on a module right after it is first imported."""

    def __init__(self, patches: Mapping[str, Callable[[Any], None]]):
        self._patches = dict(patches)

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self._patches.get(name)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def install(path: str) -> Guard:
    """Guard every AWS call of this process (before the function is imported)."""
    guard = Guard.load(path)
    patches = {
        "botocore.client": lambda m: _patch_botocore(m, guard),
        "memagent.aws.sqs": lambda m: _patch_sqs_sender(m, guard),
    }
    for name, patch in list(patches.items()):
        if name in sys.modules:  # imported already (e.g. by devstack itself): patch now
            patch(sys.modules[name])
            del patches[name]
    sys.meta_path.insert(0, _AfterImport(patches))
    return guard


def install_from_environment() -> Guard | None:
    path = os.environ.pop(ENV, None)
    return install(path) if path else None
