"""The console's door (OperatorConsole=true): operators sign in to the user pool's managed login
(authorization code with PKCE), API Gateway's JWT authorizer checks their token, and the admin
function checks their group per route and names them in the audit line.

Through the real pieces over HTTP: moto's Cognito (the pool, its groups, the tokens it signs and
its JWKS), devstack's managed login and JWT authorizer (devstack/cognito.py) in front of the admin
handler (LocalHttpApi, payload 2.0), and urllib as the browser's requests would be."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import logging
import secrets
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import resources as package_files
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import boto3
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet, RSAKey

from devstack import cfn
from devstack.apigw import LocalHttpApi, Route
from devstack.aws import REGION
from devstack.cognito import (
    CODE_LIFETIME,
    LOCAL_OPERATORS,
    LOCAL_PASSWORD,
    JwtAuthorizer,
    LocalUserPool,
)
from devstack.lambda_harness import Outcome
from devstack.resources import load_template
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function
from tests.integration.test_lifecycle import fill

OPERATOR, ADMIN = list(LOCAL_OPERATORS)  # in groups operators, admins


class Door:
    """The console's API as the stack serves it: GET / open, everything else behind the JWT."""

    def __init__(self, pool: LocalUserPool, api: LocalHttpApi, jwks: str):
        self.pool, self.api, self.jwks = pool, api, jwks
        self.url = api.url + "/"

    def sign_in(self, username: str, password: str = LOCAL_PASSWORD) -> dict[str, Any]:
        """The browser's sign-in: authorize, the form, the redirect back, the code for tokens."""
        verifier = secrets.token_urlsafe(32)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        query = self.authorize_query(challenge.rstrip(b"=").decode())
        status, _headers, body = call("GET", f"{self.pool.login.url}/oauth2/authorize?{query}")
        assert status == 200 and b'name="password"' in body
        form = {**parse_qs_one(query), "username": username, "password": password}
        status, headers, body = call("POST", f"{self.pool.login.url}/login", form=form)
        if status != 302:
            return {"refused": body.decode()}
        back = urlsplit(headers["Location"])
        assert f"{back.scheme}://{back.netloc}{back.path}" == self.url
        code = parse_qs(back.query)["code"][0]
        assert parse_qs(back.query)["state"] == ["st-1"]
        return self.token(code, verifier)

    def authorize_query(self, challenge: str, **changed: str) -> str:
        return urlencode(
            {
                "response_type": "code",
                "client_id": self.pool.client_id,
                "redirect_uri": self.url,
                "scope": "openid email",
                "state": "st-1",
                "code_challenge": challenge,
                "code_challenge_method": "S256",
                **changed,
            }
        )

    def token(self, code: str, verifier: str, **changed: str) -> dict[str, Any]:
        form = {
            "grant_type": "authorization_code",
            "client_id": self.pool.client_id,
            "code": code,
            "redirect_uri": self.url,
            "code_verifier": verifier,
            **changed,
        }
        status, _headers, body = call("POST", f"{self.pool.login.url}/oauth2/token", form=form)
        return json.loads(body) | {"status": status}

    def request(self, method: str, path: str, token: str | None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        status, _headers, body = call(method, self.api.url + path, headers=headers)
        return status, json.loads(body or b"null")


def parse_qs_one(query: str) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(query).items()}


