"""Lambda execution environments on this machine: one Python process per environment.

Lambda runs each invocation alone in an execution environment: a process that imported the
function once (the cold start) and then serves one event at a time, with module globals of its
own. Running handlers as threads of one process would share those globals between concurrent
invocations (Powertools' batch processor, logger keys and metric set are module-level), so each
environment here is a child process, started with exactly the environment variables the template
gives the function:

    parent                                         child: python -m devstack.runtime <spec>
    ------                                         -----
    Popen(env=function env, stderr=log file)  ->   import functions/<name>/app.py as `app`
                                              <-   {"ready": true, "init_ms": ...}
    {"event": ..., "request_id": ...}         ->   app.handler(event, context)
                                              <-   {"result": ...} or {"error": {...}}

The function's stdout and stderr (Powertools' JSON logs and EMF metrics, tracebacks) go to the
log file; the protocol runs on a private copy of the original stdout. An invocation that outlives
the function's Timeout kills its environment, as Lambda does, and the next one starts cold.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import IO, Any

from devstack import in_parallel
from devstack.cfn import FunctionSpec
from devstack.lambda_harness import LambdaContext, Outcome, _ms, import_function

READY_TIMEOUT_SECONDS = 60.0
# What a child may inherit from the developer's shell; everything else comes from the template.
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT")


class FunctionInitError(RuntimeError):
    """A function failed its cold start (e.g. a missing setting)."""


def base_environment() -> dict[str, str]:
    """The few variables of the developer's shell a child needs to run Python."""
    env = {name: os.environ[name] for name in _INHERITED if name in os.environ}
    if "VIRTUAL_ENV" in os.environ:
        env["VIRTUAL_ENV"] = os.environ["VIRTUAL_ENV"]
    return env


class Environment:
    """One execution environment (a child process) of one function."""

    def __init__(self, spec: FunctionSpec, function_name: str, env: dict[str, str], log_path: Path):
        self.spec = spec
        self.function_name = function_name
        self._replies: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.used = False
        config = {
            "code": str(spec.code),
            "handler": spec.handler,
            "function_name": function_name,
            "memory": spec.memory,
            "timeout": spec.timeout,
        }
        with open(log_path, "ab") as log:
            # S603: our own interpreter running our own module, no shell involved.
            self._process = subprocess.Popen(  # noqa: S603
                [sys.executable, "-m", "devstack.runtime", json.dumps(config)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
                cwd=spec.code.parent,
                start_new_session=True,  # Ctrl-C in the terminal stops the stack, which stops us
            )
        self._reader = threading.Thread(
            target=self._read, name=f"{function_name}-reader", daemon=True
        )
        self._reader.start()
        self.init_ms: float | None = None

    @property
    def pid(self) -> int:
        return self._process.pid

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            with contextlib.suppress(ValueError):
                self._replies.put(json.loads(line))
        self._replies.put(None)  # the process is gone

    def wait_ready(self, timeout: float = READY_TIMEOUT_SECONDS) -> None:
        try:
            message = self._replies.get(timeout=timeout)
        except queue.Empty:
            self.stop()
            raise FunctionInitError(
                f"{self.function_name} did not start in {timeout:.0f} s"
            ) from None
        if not message or "init_error" in message:
            self.stop()
            detail = (message or {}).get("init_error", "the process exited")
            raise FunctionInitError(f"{self.function_name} failed its cold start: {detail}")
        self.init_ms = float(message.get("init_ms", 0))

    def invoke(self, event: Any) -> Outcome:
        cold, self.used = not self.used, True
        request = {"event": event, "request_id": str(uuid.uuid4())}
        started = time.perf_counter()
        try:
            assert self._process.stdin is not None
            self._process.stdin.write(json.dumps(request, default=str).encode() + b"\n")
            self._process.stdin.flush()
            reply = self._replies.get(timeout=self.spec.timeout)
            ended = None if reply is not None else ("Crashed", "the environment exited")
        except queue.Empty:
            ended = ("Timeout", f"timed out after {self.spec.timeout} s")
        except OSError as broken:  # the environment died between invocations
            ended = ("Crashed", str(broken))
        if ended is not None:  # Lambda ends an environment that timed out or crashed
            self.stop()
            return Outcome(False, None, *ended, _ms(started), cold)
        assert reply is not None  # else it ended
        logs = tuple(reply.get("logs") or ())
        if "error" in reply:
            failure = reply["error"]
            return Outcome(
                False, None, failure.get("type"), failure.get("message"), _ms(started), cold, logs
            )
        return Outcome(True, reply.get("result"), duration_ms=_ms(started), cold=cold, logs=logs)

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self, grace: float = 3.0) -> None:
        process = self._process
        if process.poll() is None:
            with contextlib.suppress(OSError):
                assert process.stdin is not None
                process.stdin.close()  # end of requests: the child's loop returns
            try:
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=grace)
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError, ValueError):
                stream and stream.close()


