"""The operators' user pool on this machine (OperatorConsole=true): moto serves Cognito's API
(the pool, its client and groups, the tokens it signs); this module adds what moto lacks, each
refusing what the real service refuses:

- `ManagedLogin`: the managed login's pages and endpoints (`/oauth2/authorize`, a sign-in form,
  `/oauth2/token`, `/logout`) for the authorization code flow with PKCE. It refuses an unknown
  client, a redirect or logout URL the client does not list, a scope it does not allow, a
  response type other than `code`, a PKCE method other than S256; a code is good once, for five
  minutes, for the client, redirect URL and verifier it was issued for (`invalid_grant`
  otherwise).
- `JwtAuthorizer`: API Gateway's JWT authorizer for an HTTP API route. It takes the token with or
  without `Bearer`, and refuses (401, `{"message": "Unauthorized"}`) a token whose signature does
  not verify with a key of the issuer's JWKS (RSA only, the `kid` must be there), whose `iss` is
  not the configured issuer, whose `aud` (ID token) or `client_id` (access token) is not an
  audience, that has expired, or whose `nbf` or `iat` lies ahead. Claims reach the function as
  API Gateway passes them: strings, an array as "[a b]".

Sources: the API Gateway developer guide, "Control access to HTTP APIs with JWT authorizers";
Amazon Cognito's "Authorize endpoint", "Token endpoint" and "Logout endpoint" pages.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import secrets
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qs, urlencode, urlsplit

from botocore.config import Config
from botocore.exceptions import ClientError
from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from devstack import LoopbackServer, Reply, Request

CODE_LIFETIME = 300.0  # Cognito's authorization codes are good for five minutes
UNAUTHORIZED = {"message": "Unauthorized"}


def seed_operator(
    pool_id: str, username: str, password: str, groups: tuple[str, ...], client: Any = None
) -> None:
    """An invited operator (`username`, at username@example.com) who has set a password (the
    invitation's temporary one changed)."""
    import boto3

    cognito = client or boto3.client("cognito-idp")
    cognito.admin_create_user(
        UserPoolId=pool_id,
        Username=username,
        UserAttributes=[
            {"Name": "email", "Value": f"{username}@example.com"},
            {"Name": "email_verified", "Value": "true"},
        ],
        MessageAction="SUPPRESS",
    )
    cognito.admin_set_user_password(
        UserPoolId=pool_id, Username=username, Password=password, Permanent=True
    )
    for group in groups:
        cognito.admin_add_user_to_group(UserPoolId=pool_id, Username=username, GroupName=group)


# ------------------------------------------------------------------ API Gateway's JWT authorizer


@dataclass
class JwtAuthorizer:
    """One JWT authorizer: its issuer, audiences and where its keys are (the JWKS URL; locally,
    moto's, since the issuer's https URL is Cognito's)."""

    issuer: str
    audience: tuple[str, ...]
    jwks_url: str
    clock: Any = time.time
    _keys: KeySet | None = field(default=None, repr=False)

    def keys(self) -> KeySet:
        if self._keys is None:
            with urllib.request.urlopen(self.jwks_url, timeout=10) as response:  # noqa: S310
                self._keys = KeySet.import_key_set(json.loads(response.read()))
        return self._keys

    def claims(self, header: str | None) -> dict[str, str] | None:
        """The claims as API Gateway passes them, or None: the request gets a 401."""
        if not header:
            return None
        token = header[7:] if header[:7].lower() == "bearer " else header
        try:
            head = json.loads(_b64(token.split(".")[0]))
            kids = {key.kid for key in self.keys()}
            if not str(head.get("alg", "")).startswith("RS") or head.get("kid") not in kids:
                return None
            decoded = jwt.decode(token, self.keys(), algorithms=["RS256", "RS384", "RS512"])
        except (JoseError, ValueError, IndexError):
            return None
        claims = decoded.claims
        now = self.clock()
        audience = claims.get("aud", claims.get("client_id"))
        audiences = audience if isinstance(audience, list) else [audience]
        if claims.get("iss") != self.issuer or not set(audiences) & set(self.audience):
            return None
        times = [claims.get(name, 0) for name in ("exp", "nbf", "iat")]
        if not all(isinstance(t, int | float) for t in times):
            return None  # a time that is no number (RFC 7519's NumericDate)
        expires, not_before, issued = times
        if expires <= now or not_before > now or issued > now:
            return None
        return {name: _as_string(value) for name, value in claims.items()}


def _b64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _as_string(value: Any) -> str:
    if isinstance(value, list):
        return "[" + " ".join(str(v) for v in value) + "]"
    return str(value)


# ------------------------------------------------------------------ the managed login


@dataclass
class _Code:
    client_id: str
    redirect_uri: str
    challenge: str | None
    tokens: dict[str, Any]
    expires: float


class ManagedLogin(LoopbackServer):
    """The user pool's managed login, for `pool_id` (moto's), on loopback."""

    def __init__(self, pool_id: str, *, clock: Any = time.time):
        super().__init__()
        self.pool_id = pool_id
        self.clock = clock
        self._codes: dict[str, _Code] = {}

    def _client(self, client_id: str) -> dict[str, Any] | None:
        import boto3

        try:
            return boto3.client("cognito-idp").describe_user_pool_client(
                UserPoolId=self.pool_id, ClientId=client_id
            )["UserPoolClient"]
        except ClientError:  # ResourceNotFound: an unknown client
            return None

    def handle(self, request: Request) -> Reply:
        query = {k: v[-1] for k, v in parse_qs(request.query, keep_blank_values=True).items()}
        if request.method == "GET" and request.path == "/oauth2/authorize":
            return self._authorize(query)
        if request.method == "POST" and request.path == "/login":
            form = {k: v[-1] for k, v in parse_qs(request.body.decode()).items()}
            return self._sign_in(form)
        if request.method == "POST" and request.path == "/oauth2/token":
            return self._token(request)
        if request.method == "GET" and request.path == "/logout":
            return self._logout(query)
        return Reply(404, b"Not Found", {"Content-Type": "text/plain"})

    def _checked(self, query: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
        """The client, or None and why the request is refused (shown on an error page, never
        sent to an unlisted redirect URL)."""
        client = self._client(query.get("client_id", ""))
        if client is None:
            return None, "invalid_request: unknown client_id"
        if query.get("redirect_uri") not in client.get("CallbackURLs", []):
            return None, "redirect_mismatch"
        if query.get("response_type") != "code" or "code" not in client.get(
            "AllowedOAuthFlows", []
        ):
            return None, "unsupported_response_type"
        scopes = set(query.get("scope", "").split())
        if not scopes <= set(client.get("AllowedOAuthScopes", [])):
            return None, "invalid_scope"
        if "code_challenge" in query and query.get("code_challenge_method") != "S256":
            return None, "invalid_request: code_challenge_method must be S256"
        return client, ""

    def _authorize(self, query: dict[str, str]) -> Reply:
        client, why = self._checked(query)
        if client is None:
            return _page(400, f"<p>Error: {html.escape(why)}</p>")
        return _page(200, _form(query, ""))

    def _sign_in(self, form: dict[str, str]) -> Reply:
        import boto3

        client, why = self._checked(form)
        if client is None:
            return _page(400, f"<p>Error: {html.escape(why)}</p>")
        try:
            answer = boto3.client("cognito-idp").admin_initiate_auth(
                UserPoolId=self.pool_id,
                ClientId=client["ClientId"],
                AuthFlow="ADMIN_USER_PASSWORD_AUTH",
                AuthParameters={
                    "USERNAME": form.get("username", ""),
                    "PASSWORD": form.get("password", ""),
                },
            )
        except ClientError:  # NotAuthorized, UserNotFound: one answer for both
            return _page(200, _form(form, "Incorrect username or password."))
        result = answer["AuthenticationResult"]
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._codes[code] = _Code(
                client_id=client["ClientId"],
                redirect_uri=form["redirect_uri"],
                challenge=form.get("code_challenge") or None,
                tokens={
                    "access_token": result["AccessToken"],
                    "id_token": result["IdToken"],
                    "refresh_token": result["RefreshToken"],
                    "expires_in": result["ExpiresIn"],
                    "token_type": "Bearer",
                },
                expires=self.clock() + CODE_LIFETIME,
            )
        back = {"code": code, **({"state": form["state"]} if form.get("state") else {})}
        return Reply(302, b"", {"Location": f"{form['redirect_uri']}?{urlencode(back)}"})

    def _token(self, request: Request) -> Reply:
        form = {k: v[-1] for k, v in parse_qs(request.body.decode()).items()}
        cors = self._cors(request, form.get("client_id", ""))
        if form.get("grant_type") == "refresh_token":
            return self._refreshed(form, cors)
        if form.get("grant_type") != "authorization_code":
            return Reply.json(400, {"error": "unsupported_grant_type"}, cors)
        with self._lock:
            code = self._codes.pop(form.get("code", ""), None)  # good once, whatever follows
        if code is None or code.expires < self.clock():
            return Reply.json(400, {"error": "invalid_grant"}, cors)
        if code.client_id != form.get("client_id") or code.redirect_uri != form.get("redirect_uri"):
            return Reply.json(400, {"error": "invalid_grant"}, cors)
        if code.challenge is not None:
            verifier = form.get("code_verifier", "").encode()
            digest = base64.urlsafe_b64encode(hashlib.sha256(verifier).digest()).rstrip(b"=")
            if not secrets.compare_digest(digest.decode(), code.challenge):
                return Reply.json(400, {"error": "invalid_grant"}, cors)
        return Reply.json(200, code.tokens, {**cors, "Cache-Control": "no-store"})

    def _refreshed(self, form: dict[str, str], cors: dict[str, str]) -> Reply:
        """The token endpoint's refresh grant: new access and ID tokens for a refresh token the
        pool issued to this client and has not revoked (a global sign-out, RevokeToken, its
        expiry: `invalid_grant`). No new refresh token: Cognito rotates none by default."""
        import boto3

        client = self._client(form.get("client_id", ""))
        if client is None:
            return Reply.json(400, {"error": "invalid_client"}, cors)
        # one attempt: moto answers a refresh token it never issued with a 500 (Cognito: a
        # NotAuthorizedException), which botocore would retry with pauses
        cognito = boto3.client("cognito-idp", config=Config(retries={"total_max_attempts": 1}))
        try:
            result = cognito.admin_initiate_auth(
                UserPoolId=self.pool_id,
                ClientId=client["ClientId"],
                AuthFlow="REFRESH_TOKEN_AUTH",
                AuthParameters={"REFRESH_TOKEN": form.get("refresh_token", "")},
            )["AuthenticationResult"]
        except ClientError:  # NotAuthorized (revoked), or moto's 500 (never issued)
            return Reply.json(400, {"error": "invalid_grant"}, cors)
        tokens = {
            "access_token": result["AccessToken"],
            "id_token": result["IdToken"],
            "expires_in": result["ExpiresIn"],
            "token_type": "Bearer",
        }
        return Reply.json(200, tokens, {**cors, "Cache-Control": "no-store"})

    def _cors(self, request: Request, client_id: str) -> dict[str, str]:
        """A browser page may read the answer if it is served from one of the client's
        callback URLs' origins."""
        origin = request.headers.get("origin", "")
        client = self._client(client_id) if origin else None
        callbacks = (client or {}).get("CallbackURLs", [])
        if any(_origin(url) == origin for url in callbacks):
            return {"Access-Control-Allow-Origin": origin, "Vary": "Origin"}
        return {}

    def _logout(self, query: dict[str, str]) -> Reply:
        client = self._client(query.get("client_id", ""))
        if client is None or query.get("logout_uri") not in client.get("LogoutURLs", []):
            return _page(400, "<p>Error: invalid logout_uri</p>")
        return Reply(302, b"", {"Location": query["logout_uri"]})


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _form(fields: dict[str, str], error: str) -> str:
    kept = (
        "client_id",
        "redirect_uri",
        "response_type",
        "scope",
        "state",
        "code_challenge",
        "code_challenge_method",
    )
    hidden = "".join(
        f'<input type="hidden" name="{name}" value="{html.escape(fields[name])}">'
        for name in kept
        if name in fields
    )
    warning = f'<p id="error">{html.escape(error)}</p>' if error else ""
    return (
        "<h1>Sign in</h1>"
        + warning
        + '<form method="post" action="/login">'
        + hidden
        + '<label>Username or email <input name="username" id="username"></label>'
        + '<label>Password <input name="password" id="password" type="password"></label>'
        + '<button type="submit" id="sign-in">Sign in</button></form>'
    )


def _page(status: int, body: str) -> Reply:
    page = f"<!doctype html><html><head><title>Sign in</title></head><body>{body}</body></html>"
    return Reply(status, page.encode(), {"Content-Type": "text/html; charset=utf-8"})


# ------------------------------------------------------------------ the stack's user pool

LOCAL_OPERATORS = {  # usernames and groups: make console prints these; docs/operator.md too
    "operator": ("operators",),
    "admin": ("admins",),
}
LOCAL_PASSWORD = "Local-operator-1"  # noqa: S105 (a local stand-in's published password)


@dataclass
class LocalUserPool:
    """The template's user pool, client and groups, created in moto, with its managed login
    running: `refs` are what the template's Ref of each gives (pool id, client id)."""

    pool_id: str
    client_id: str
    login: ManagedLogin
    refs: dict[str, str]

    @classmethod
    def create(cls, resources: dict[str, dict[str, Any]], resolve: Any, callback: str) -> Self:
        """From the template's AWS::Cognito resources (their condition holds), `resolve` being
        the stack's cfn.Resolver.resolve. `callback`: the console's URL here (the template's
        names ConsoleApi's execute-api address)."""
        import boto3

        cognito = boto3.client("cognito-idp")
        of = {r["Type"]: (lid, r.get("Properties") or {}) for lid, r in resources.items()}

        def resolved(kind: str, keys: tuple[str, ...]) -> dict[str, Any]:
            # only these keys: the others Ref what is created here (the pool, the client)
            properties = of[kind][1]
            return {k: resolve(properties[k]) for k in keys if k in properties}

        pool = resolved(
            "AWS::Cognito::UserPool",
            ("UserPoolName", "Policies", "AdminCreateUserConfig", "UsernameAttributes",
             "AliasAttributes", "UsernameConfiguration", "AutoVerifiedAttributes",
             "MfaConfiguration", "AccountRecoverySetting"),
        )  # fmt: skip
        name = pool.pop("UserPoolName")
        pool_id = cognito.create_user_pool(PoolName=name, **pool)["UserPool"]["Id"]
        client = resolved(
            "AWS::Cognito::UserPoolClient",
            ("ClientName", "GenerateSecret", "AllowedOAuthFlows", "AllowedOAuthScopes",
             "AllowedOAuthFlowsUserPoolClient", "SupportedIdentityProviders",
             "ExplicitAuthFlows", "PreventUserExistenceErrors", "EnableTokenRevocation"),
        )  # fmt: skip
        client_id = cognito.create_user_pool_client(
            UserPoolId=pool_id, CallbackURLs=[callback], LogoutURLs=[callback], **client
        )["UserPoolClient"]["ClientId"]
        for resource in resources.values():
            if resource["Type"] == "AWS::Cognito::UserPoolGroup":
                group = resolve(resource["Properties"]["GroupName"])
                cognito.create_group(UserPoolId=pool_id, GroupName=group)
        for username, groups in LOCAL_OPERATORS.items():
            seed_operator(pool_id, username, LOCAL_PASSWORD, groups, cognito)
        login = ManagedLogin(pool_id).start()
        refs = {
            of["AWS::Cognito::UserPool"][0]: pool_id,
            of["AWS::Cognito::UserPoolClient"][0]: client_id,
        }
        if "AWS::Cognito::UserPoolDomain" in of:  # its Ref is the prefix; here, the stand-in's
            refs[of["AWS::Cognito::UserPoolDomain"][0]] = "local"
        return cls(pool_id, client_id, login, refs)

    def stop(self) -> None:
        self.login.stop()
