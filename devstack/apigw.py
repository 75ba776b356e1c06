"""API Gateway HTTP API (payload format 2.0) on loopback, in front of the real handlers.

`LocalHttpApi` serves the routes the template gives an HTTP API (`Events: Type: HttpApi`), turns
each request into the event Lambda receives from API Gateway, and each handler result back into
an HTTP response, following the documented payload 2.0 rules:

- header names lower-cased, repeated headers joined with commas;
- text bodies passed as they are, other bodies base64-encoded with `isBase64Encoded: true`;
- a result with `statusCode` is the response; any other result is a 200 JSON body;
- a function error answers 500 and a timeout 503, with API Gateway's own JSON bodies.

Authorizers, per route:

- JWT (the console's door): checked as API Gateway checks it (devstack/cognito.py's
  JwtAuthorizer): a 401 `{"message": "Unauthorized"}` for a missing, expired, foreign or forged
  token, else the claims in `requestContext.authorizer.jwt`, as strings.
- AWS_IAM: the SigV4 signature is NOT checked here (there are no IAM users on this machine); the
  event names LOCAL_IAM_CALLER, as if that ARN had signed. The IAM door's refusals are AWS's.
  What stands in for the signature is the console's check (console/server.py): a request is
  answered only when its `Host` is this server's own name (127.0.0.1 or localhost at its
  port) and its `Origin`, when a browser sends one, is too; else a 403 and the function never
  runs. A page another site serves, or one whose host name it rebound to 127.0.0.1 (DNS
  rebinding), cannot drive the local admin API, and spend the OPENAI_API_KEY behind it.

Not emulated: Lambda authorizers, throttling, custom domains, stages other than `$default`,
CORS and the 30 s integration timeout (the function's own Timeout applies).
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs

from devstack import LoopbackServer, Reply, Request
from devstack.aws import REGION
from devstack.cfn import ACCOUNT_ID
from devstack.cognito import JwtAuthorizer
from devstack.lambda_harness import Outcome

MAX_PAYLOAD_BYTES = 10 * 1024 * 1024  # HTTP API's request payload quota
# the methods an HTTP API route can name (ANY is all of them); any other matches no route: 404
HTTP_API_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
LOCAL_IAM_CALLER = f"arn:aws:iam::{ACCOUNT_ID}:user/local-operator"
_TEXT_TYPES = re.compile(
    r"^(text/.*|application/(json|.*\+json|xml|.*\+xml|javascript|x-www-form-urlencoded))$"
)


def http_api_event(
    *,
    method: str,
    path: str,
    headers: dict[str, str],
    body: bytes,
    query: str = "",
    route_key: str | None = None,
    path_parameters: dict[str, str] | None = None,
    api_id: str = "localapi01",
    source_ip: str = "127.0.0.1",
    caller: str | None = None,
    jwt_claims: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The event a Lambda function receives from an HTTP API for one request. `caller`: the
    IAM ARN whose SigV4 signature the route's AWS_IAM authorizer accepted (the admin API);
    `jwt_claims`: the claims of the token the route's JWT authorizer accepted (the console)."""
    headers = {name.lower(): value for name, value in headers.items()}
    content_type = headers.get("content-type", "").split(";")[0].strip().lower()
    text = None
    if not body or _TEXT_TYPES.match(content_type):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            text = None
    now = datetime.now(UTC)
    route_key = route_key or f"{method} {path}"
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": route_key,
        "rawPath": path,
        "rawQueryString": query,
        "headers": headers,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": api_id,
            "domainName": f"{api_id}.execute-api.{REGION}.amazonaws.com",
            "domainPrefix": api_id,
            "http": {
                "method": method,
                "path": path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": headers.get("user-agent", ""),
            },
            "requestId": uuid.uuid4().hex[:16],
            "routeKey": route_key,
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(time.time() * 1000),
        },
        "isBase64Encoded": text is None,
    }
    if body:
        event["body"] = text if text is not None else base64.b64encode(body).decode()
    if query:  # a repeated parameter's values joined with commas
        params = parse_qs(query, keep_blank_values=True).items()
        event["queryStringParameters"] = {name: ",".join(values) for name, values in params}
    if path_parameters:
        event["pathParameters"] = path_parameters
    if caller is not None:  # payload 2.0's requestContext.authorizer.iam
        account = caller.split(":")[4] or ACCOUNT_ID
        event["requestContext"]["authorizer"] = {
            "iam": {
                "accessKey": "AKIAEXAMPLE",
                "accountId": account,
                "callerId": "AIDAEXAMPLE",
                "userArn": caller,
                "userId": "AIDAEXAMPLE",
            }
        }
    if jwt_claims is not None:  # payload 2.0's requestContext.authorizer.jwt
        event["requestContext"]["authorizer"] = {"jwt": {"claims": jwt_claims, "scopes": None}}
    if "cookie" in headers:
        event["cookies"] = [c.strip() for c in headers["cookie"].split(";") if c.strip()]
    return event


