"""The template's IAM, resolved for one shape of the stack: each role's trust policy and its
policies (inline `Policies` and the AWS::IAM::Policy resources attached to it), each function's
role, and the resource-based policies of queues and buckets.

    iam = StackIam.from_template(template, resolver, role_arn=lambda lid: ...)
    iam.function_role["ConsumerFunction"]  -> "ConsumerRole"
    iam.decide("ConsumerRole", request)    -> Decision
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from devstack import cfn
from devstack.iam.policy import Decision, Principal, Request, decide, may_assume

ROLE = "AWS::IAM::Role"


@dataclass
class Role:
    logical_id: str
    arn: str
    trust: dict[str, Any]
    policies: list[dict[str, Any]] = field(default_factory=list)  # policy documents

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _holds(resolver: cfn.Resolver, resource: Mapping[str, Any]) -> bool:
    return "Condition" not in resource or resolver.condition(resource["Condition"])


@dataclass
class StackIam:
    roles: dict[str, Role]  # logical id -> role
    function_role: dict[str, str]  # function logical id -> role logical id
    resource_policies: dict[str, list[dict[str, Any]]]  # resource ARN -> policy documents
    account: str = cfn.ACCOUNT_ID

    @classmethod
    def from_template(
        cls,
        template: Mapping[str, Any],
        resolver: cfn.Resolver,
        role_arn: Callable[[str], str],
    ) -> StackIam:
        resources = template.get("Resources") or {}
        roles: dict[str, Role] = {}
        for logical_id, resource in resources.items():
            if resource.get("Type") != ROLE or not _holds(resolver, resource):
                continue
            props = resource.get("Properties") or {}
            if props.get("ManagedPolicyArns"):
                raise cfn.TemplateError(
                    f"{logical_id}: managed policies are not evaluated locally; write them inline"
                )
            role = Role(
                logical_id,
                role_arn(logical_id),
                resolver.resolve(props["AssumeRolePolicyDocument"]),
            )
            for policy in resolver.resolve(props.get("Policies") or []):
                role.policies.append(policy["PolicyDocument"])
            roles[logical_id] = role
        policies: dict[str, list[dict[str, Any]]] = {}
        for resource in resources.values():
            if not _holds(resolver, resource):
                continue
            kind, props = resource.get("Type"), resource.get("Properties") or {}
            if kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                document = resolver.resolve(props["PolicyDocument"])
                for target in props.get("Roles") or []:
                    roles[cfn.logical_id_of(target)].policies.append(document)
            elif kind == "AWS::SQS::QueuePolicy":
                document = resolver.resolve(props["PolicyDocument"])
                for url in resolver.resolve(props["Queues"]):
                    account, name = str(url).rstrip("/").rsplit("/", 2)[-2:]
                    arn = f"arn:aws:sqs:{resolver.pseudo['AWS::Region']}:{account}:{name}"
                    policies.setdefault(arn, []).append(document)
            elif kind == "AWS::S3::BucketPolicy":
                document = resolver.resolve(props["PolicyDocument"])
                policies.setdefault(f"arn:aws:s3:::{resolver.resolve(props['Bucket'])}", []).append(
                    document
                )
        function_role = {}
        for logical_id, resource in resources.items():
            if resource.get("Type") == cfn.FUNCTION and _holds(resolver, resource):
                named = (resource.get("Properties") or {}).get("Role")
                if named is None:
                    raise cfn.TemplateError(f"{logical_id}: a function without an explicit Role")
                function_role[logical_id] = cfn.logical_id_of(named)
        return cls(roles, function_role, policies)

    def resource_policies_for(self, resource: str) -> list[dict[str, Any]]:
        """A queue's or a bucket's own policy (an object is its bucket's)."""
        if resource.startswith("arn:aws:s3:::"):
            resource = resource.split("/", 1)[0]
        return self.resource_policies.get(resource, [])

    def decide(self, role: str, request: Request) -> Decision:
        found = self.roles[role]
        context = {
            "aws:PrincipalArn": found.arn,
            "aws:PrincipalAccount": self.account,
            **request.context,
        }
        request = Request(request.action, request.resource, context)
        return decide(
            request,
            identity=found.policies,
            resource=self.resource_policies_for(request.resource),
            principal=Principal(arn=found.arn, account=self.account),
        )

    def service_may_assume(self, role: str, service: str, context: Mapping[str, Any]) -> bool:
        found = self.roles[role]
        return may_assume(found.trust, Principal(service=service, account=self.account), context)

    def role_by_arn(self, arn: str) -> Role | None:
        return next((r for r in self.roles.values() if r.arn == arn), None)
