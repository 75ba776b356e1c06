"""AWS Lambda's Invoke API for the local stack and the tests (moto runs functions in Docker,
which this machine has not): POST /2015-03-31/functions/{name}/invocations runs a Python
handler of ours in-process, as a synchronous (RequestResponse) invocation. A handler that
raises answers as Lambda does: 200 with X-Amz-Function-Error: Unhandled and the error's shape.
Point boto3 at it with AWS_ENDPOINT_URL_LAMBDA."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from devstack import RecordingServer, Reply, Request

Handler = Callable[[Any, Any], Any]
INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")


class FakeLambda(RecordingServer):
    def __init__(self, functions: dict[str, Handler] | None = None) -> None:
        super().__init__()
        self.functions = dict(functions or {})  # function name or ARN -> handler(event, context)
        self._lost: list[str] = []  # tools whose next answers are lost, in order

    def lose_answers(self, tool: str, n: int = 1) -> None:
        """The next `n` invocations for `tool` run, then answer 502 (as if the caller died just
        after the function acted): the side effect happened, the caller never learns it."""
        with self._lock:
            self._lost.extend([tool] * n)

    def invocations(self, name: str | None = None) -> list[Any]:
        """The payloads of the invocations of `name` (any function if None), in order."""
        with self._lock:
            return [r["json"] for r in self.requests if name is None or r.get("function") == name]

    def read(self, request: Request) -> dict[str, Any]:
        match = INVOKE.match(request.path)
        name = match.group("name").replace("%3A", ":") if match else None
        return {"function": name, "json": request.json() if request.body else None}

    def answer(self, request: Request, record: dict[str, Any]) -> Reply:
        handler = self.functions.get(record["function"] or "")
        if request.method != "POST" or handler is None:
            body = {"Type": "User", "message": f"Function not found: {record['function']}"}
            return Reply.json(404, body, {"x-amzn-errortype": "ResourceNotFoundException"})
        try:
            result = handler(record["json"], None)
        except Exception as error:  # the function's own failure, not the API's
            body = {"errorMessage": str(error), "errorType": type(error).__name__}
            return Reply.json(200, body, {"X-Amz-Function-Error": "Unhandled"})
        with self._lock:
            tool = (record["json"] or {}).get("tool") if isinstance(record["json"], dict) else None
            lost = tool in self._lost
            if lost:
                self._lost.remove(tool)
        if lost:
            return Reply.json(502, {"message": "the answer was lost"})
        return Reply(200, json.dumps(result).encode(), {"X-Amz-Executed-Version": "$LATEST"})