class _Kept(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a redirect is an answer to look at, not to follow


def call(
    method: str, url: str, *, form: dict[str, str] | None = None, headers: dict | None = None
) -> tuple[int, dict[str, str], bytes]:
    data = urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with urllib.request.build_opener(_Kept).open(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.fixture
def door(resources, whasp, bus, monkeypatch, lambda_context) -> Iterator[Door]:
    template = load_template()
    cognito = {
        lid: r for lid, r in template["Resources"].items() if r["Type"].startswith("AWS::Cognito::")
    }
    api = LocalHttpApi("ConsoleApi", []).start()

    # the intrinsics the pool's properties use (the pool's name from the stack's id), resolved
    # as the local stack resolves them
    resolver = cfn.Resolver(template, cfn.parameter_values(template, {}))
    pool = LocalUserPool.create(cognito, resolver.resolve, api.url + "/")
    moto = boto3.client("cognito-idp")._endpoint.host
    jwks = f"{moto}/{pool.pool_id}/.well-known/jwks.json"
    api.authorizer = JwtAuthorizer(
        issuer=f"https://cognito-idp.{REGION}.amazonaws.com/{pool.pool_id}",
        audience=(pool.client_id,),
        jwks_url=jwks,
    )
    admin = load_function(
        "admin",
        {
            "TABLE_NAME": resources.table_name,
            "AGENT_ID": AGENT,
            "CONSOLE_CLIENT_ID": pool.client_id,
            "CONSOLE_LOGIN_URL": pool.login.url,
            "PROVIDER": "whasp",  # as the template always sets it: the operator's replies
            "WHASP_API_URL": whasp.url,
            "WHASP_API_KEY": "whasp-test-key",
            "OPERATOR_EVENT_BUS": bus["name"],
        },
        monkeypatch,
    )

    def invoke(event: dict[str, Any]) -> Outcome:
        return Outcome(ok=True, result=admin.handler(event, lambda_context))

    api.route([Route("GET", "/", invoke), Route("ANY", "/{proxy+}", invoke, auth="JWT")])
    try:
        yield Door(pool, api, jwks)
    finally:
        api.stop()
        pool.stop()


def moto_signed(claims: dict[str, Any], key: Any = None) -> str:
    """A token signed as moto's Cognito signs (its published test key), with `claims`."""
    if key is None:
        private = package_files.files("moto.cognitoidp").joinpath("resources/jwks-private.json.gz")
        key = KeySet.import_key_set({"keys": [json.loads(gzip.decompress(private.read_bytes()))]})
        key = key.keys[0]
    return jwt.encode({"alg": "RS256", "kid": key.kid or "dummy"}, claims, key)


# ------------------------------------------------------------------ the JWT authorizer


def test_a_signed_in_operator_reaches_the_routes_and_nothing_else_does(door):
    tokens = door.sign_in(OPERATOR)
    assert tokens["status"] == 200 and tokens["token_type"] == "Bearer"
    # the access token, with or without "Bearer", opens the routes
    assert door.request("GET", "/handoffs", tokens["access_token"]) == (200, {"handoffs": []})
    status, _h, _b = call(
        "GET", door.api.url + "/handoffs", headers={"Authorization": tokens["access_token"]}
    )
    assert status == 200
    # no token, a wrong password's nothing, and garbage are refused before the function runs
    assert door.request("GET", "/handoffs", None) == (401, {"message": "Unauthorized"})
    assert door.request("GET", "/handoffs", "not-a-jwt") == (401, {"message": "Unauthorized"})
    assert "Incorrect username or password" in door.sign_in(OPERATOR, "wrong-Password-1")["refused"]


def test_an_expired_a_foreign_or_a_forged_token_is_refused(door):
    good = door.sign_in(OPERATOR)["access_token"]
    claims = jwt.decode(good, KeySet.import_key_set(fetch_json(door.jwks))).claims
    now = int(time.time())
    assert door.request("GET", "/handoffs", moto_signed(claims))[0] == 200  # the key is moto's
    refused = {
        "expired": {**claims, "exp": now - 1},
        "not yet valid": {**claims, "nbf": now + 600},
        "issued in the future": {**claims, "iat": now + 600},
        "another pool": {**claims, "iss": claims["iss"].rsplit("/", 1)[0] + "/us-east-1_other"},
        "another client": {**claims, "client_id": "another-client"},
    }
    for why, changed in refused.items():
        assert door.request("GET", "/handoffs", moto_signed(changed))[0] == 401, why
    # signed with a key the pool does not publish, though it claims moto's key id
    stranger = RSAKey.generate_key(2048, parameters={"kid": "dummy"})
    assert door.request("GET", "/handoffs", moto_signed(claims, stranger))[0] == 401
    # an ID token of this client passes (aud); its signature and claims still hold
    assert door.request("GET", "/handoffs", door.sign_in(OPERATOR)["id_token"])[0] == 200
    # "alg": "none" is never taken
    head = base64.urlsafe_b64encode(b'{"alg":"none","kid":"dummy"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    assert door.request("GET", "/handoffs", f"{head}.{body}.")[0] == 401


def fetch_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


# ------------------------------------------------------------------ the managed login


def test_the_managed_login_refuses_what_cognito_refuses(door):
    verifier = secrets.token_urlsafe(32)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    challenge = challenge.rstrip(b"=").decode()
    login = door.pool.login.url
    for changed in (
        {"client_id": "unknown"},
        {"redirect_uri": "https://evil.example/"},
        {"response_type": "token"},
        {"scope": "openid aws.cognito.signin.user.admin"},
        {"code_challenge_method": "plain"},
    ):
        query = door.authorize_query(challenge, **changed)
        status, headers, _body = call("GET", f"{login}/oauth2/authorize?{query}")
        assert status == 400 and "Location" not in headers, changed
    # a code is good once, for its verifier, client and redirect URL
    query = door.authorize_query(challenge)
    form = {**parse_qs_one(query), "username": OPERATOR, "password": LOCAL_PASSWORD}

    def code() -> str:
        _status, headers, _body = call("POST", f"{login}/login", form=form)
        return parse_qs(urlsplit(headers["Location"]).query)["code"][0]

    assert door.token(code(), "another-verifier")["error"] == "invalid_grant"
    assert door.token(code(), verifier, redirect_uri=door.url + "x")["error"] == "invalid_grant"
    once = code()
    assert door.token(once, verifier)["status"] == 200
    assert door.token(once, verifier)["error"] == "invalid_grant"
    # and for five minutes (on the stand-in's clock)
    late = code()
    door.pool.login.clock = lambda: time.time() + CODE_LIFETIME + 1
    assert door.token(late, verifier)["error"] == "invalid_grant"


def test_the_page_is_open_and_holds_no_data_and_runs_only_its_own_script(door):
    status, headers, body = call("GET", door.url)
    assert status == 200
    policy = headers["Content-Security-Policy"]
    nonce = policy.split("'nonce-", 1)[1].split("'", 1)[0]
    assert f'<script nonce="{nonce}">' in body.decode()
    assert "unsafe-inline" not in policy and "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy and door.pool.login.url in policy
    config = json.loads(body.decode().split('id="console-config">', 1)[1].split("</script>")[0])
    assert config == {
        "door": "user-pool",
        "login": door.pool.login.url,
        "client": door.pool.client_id,
    }
    # a second load gets another nonce
    assert nonce not in call("GET", door.url)[1]["Content-Security-Policy"]


# ------------------------------------------------------------------ groups and the audit line


def test_an_operator_may_not_erase_or_export_an_admin_may_and_the_audit_names_them(
    door, resources, caplog
):
    fill(resources.table_name, MAYA, messages=2, facts=1, ledger=1)
    operator = door.sign_in(OPERATOR)["access_token"]
    admin = door.sign_in(ADMIN)["access_token"]
    path = f"/people/{quote(MAYA, safe='')}"
    caplog.set_level(logging.INFO)
    # an operator reads and takes over...
    assert door.request("GET", path + "/conversation", operator)[0] == 200
    status, taken = door.request("POST", path + "/handoff", operator)
    # who took it, by the name the console shows: the operator's username
    assert status == 200 and taken["handoff"]["by"] == claims_of(operator)["username"] == OPERATOR
    # ...but may neither erase nor export: 403, and nothing is erased
    for method in ("DELETE", "GET"):
        status, body = door.request(method, path, operator)
        assert status == 403 and "admins" in body["error"]
    assert door.request("GET", path + "/facts", operator)[1]["facts"]
    # an admin may
    assert door.request("GET", path, admin)[0] == 200
    assert door.request("DELETE", path, admin)[0] == 200
    # and each audit line names the operator: the user pool's username and sub
    lines = [vars(r) for r in caplog.records if "audit" in vars(r)]
    refused = [line for line in lines if line["outcome"] == "refused"]
    assert [(x["audit"], x["caller"], x["caller_sub"], x["door"]) for x in refused] == [
        (a, claims_of(operator)["username"], claims_of(operator)["sub"], "console")
        for a in ("erase", "export")
    ]
    [erased] = [x for x in lines if x["audit"] == "erase" and x["outcome"] == "done"]
    assert (erased["caller_sub"], erased["person"]) == (
        claims_of(admin)["sub"],
        person_key(AGENT, MAYA),
    )


def test_a_token_in_no_group_may_do_nothing(door):
    cognito = boto3.client("cognito-idp")
    from devstack.cognito import seed_operator

    seed_operator(door.pool.pool_id, "nobody", LOCAL_PASSWORD, (), cognito)
    token = door.sign_in("nobody")["access_token"]
    assert door.request("GET", "/handoffs", token)[0] == 403


def claims_of(token: str) -> dict[str, Any]:
    part = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


# ------------------------------------------------------------------ short tokens, refreshed


def test_console_tokens_are_short_lived_and_refreshed_until_the_operator_is_signed_out(door):
    # the template's client: access and ID tokens for 15 minutes, refreshed for a 12-hour shift
    [client] = [
        r["Properties"]
        for r in load_template()["Resources"].values()
        if r["Type"] == "AWS::Cognito::UserPoolClient"
    ]
    units = client["TokenValidityUnits"]
    assert (client["AccessTokenValidity"], units["AccessToken"]) == (15, "minutes")
    assert (client["IdTokenValidity"], units["IdToken"]) == (15, "minutes")
    assert (client["RefreshTokenValidity"], units["RefreshToken"]) == (12, "hours")
    assert client["EnableTokenRevocation"] is True
    # given an operator signed in through the managed login
    tokens = door.sign_in(OPERATOR)
    refresh = {
        "grant_type": "refresh_token",
        "client_id": door.pool.client_id,
        "refresh_token": tokens["refresh_token"],
    }
    # when the page trades the refresh token for new tokens (its access token about to expire)
    status, _headers, body = call("POST", f"{door.pool.login.url}/oauth2/token", form=refresh)
    renewed = json.loads(body)
    # then the new access token opens the routes, with no sign-in page in between
    assert status == 200 and "refresh_token" not in renewed
    assert door.request("GET", "/handoffs", renewed["access_token"])[0] == 200
    # when an admin signs the operator out everywhere (AdminUserGlobalSignOut revokes the
    # refresh tokens), then no new token is given: the next is at most 15 minutes away
    boto3.client("cognito-idp").admin_user_global_sign_out(
        UserPoolId=door.pool.pool_id, Username=OPERATOR
    )
    status, _headers, body = call("POST", f"{door.pool.login.url}/oauth2/token", form=refresh)
    assert (status, json.loads(body)) == (400, {"error": "invalid_grant"})
    # and another client's id, or a made-up token, gets none either
    for changed in ({"client_id": "another-client"}, {"refresh_token": "made-up"}):
        status, _headers, _body = call(
            "POST", f"{door.pool.login.url}/oauth2/token", form={**refresh, **changed}
        )
        assert status == 400
