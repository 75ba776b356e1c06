"""Who is calling the admin routes, and what they may do.

The same routes have two doors (template.yaml):

- AdminApi, AWS_IAM: scripts, the CLI and the local console sign with SigV4. API Gateway has
  checked the signature and IAM the policy; the caller is the IAM ARN, and may do anything the
  route offers (its IAM policy decides which routes it reaches).
- ConsoleApi, a JWT authorizer (OperatorConsole=true): a person signed in to the operators' user
  pool. API Gateway has checked the token (issuer, audience, expiry, signature); the groups are
  checked here, per route, and fail closed: each route of memagent/operator/routes.py names the
  least group that may use it (`operators`: the seat; `admins`: also export and erase); `admins`
  may use every route, and a token in neither group may do nothing.

API Gateway passes a JWT's claims as strings: an array claim such as `cognito:groups` arrives as
"[admins operators]" (payload format 2.0), or as a list from a local stand-in that keeps JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

OPERATORS = "operators"
ADMINS = "admins"
# each group with the groups that may do what it may (admins may do what operators may)
GROUPS: dict[str, frozenset[str]] = {
    OPERATORS: frozenset({OPERATORS, ADMINS}),
    ADMINS: frozenset({ADMINS}),
}


@dataclass(frozen=True)
class Caller:
    """One request's caller. `door`: "iam" or "console"; `name`: the IAM ARN, or the user
    pool's username; `sub`: the user pool's subject (console only)."""

    door: str
    name: str
    sub: str | None = None
    groups: frozenset[str] = frozenset()

    def may(self, group: str) -> bool:
        """May this caller use a route open to `group` (a route's group: routes.py)?"""
        if self.door == "iam":
            return True  # IAM's policy on the route decided
        return bool(self.groups & GROUPS.get(group, frozenset()))  # an unknown group: nobody


def needed_for(group: str) -> str:
    """The groups that may use a route open to `group`, as a refusal names them."""
    return " or ".join(sorted(GROUPS[group], key=[OPERATORS, ADMINS].index))


def caller_of(request_context: Mapping[str, Any]) -> Caller | None:
    """The caller API Gateway's authorizer let through (payload 2.0's requestContext), or None
    when no authorizer ran (the console's page, or a misrouted request: refused)."""
    authorizer = request_context.get("authorizer") or {}
    iam = authorizer.get("iam") or {}
    if iam.get("userArn"):
        return Caller("iam", str(iam["userArn"]))
    claims = (authorizer.get("jwt") or {}).get("claims") or {}
    sub = claims.get("sub")
    if not sub:
        return None
    name = claims.get("username") or claims.get("cognito:username") or sub
    return Caller("console", str(name), str(sub), groups_of(claims.get("cognito:groups")))


def groups_of(claim: Any) -> frozenset[str]:
    """`cognito:groups` as API Gateway passes it ("[a b]") or as JSON (["a", "b"])."""
    if claim is None:
        return frozenset()
    if isinstance(claim, list | tuple):
        return frozenset(str(group) for group in claim)
    text = str(claim).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return frozenset(part for part in text.replace(",", " ").split() if part)
