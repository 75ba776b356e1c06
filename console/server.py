"""The operator's console: a small web page on your own machine, for the admin API.

    make console STACK=whasp-agent     # a deployed stack, signed with your AWS credentials
    make console                       # the local stack's own console: sign in as a seeded
                                       # operator (OperatorConsole=true, no AWS account)
    python -m console.server --url http://127.0.0.1:PORT   # any admin API (make chat prints it)

The page (memagent/operator/console.html, the one the stack serves with OperatorConsole=true,
here in its "proxy" door) talks only to this
server, which forwards `/api/<route>` to the admin API and signs each request with SigV4 on the
server side (botocore, your usual credentials), so no secret ever reaches the browser.

Who can drive it (docs/security.md, "The operator console"): it listens on 127.0.0.1 only, and
forwards a request only if its `Host` is the server's own (127.0.0.1 or localhost at its port:
a page whose host name was rebound to 127.0.0.1 still sends its own name), its `Origin`, when
sent, is the server's own, and it carries this run's token, which only the page this server
serves knows (a random value made at start, written into that page, sent back in a header:
another site can neither read the page nor guess it). Other users of the same machine are not
kept out: they can reach 127.0.0.1 and read the process's memory or the page.
"""

from __future__ import annotations

import argparse
import hmac
import json
import secrets
import signal
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from memagent.operator.console import page

HEADER = "X-Operator-Console"  # this run's token: a cross-site form or fetch cannot send it
FORWARDED = ("content-type", "idempotency-key")


class AdminApi:
    """Where requests go: the admin API's base URL, signed with SigV4 unless it is local."""

    def __init__(self, base_url: str, *, region: str | None = None, sign: bool | None = None):
        if not base_url.startswith(("https://", "http://")):
            raise ValueError(f"the admin API's URL must be http(s): {base_url!r}")
        self.base_url = base_url.rstrip("/")
        host = urlsplit(self.base_url).hostname or ""
        self.sign = sign if sign is not None else host not in ("127.0.0.1", "localhost")
        self.region = region or (host.split(".")[2] if host.count(".") >= 4 else None)

    def call(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple:
        url = self.base_url + path
        if self.sign:
            headers = self._signed(method, url, body, headers)
        request = urllib.request.Request(  # noqa: S310 (http(s) only: checked in __init__)
            url, data=body or None, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=35) as response:  # noqa: S310
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except OSError as error:
            reason = f"the admin API is unreachable: {type(error).__name__}"
            return 502, json.dumps({"error": reason}).encode()

    def _signed(self, method: str, url: str, body: bytes, headers: dict[str, str]) -> dict:
        import boto3
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        session = boto3.Session()
        credentials = session.get_credentials()
        if credentials is None:
            raise RuntimeError("no AWS credentials: configure them as for the AWS CLI")
        request = AWSRequest(method=method, url=url, data=body, headers=headers)
        region = self.region or session.region_name or "us-east-1"
        SigV4Auth(credentials.get_frozen_credentials(), "execute-api", region).add_auth(request)
        return dict(request.headers.items())


def handler_for(api: AdminApi, port: int, token: str) -> type[BaseHTTPRequestHandler]:
    """The console's request handler: the page (with `token` in it) and the forwarding."""
    names = ("127.0.0.1", "localhost")
    hosts = {f"{name}:{port}" for name in names} | (set(names) if port == 80 else set())
    origins = {f"http://{host}" for host in hosts}

    class Handler(BaseHTTPRequestHandler):
        server_version = "operator-console"

        def log_message(self, format: str, *args: Any) -> None:  # paths hold phone numbers
            pass

        def _reply(
            self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None
        ) -> None:
            self.send_response(status)
            headers = {
                "Content-Type": content_type,
                "Cache-Control": "no-store",
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'",
                **(extra or {}),
            }
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _ours(self) -> bool:
            """Sent to this server by its own name (not a host name rebound to 127.0.0.1)."""
            if self.headers.get("Host", "").lower() in hosts:
                return True
            self._reply(403, b'{"error": "not this server\'s name"}', "application/json")
            return False

        def _forward(self) -> None:
            if not self._ours():
                return
            origin = self.headers.get("Origin")
            sent = self.headers.get(HEADER, "").encode()
            if not hmac.compare_digest(sent, token.encode()) or (origin and origin not in origins):
                self._reply(403, b'{"error": "not from the console"}', "application/json")
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k: v for k, v in self.headers.items() if k.lower() in FORWARDED}
            status, answer = api.call(self.command, self.path.removeprefix("/api"), body, headers)
            self._reply(status, answer, "application/json")

        def do_GET(self) -> None:
            if self.path.startswith("/api/"):
                self._forward()
            elif not self._ours():  # a rebound page must not read the token either
                return
            elif self.path in ("/", "/index.html"):
                html, headers = page({"door": "proxy", "token": token})
                self._reply(200, html.encode(), headers["Content-Type"], headers)
            else:
                self._reply(404, b"not found", "text/plain")

        do_POST = do_PUT = do_DELETE = _forward

    return Handler


class Console:
    """The console's HTTP server, on 127.0.0.1 (port 0: any free one)."""

    def __init__(self, api: AdminApi, port: int = 0):
        # the server binds first: the handler needs its port (port 0 picks a free one)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), BaseHTTPRequestHandler)
        bound = self.httpd.server_address[1]
        self.httpd.RequestHandlerClass = handler_for(api, bound, secrets.token_urlsafe(32))
        self.url = f"http://127.0.0.1:{bound}/"
        self._thread: threading.Thread | None = None

    def start(self) -> Console:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> Console:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stack_admin_url(stack: str) -> str:
    import boto3

    description = boto3.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
    outputs = {o["OutputKey"]: o["OutputValue"] for o in description.get("Outputs", [])}
    return outputs["AdminApiUrl"]


def local_stack() -> Any:
    """The local stack with its console (OperatorConsole=true: a user pool in moto, the managed
    login's stand-in), and one person who asked for a human (and a fact to correct)."""
    from devstack.stack import DevStack

    stack = DevStack(
        level="quiet", parameters={"OperatorConsole": "true", "FollowUps": "true"}
    ).start()
    phone = "+447700900123"
    for text in ("Hi, I'm Maya. I have a dog called Biscuit", "can I talk to a human?"):
        stack.send_message(phone, text)
        stack.wait_idle()
    return stack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--stack", help="a deployed CloudFormation stack (its AdminApiUrl)")
    source.add_argument("--url", help="the admin API's base URL")
    parser.add_argument("--region", help="the stack's region (default: your AWS config's)")
    parser.add_argument("--port", type=int, default=8089, help="with --stack or --url")
    args = parser.parse_args(argv)
    stack = console = None
    if args.stack or args.url:
        url = stack_admin_url(args.stack) if args.stack else args.url
        console = Console(AdminApi(url, region=args.region), args.port).start()
        print(f"operator console: {console.url}  (Ctrl-C to stop)")
    else:
        from devstack.cognito import LOCAL_OPERATORS, LOCAL_PASSWORD

        stack = local_stack()
        print("local stack: +447700900123 asked for a human (make chat talks to its own stack)")
        print(f"operator console: {stack.console_api.url}/  (Ctrl-C to stop)")
        for username, groups in LOCAL_OPERATORS.items():
            print(f"  sign in as {username} ({', '.join(groups)}), password {LOCAL_PASSWORD}")
    # a SIGTERM stops it like Ctrl-C: the local stack's processes are stopped too
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        if console is not None:
            console.stop()
        if stack is not None:
            stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