class FunctionPool:
    """The execution environments of one function: up to `size` invocations at once.

    `warm` environments are started with the stack; more start (cold) when all are busy, up to
    `size`, as Lambda scales a function out. An environment that crashed or timed out is replaced.
    """

    def __init__(
        self,
        spec: FunctionSpec,
        *,
        function_name: str,
        env: dict[str, str],
        log_path: Path,
        size: int,
        warm: int = 1,
    ):
        self.spec = spec
        self.function_name = function_name
        self._env = env
        self._log_path = log_path
        self.size = max(1, size)
        self._warm = min(warm, self.size)
        self._idle: queue.LifoQueue[Environment] = queue.LifoQueue()  # reuse the warmest first
        self._all: list[Environment] = []
        self._lock = threading.Lock()
        self._closed = False
        self.invocations = 0
        self.cold_starts = 0

    def start(self) -> None:
        """Start the warm environments (concurrently) and wait until each finished its init."""
        started = [self._spawn() for _ in range(self._warm)]
        for environment in filter(None, started):
            environment.wait_ready()
            self._idle.put(environment)

    def _spawn(self) -> Environment | None:
        """A new environment, or None when `size` are already running."""
        with self._lock:
            if self._closed:
                raise FunctionInitError(f"{self.function_name} is stopped")
            if sum(e.alive for e in self._all) >= self.size:
                return None
            environment = Environment(self.spec, self.function_name, self._env, self._log_path)
            self._all.append(environment)
            return environment

    def _acquire(self) -> Environment:
        while True:
            try:
                return self._idle.get_nowait()
            except queue.Empty:
                pass
            environment = self._spawn()
            if environment is not None:
                try:
                    environment.wait_ready()
                except FunctionInitError:
                    with self._lock:
                        self._all.remove(environment)
                    raise
                return environment
            try:  # all busy: wait for one (or for a dead one's place)
                return self._idle.get(timeout=0.2)
            except queue.Empty:
                continue

    def invoke(self, event: Any) -> Outcome:
        try:
            environment = self._acquire()
        except FunctionInitError as error:
            return Outcome(False, None, "InitError", str(error))
        try:
            outcome = environment.invoke(event)
        finally:
            with self._lock:
                self.invocations += 1
            if environment.alive and not self._closed:
                self._idle.put(environment)
            else:
                with self._lock:
                    if environment in self._all:
                        self._all.remove(environment)
        if outcome.cold:
            with self._lock:
                self.cold_starts += 1
        return outcome

    def stop(self) -> None:
        with self._lock:
            self._closed = True
            environments, self._all = list(self._all), []
        in_parallel(environment.stop for environment in environments)


# --------------------------------------------------------------------------- the child


def _load(config: dict[str, Any]) -> Any:
    """Import the handler's module as Lambda does: under its own name, its directory on sys.path."""
    code = Path(config["code"])
    sys.path.insert(0, str(code.parent))
    module = import_function(code, module_name=code.stem)
    return getattr(module, config["handler"])


def _send(channel: IO[str], message: dict[str, Any]) -> None:
    channel.write(json.dumps(message, default=str) + "\n")
    channel.flush()


def _exit_with_parent() -> None:
    """Lambda ends environments with its service; ours end with the stack that started them,
    even when it was killed without a chance to stop them."""
    parent = os.getppid()
    while True:
        time.sleep(1)
        if os.getppid() != parent:
            os._exit(1)


class _Tee:
    """A stream that writes to `stream` and keeps each line written (the invocation's log)."""

    def __init__(self, stream: Any, lines: list[str]):
        self.stream, self.lines = stream, lines

    def write(self, text: str) -> int:
        self.lines.extend(line for line in text.splitlines() if line.strip())
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def _lines_logged() -> Any:
    """The lines memagent's logger writes during one invocation, handed back with its result
    (what `sam local invoke` prints, and what names a failing dependency in the stack's progress
    line), as well as written to the log file."""
    lines: list[str] = []
    handler = None
    if "memagent.observability" in sys.modules:  # a tool's function may not use memagent
        handler = sys.modules["memagent.observability"].logger.registered_handler
    previous = handler.setStream(_Tee(handler.stream, lines)) if handler is not None else None
    try:
        yield lines
    finally:
        if handler is not None:
            handler.setStream(previous)


def serve(config: dict[str, Any]) -> int:
    threading.Thread(target=_exit_with_parent, name="watch-parent", daemon=True).start()
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # print() and logs -> the log file
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    from devstack.iam.guard import install_from_environment

    install_from_environment()  # IAM: the role's guard on every AWS call (devstack.iam)
    started = time.perf_counter()
    try:
        handler = _load(config)
    except BaseException as error:
        traceback.print_exc()
        _send(channel, {"init_error": f"{type(error).__name__}: {error}"})
        return 1
    _send(channel, {"ready": True, "init_ms": (time.perf_counter() - started) * 1000})
    for line in sys.stdin:
        request = json.loads(line)
        context = LambdaContext(
            config["function_name"],
            memory=config["memory"],
            timeout=config["timeout"],
            request_id=request["request_id"],
        )
        with _lines_logged() as logged:
            try:
                reply = {"result": handler(request["event"], context)}
            except Exception as error:  # a function error: logged, reported, environment kept
                traceback.print_exc()
                reply = {"error": {"type": type(error).__name__, "message": str(error)[:1000]}}
            sys.stdout.flush()
            sys.stderr.flush()
        _send(channel, {**reply, "logs": logged})
    return 0


if __name__ == "__main__":
    sys.exit(serve(json.loads(sys.argv[1])))