def http_response(outcome: Outcome) -> Reply:
    """The HTTP response API Gateway makes of an invocation's outcome (payload format 2.0)."""
    if not outcome.ok:
        if outcome.error_type == "Timeout":
            return Reply.json(503, {"message": "Service Unavailable"})
        return Reply.json(500, {"message": "Internal Server Error"})
    result = outcome.result
    if not (isinstance(result, dict) and "statusCode" in result):
        return Reply.json(200, result)  # API Gateway infers a JSON response
    body = result.get("body") or ""
    raw = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    headers = {str(k): str(v) for k, v in (result.get("headers") or {}).items()}
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers[str(name)] = ",".join(str(v) for v in values)
    if result.get("cookies"):
        headers["Set-Cookie"] = "; ".join(result["cookies"])  # one header is enough locally
    return Reply(int(result["statusCode"]), raw, headers)


@dataclass(frozen=True)
class Route:
    method: str  # "POST", or "ANY"
    path: str  # "/webhook", "/people/{id}", "/{proxy+}"
    invoke: Callable[[dict[str, Any]], Outcome]
    auth: str = "NONE"  # "NONE", "AWS_IAM" or "JWT" (the API's authorizer)

    @property
    def key(self) -> str:
        return f"{self.method} {self.path}"

    def match(self, method: str, path: str) -> dict[str, str] | None:
        if self.method != method and (self.method != "ANY" or method not in HTTP_API_METHODS):
            return None
        pattern = ""
        for part in re.split(r"(\{[^}]+\})", self.path):
            if part.startswith("{") and part.endswith("+}"):
                pattern += f"(?P<{_group(part[1:-2])}>.+)"
            elif part.startswith("{"):
                pattern += f"(?P<{_group(part[1:-1])}>[^/]+)"
            else:
                pattern += re.escape(part)
        found = re.fullmatch(pattern, path)
        if found is None:
            return None
        names = re.findall(r"\{([^}+]+)\+?\}", self.path)
        return {name: found.group(_group(name)) for name in names}


_CHALLENGE = {"www-authenticate": 'Bearer scope="" error="invalid_token"'}


def _group(name: str) -> str:
    return "p_" + re.sub(r"\W", "_", name)


class LocalHttpApi(LoopbackServer):
    """One HTTP API: its routes, each wired to a function's `invoke`."""

    def __init__(
        self,
        name: str,
        routes: list[Route],
        *,
        on_request: Callable[[str, int, float], None] | None = None,
        authorizer: JwtAuthorizer | None = None,
    ):
        super().__init__()
        self.name = name
        self.api_id = re.sub(r"[^a-z0-9]", "", name.lower())[:10] or "localapi01"
        self.routes: list[Route] = []
        self.route(routes)
        self.on_request = on_request  # (route key, status, milliseconds), for progress output
        self.authorizer = authorizer  # the JWT routes' authorizer

    def route(self, routes: list[Route]) -> None:
        """Serve `routes` (an API bound before its functions started gets them then)."""
        # Exact paths before templated ones, as API Gateway prefers the most specific route.
        self.routes = sorted(routes, key=lambda r: (r.path.count("{"), r.method == "ANY"))

    def _own(self, request: Request) -> bool:
        """Sent to this server by its own name, from no other site's page (console/server.py's
        check): the browser sends the name it resolved, a rebound one included."""
        port = self.url.rsplit(":", 1)[-1]
        hosts = {f"{name}:{port}" for name in ("127.0.0.1", "localhost")}
        origin = request.headers.get("origin")
        return request.headers.get("host", "").lower() in hosts and (
            origin is None or origin.lower() in {f"http://{host}" for host in hosts}
        )

    def handle(self, request: Request) -> Reply:
        started = time.perf_counter()
        if len(request.body) > MAX_PAYLOAD_BYTES:
            return Reply.json(413, {"message": "Request Entity Too Large"})
        for route in self.routes:
            parameters = route.match(request.method, request.path)
            if parameters is None:
                continue
            claims = None
            if route.auth == "AWS_IAM" and not self._own(request):
                return Reply.json(403, {"message": "Forbidden"})
            if route.auth == "JWT":  # no authorizer configured refuses everything
                header = request.headers.get("authorization")
                found = self.authorizer.claims(header) if self.authorizer else None
                if found is None:  # API Gateway's answer: the function never runs
                    return Reply.json(401, {"message": "Unauthorized"}, _CHALLENGE)
                claims = found
            event = http_api_event(
                method=request.method,
                path=request.path,
                headers=request.headers,
                body=request.body,
                query=request.query,
                route_key=route.key,
                path_parameters=parameters or None,
                api_id=self.api_id,
                caller=LOCAL_IAM_CALLER if route.auth == "AWS_IAM" else None,
                jwt_claims=claims,
            )
            reply = http_response(route.invoke(event))
            if self.on_request:
                self.on_request(route.key, reply.status, (time.perf_counter() - started) * 1000)
            return reply
        return Reply.json(404, {"message": "Not Found"})
