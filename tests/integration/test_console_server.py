"""The operator console's server (console/server.py) over HTTP, as a browser reaches it, in front
of the real admin handler (behind devstack's local HTTP API, over moto): it forwards only what its
own page sends. A page elsewhere, even one whose host name was rebound to 127.0.0.1 (so that it
is "same-origin" with itself and may send any header), gets nothing: not the page, not its token,
not one admin call signed with the operator's credentials."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

from console.server import AdminApi, Console
from devstack.apigw import LocalHttpApi, Route
from devstack.lambda_harness import LambdaContext, invoke
from tests.integration import test_operator
from tests.integration.test_operator import say

HEADER = "X-Operator-Console"
admin, admin_env = test_operator.admin, test_operator.admin_env  # the operator tests' fixtures


@pytest.fixture
def console(admin) -> Iterator[Console]:
    invoked = lambda event: invoke(admin.handler, event, LambdaContext())  # noqa: E731
    route = Route("ANY", "/{proxy+}", invoked, auth="AWS_IAM")  # the IAM door, as deployed
    with LocalHttpApi("AdminApi", [route]) as api, Console(AdminApi(api.url)) as console:
        yield console


def get(console: Console, path: str, **headers: str) -> tuple[int, Any]:
    """GET `path` from the console; (status, body: JSON parsed, else text)."""
    request = urllib.request.Request(console.url + path.lstrip("/"), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


def page_token(console: Console, host: str | None = None) -> str:
    """The token in the page the console serves (what its own page's scripts read)."""
    status, page = get(console, "/", **({"Host": host} if host else {}))
    assert status == 200
    found = re.search(r'<script type="application/json" id="console-config">([^<]+)</script>', page)
    assert found, "the page carries no configuration"
    config = json.loads(found[1])
    assert config["door"] == "proxy", "the page carries no token"
    return config["token"]


def port(console: Console) -> int:
    return int(urlsplit(console.url).port or 0)


def test_a_page_rebound_to_loopback_gets_neither_the_page_nor_an_admin_call(
    console, consumer, lambda_context
):
    # given Maya's memory, and a page at http://evil.example:PORT whose name now resolves to
    # 127.0.0.1: its requests name its own host and origin, and it may send any header
    say(consumer, lambda_context, "Hi, I'm Maya")
    rebound = f"evil.example:{port(console)}"
    evil = {"Host": rebound, "Origin": f"http://{rebound}", HEADER: "1"}
    # when it reads the page (for its token) and asks for Maya's conversation and the list
    page = get(console, "/", Host=rebound)
    reads = [get(console, f"/api/people/{quote('+447700900123', safe='')}/conversation", **evil)]
    reads.append(get(console, "/api/handoffs", **evil))
    # then every one is refused, and nothing of Maya's is in any answer
    assert [status for status, _ in [page, *reads]] == [403, 403, 403]
    assert "console-token" not in json.dumps(page) and "Maya" not in json.dumps(reads)


def test_a_request_without_this_runs_token_or_from_another_origin_is_refused(
    console, consumer, lambda_context
):
    say(consumer, lambda_context, "Hi, I'm Maya")
    token = page_token(console)
    # a request without the token, with the header a page could guess, with another run's
    # token, or with the token but from another site's origin
    for headers in (
        {},
        {HEADER: "1"},
        {HEADER: token[:-1] + ("A" if token[-1] != "A" else "B")},
        {HEADER: token, "Origin": "https://evil.example"},
        {HEADER: token, "Origin": "null"},
    ):
        assert get(console, "/api/handoffs", **headers)[0] == 403, headers


def test_the_consoles_own_page_is_served_and_its_requests_forwarded(
    console, consumer, lambda_context
):
    say(consumer, lambda_context, "Hi, I'm Maya")
    # the page as the operator opens it, at 127.0.0.1 or at localhost
    for host in (f"127.0.0.1:{port(console)}", f"localhost:{port(console)}"):
        token = page_token(console, host)
        own = {"Host": host, "Origin": f"http://{host}", HEADER: token}
        status, conversation = get(
            console, f"/api/people/{quote('+447700900123', safe='')}/conversation", **own
        )
        assert status == 200
        assert conversation["messages"][0]["text"] == "Hi, I'm Maya"
        # a same-origin GET carries no Origin: the token alone lets it through
        assert get(console, "/api/handoffs", Host=host, **{HEADER: token}) == (
            200,
            {"handoffs": []},
        )
