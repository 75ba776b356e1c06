"""AWS Lambda's Invoke API for the local stack and the tests (moto runs functions in Docker,
which this machine has not): POST /2015-03-31/functions/{name}/invocations runs a Python
handler of ours in-process, as a synchronous (RequestResponse) invocation. A handler that
raises answers as Lambda does: 200 with X-Amz-Function-Error: Unhandled and the error's shape.
Point boto3 at it with AWS_ENDPOINT_URL_LAMBDA.

A function can be slow (`slow`): it runs that long on Lambda's clock here, `time_scale` times
faster than real time, and keeps running when the caller stops waiting, as Lambda does: a client
whose read timeout passes first gets no answer, and a client that retries (botocore's standard
mode retries a read timeout) starts a second invocation while the first still runs. Lambda's
Invoke has no idempotency token. A `clock` (devstack.clock.ScaledClock), when given, is moved on
by each slow invocation's time: a LambdaContext reading it sees the caller's time pass too."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

from devstack import RecordingServer, Reply, Request

Handler = Callable[[Any, Any], Any]
INVOKE = re.compile(r"^/2015-03-31/functions/(?P<name>[^/]+)/invocations$")


class FakeLambda(RecordingServer):
    def __init__(
        self,
        functions: dict[str, Handler] | None = None,
        *,
        time_scale: float = 1.0,
        clock: Any = None,
    ) -> None:
        super().__init__()
        self.functions = dict(functions or {})  # function name or ARN -> handler(event, context)
        self._lost: list[str | None] = []  # tools whose next answers are lost, in order
        self._slow: list[tuple[str | None, float]] = []  # (tool, seconds) for the next invocations
        self.time_scale = time_scale  # Lambda seconds per real second, for slow functions
        self.clock = clock
        self._running = 0
        self._settled = threading.Condition(self._lock)
        self._released = threading.Event()

    def lose_answers(self, tool: str, n: int = 1) -> None:
        """The next `n` invocations for `tool` run, then answer 502 (as if the caller died just
        after the function acted): the side effect happened, the caller never learns it."""
        with self._lock:
            self._lost.extend([tool] * n)

    def slow(self, tool: str, seconds: float, n: int = 1) -> None:
        """The next `n` invocations for `tool` take `seconds` of Lambda time before the
        function runs (its effect and its answer come at the end, as a slow function's do)."""
        with self._lock:
            self._slow.extend([(tool, seconds)] * n)

    def reset(self) -> None:
        """Forget the invocations and every slow or lost answer still to come; real time."""
        with self._lock:
            self.requests.clear()
            self._slow.clear()
            self._lost.clear()
            self.time_scale, self.clock = 1.0, None

    def settle(self) -> None:
        """Let every slow invocation finish now, and wait until none runs."""
        self._released.set()
        with self._settled:
            self._settled.wait_for(lambda: self._running == 0, timeout=10)
        self._released.clear()

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
        payload = record["json"]
        tool = payload.get("tool") if isinstance(payload, dict) else None
        with self._lock:
            self._running += 1
            seconds = next((s for t, s in self._slow if t == tool), 0.0)
            if seconds:
                self._slow.remove((tool, seconds))
        try:
            if seconds:
                self._take(seconds)
            return self._run(handler, payload, tool)
        finally:
            with self._settled:
                self._running -= 1
                self._settled.notify_all()

    def _take(self, seconds: float) -> None:
        """`seconds` of Lambda time pass: on the shared clock, and scaled, in real time (an
        event's wait, which `settle` or stopping the server cuts short)."""
        if self.clock is not None:
            self.clock.advance(seconds)
        self._released.wait(seconds / self.time_scale)

    def _run(self, handler: Handler, payload: Any, tool: str | None) -> Reply:
        try:
            result = handler(payload, None)
        except Exception as error:  # the function's own failure, not the API's
            body = {"errorMessage": str(error), "errorType": type(error).__name__}
            return Reply.json(200, body, {"X-Amz-Function-Error": "Unhandled"})
        with self._lock:
            lost = tool in self._lost
            if lost:
                self._lost.remove(tool)
        if lost:
            return Reply.json(502, {"message": "the answer was lost"})
        return Reply(200, json.dumps(result).encode(), {"X-Amz-Executed-Version": "$LATEST"})

    def stop(self) -> None:
        self._released.set()  # no slow invocation outlives the server
        super().stop()
