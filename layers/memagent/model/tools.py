"""Tools the operator declares for the model: where each runs, and one call of one of them.

The operator declares tools in one JSON file shipped with the consumer (TOOLS_FILE, relative to
the function's code: functions/consumer/), read and checked at cold start; a bad entry stops the
cold start naming it (docs/tools.md is the operator's page):

    {"tools": [
      {"name": "list_free_slots", "description": "Free appointment slots on a day",
       "parameters": {"type": "object", "properties": {"day": {"type": "string"}},
                      "required": ["day"]},
       "lambda": "${BOOKING_TOOL_ARN}"},
      {"name": "order_status", "description": "Where an order is",
       "parameters": {...}, "caller": "phone",
       "https": {"url": "https://api.example.com/tools/order-status",
                 "auth_header": "Authorization", "auth_parameter": "/agent/orders-token",
                 "timeout_seconds": 5}}
    ]}

`lambda` is a function ARN (or `${NAME}`, read from the environment: the template passes the
ARN of a function of the same stack); it is invoked synchronously, and the consumer's role may
invoke exactly the functions the template lists (ToolFunctionArns, the example's). `https`
posts to an allow-listed origin (TOOL_HOSTS; https only, loopback excepted for the local stack),
with an auth header read from SSM (cached like every secret), no redirects, a timeout.

Both get the same JSON: {"tool": name, "arguments": {...}, "idempotency_key": key, "caller":
{...}}, the key derived from the inbound event and the call's position in the turn
(memagent/turn/tool_loop.py), so a tool can make its own effect idempotent; HTTPS tools also get it
as the Idempotency-Key header. `caller` is who asks, as the provider's signed webhook said, never
as the model wrote: what the declaration's "caller" asks for ("phone", "bsuid", "key": an opaque
key of the person for this tool alone; several as a list; "none", the default: no `caller` at
all). A tool authorises by it, never by its arguments (docs/tools.md).
Both answer {"output": <any JSON>, "summary": "<a short line for memory>"} or, for a failure
the model should hear about, {"error": "..."}. Arguments are checked against the declared
schema before any call; invalid ones (bad JSON, nested deeper than MAX_ARGUMENT_DEPTH, outside
the schema) go back to the model as an error, never to the tool. A tool's summary is screened
like a fact before memory keeps it (memagent.memory.facts): an order in it is dropped, never stored.

A Lambda tool is invoked once per call: the SDK does not retry it (botocore's standard mode
would retry a read timeout while the first invocation still runs, and Invoke has no idempotency
token). A call that fails in a way a retry may fix (Lambda throttled or its function crashed or
timed out; HTTP 408, 429, 5xx, a timeout) raises TransientError: the record retries on our
backoff with the same key, and the calls already made are replayed from the ledger, not
repeated. An HTTPS tool's answer is read up to MAX_BODY_BYTES.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memagent.errors import ConfigurationError, TransientError
from memagent.observability import logger
from memagent.providers import parse_origins, url_origin

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

    from memagent.memory import Choices
    from memagent.providers import Origin

NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # the Responses API's rule for function names
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
MAX_TIMEOUT_SECONDS = 30.0
CONNECT_SECONDS = 3.0
SUMMARY_CHARS = 160
MAX_ARGUMENT_DEPTH = 32  # nesting of the model's arguments; deeper is refused like bad JSON
MAX_BODY_BYTES = 1024 * 1024  # an HTTPS tool's answer (a Lambda's is at most 6 MB by AWS)
CALLERS = ("phone", "bsuid", "key")  # what a declaration's "caller" may ask for


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    lambda_arn: str | None = None
    url: str | None = None
    auth_header: str | None = None
    auth: Any = field(default=None, repr=False)  # a settings.Secret: .get() -> the header value
    timeout_seconds: float = 10.0
    caller: tuple[str, ...] = ()  # who asks, as the tool needs it (CALLERS); () none
    check: Callable[[Any], Any] = field(default=lambda data: data, repr=False, compare=False)

    def spec(self) -> dict[str, Any]:
        """The tool as the Responses API declares a function."""
        return {
            "type": "function",
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "strict": False,
        }


@dataclass(frozen=True)
class Caller:
    """Who asks, as the provider's signed webhook said: the person's identifiers and the key of
    their memory. The model never writes any of it."""

    person: str  # the partition key of the person's memory (memagent.memory.person)
    phone: str | None = None
    bsuid: str | None = None
    # the stack's keyed digest (memagent.memory.digest), handed in by the turn: the model wing
    # stays below memory's person keys, which read the stack's secret through the settings
    keyed: Callable[[str], str] | None = None

    @classmethod
    def of(
        cls, person: str, identifiers: Iterable[str], keyed: Callable[[str], str] | None = None
    ) -> Caller:
        """From a message's identifiers (its chat and aliases): a phone is E.164, "+..."."""
        ids = [i for i in identifiers if i]
        phone = next((i for i in ids if i.startswith("+")), None)
        bsuid = next((i for i in ids if not i.startswith("+")), None)
        return cls(person, phone, bsuid, keyed)

    def for_tool(self, tool: Tool) -> dict[str, str | None]:
        """What `tool` declared it needs: an identifier it may not have is null."""
        given: dict[str, str | None] = {}
        for part in tool.caller:
            if part == "key":  # the same person, another key per tool: no tool links them
                name = f"tool{chr(0x1F)}{tool.name}{chr(0x1F)}{self.person}"
                given["key"] = self.keyed(name)[:40] if self.keyed else None
            else:
                given[part] = getattr(self, part)
        return given


@dataclass(frozen=True)
class ToolResult:
    """What a call gave: `output` for the model (cut to size), `summary` for memory."""

    output: str
    summary: str
    failed: bool = False


def load_tools(
    path: str | Path,
    *,
    hosts: frozenset[Origin] = frozenset(),
    environ: Mapping[str, str] | None = None,
    secret: Callable[[str, str], Any] | None = None,
) -> tuple[Tool, ...]:
    """The declared tools, checked; ConfigurationError names the file and the bad entry."""
    import fastjsonschema  # Powertools' validation extra: a small, pure-Python JSON Schema

    environ = os.environ if environ is None else environ
    try:
        declared = json.loads(Path(path).read_text(encoding="utf-8"))["tools"]
        assert isinstance(declared, list)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as error:
        raise ConfigurationError(
            f"TOOLS_FILE {path}: not a JSON object with a list 'tools' ({error})"
        ) from None
    tools, names = [], set()
    for index, entry in enumerate(declared):
        where = f"TOOLS_FILE {path}: tool #{index + 1}"
        try:
            tool = _tool(entry, hosts=hosts, environ=environ, secret=secret)
            tool = _with_check(tool, fastjsonschema.compile(tool.parameters))
        except (ValueError, KeyError, TypeError, fastjsonschema.JsonSchemaDefinitionException) as e:
            name = entry.get("name") if isinstance(entry, dict) else None
            raise ConfigurationError(f"{where} ({name or 'unnamed'}): {e}") from None
        if tool.name in names:
            raise ConfigurationError(f"{where}: the name {tool.name!r} is declared twice")
        names.add(tool.name)
        tools.append(tool)
    return tuple(tools)


def _with_check(tool: Tool, check: Callable[[Any], Any]) -> Tool:
    from dataclasses import replace

    return replace(tool, check=check)


def _tool(
    entry: Any,
    *,
    hosts: frozenset[Origin],
    environ: Mapping[str, str],
    secret: Callable[[str, str], Any] | None,
) -> Tool:
    if not isinstance(entry, dict):
        raise TypeError("each tool is a JSON object")
    name, description = entry["name"], entry.get("description", "")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError("'name' must be 1 to 64 letters, digits, '_' or '-'")
    if not isinstance(description, str) or not description.strip():
        raise ValueError("'description' must say what the tool does (the model reads it)")
    parameters = entry.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type") != "object":
        raise ValueError("'parameters' must be a JSON schema of type 'object'")
    if ("lambda" in entry) == ("https" in entry):
        raise ValueError("say where it runs: exactly one of 'lambda' or 'https'")
    caller = _caller(entry.get("caller", "none"))
    if "lambda" in entry:
        arn = _from_environment(str(entry["lambda"]), environ)
        if not arn.startswith("arn:") or ":function:" not in arn:
            raise ValueError(f"'lambda' must be a function ARN, not {arn!r}")
        return Tool(name, description.strip(), parameters, lambda_arn=arn, caller=caller)
    https = entry["https"]
    url = str(https["url"])
    origin = url_origin(url)
    if origin is None or (origin[0] != "https" and origin[1] not in LOOPBACK):
        raise ValueError(f"'https.url' must be an https URL, not {url!r}")
    if origin not in hosts:
        raise ValueError(f"{origin[0]}://{origin[1]}:{origin[2]} is not in TOOL_HOSTS")
    timeout = float(https.get("timeout_seconds", 10))
    if not 0 < timeout <= MAX_TIMEOUT_SECONDS:
        raise ValueError(
            f"'https.timeout_seconds' must be over 0 and at most {MAX_TIMEOUT_SECONDS}"
        )
    header, parameter = https.get("auth_header"), https.get("auth_parameter")
    if bool(header) != bool(parameter):
        raise ValueError("'auth_header' and 'auth_parameter' go together")
    auth = None
    if parameter:
        if secret is None:
            raise ValueError("an auth header needs a secret reader")
        auth = secret(f"tool {name}", str(parameter))
    return Tool(
        name,
        description.strip(),
        parameters,
        url=url.strip(),
        auth_header=header,
        auth=auth,
        timeout_seconds=timeout,
        caller=caller,
    )


def _caller(value: Any) -> tuple[str, ...]:
    """A declaration's "caller": "none", one of CALLERS, or a list of them."""
    asked = [value] if isinstance(value, str) else value
    if not isinstance(asked, list) or not all(isinstance(a, str) for a in asked):
        raise ValueError(f"'caller' must be 'none' or some of {', '.join(CALLERS)}")
    asked = [a for a in asked if a != "none"]
    if unknown := [a for a in asked if a not in CALLERS]:
        raise ValueError(f"'caller' {unknown[0]!r} is not one of none, {', '.join(CALLERS)}")
    return tuple(dict.fromkeys(asked))


def _from_environment(value: str, environ: Mapping[str, str]) -> str:
    """`${NAME}` -> the environment's NAME (a function of this stack, passed by the template)."""
    match = re.fullmatch(r"\$\{([A-Z0-9_]+)\}", value.strip())
    if match is None:
        return value.strip()
    found = environ.get(match.group(1), "")
    if not found:
        raise ValueError(f"{value} is not set in the environment")
    return found


def _built_in(name: str, description: str, *required: str, **fields: str) -> Tool:
    """A built-in tool of ours: string arguments, each described; `required` among them."""
    properties = {field: {"type": "string", "description": why} for field, why in fields.items()}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return Tool(
        name=name, description=description, parameters={**schema, "additionalProperties": False}
    )


# Built in: the person asks for a human in their own words, and the model asks for one for them;
# the chat is handed over as when they write an explicit request (memagent/turn/reply.py
# hand_to_human). Offered on every turn unless HANDOFF_TOOL=false: the phrases of
# memagent/turn/keywords.py are a fast path for the explicit requests only.
HANDOFF_TOOL = _built_in(
    "request_human",
    "Hand this chat to a person from the team when the person asks to deal with a human, in "
    'any words or language ("can someone from the clinic call me?", "I\'d rather sort this '
    'out with your staff"), or clearly needs something only the team can do. Not for praise of '
    'the service, nor for a question about who or what you are ("is the dentist a real '
    'person?", "are you a bot?"): answer those yourself. The person is told a human will '
    "answer, and you will not answer them again until the team hands the chat back.",
    reason="why, in a few words",
)

# Built in: follow-ups at a time the person asks for, and their cancelling
# (memagent/turn/follow_ups.py). Offered where the stack has a schedule group.
FOLLOW_UP_TOOL = _built_in(
    "schedule_follow_up",
    "Write to the person later, at a time they ask for: a reminder ('remind me tomorrow at "
    "9 to call the dentist') or a check-in they accept ('ask me on Friday how it went'). "
    "At that time you will see the conversation as it is then, and write the message.",
    "when",
    "about",
    when="the local date and time on the person's clock, YYYY-MM-DDTHH:MM",
    about="what to remind or ask, in a few words",
)
CANCEL_FOLLOW_UP_TOOL = _built_in(
    "cancel_follow_up",
    "Cancel a pending follow-up when the person asks ('cancel the reminder') or it became "
    "moot. The pending ones and their ids are listed in your notes.",
    "id",
    id="the follow-up's id",
)
FOLLOW_UP_TOOLS = (FOLLOW_UP_TOOL.name, CANCEL_FOLLOW_UP_TOOL.name)

# Built in: options the person taps instead of typing (issue 42): the call is the reply, its
# `text` and `choices` sent as Meta's reply buttons or list, or numbered lines where interactive
# messages cannot go (whasp, a template outside the window). Offered unless CHOICES_TOOL=false.
MAX_CHOICES = 10  # Meta's list: 10 rows
MAX_CHOICE_CHARS = 72  # a row's description, where a row title (24) cut short shows it whole
MAX_CHOICES_TEXT = 1024  # an interactive message's body
MAX_BUTTON_LABEL = 20
CHOICES_TOOL = Tool(
    name="offer_choices",
    description="Reply with a short message and a few options the person can tap instead of "
    "typing (free slots to pick, yes or no, a rating): up to 3 short options show as buttons, "
    "up to 10 as a list. This call is your reply for this turn: put everything you want to "
    "say in `text`. Their choice comes back as their next message.",
    parameters={
        "type": "object",
        "properties": {
            "text": {"type": "string", "description": "the message above the options"},
            "choices": {
                "type": "array",
                "items": {"type": "string", "description": "one option, a few words"},
                "description": f"1 to {MAX_CHOICES} options, each at most "
                f"{MAX_CHOICE_CHARS} characters (20 show whole on a button, 24 in a list)",
            },
            "button": {
                "type": "string",
                "description": "the label of the button that opens a list, in the person's "
                f"language, at most {MAX_BUTTON_LABEL} characters",
            },
        },
        "required": ["text", "choices"],
        "additionalProperties": False,
    },
)


def offered_choices(arguments: str) -> tuple[str, Choices]:
    """The reply an offer_choices call makes: its text with the options as numbered lines (what
    memory keeps and a text rendering sends) and the options. ValueError says what is wrong,
    for the model to try again."""
    from memagent.memory import Choices

    try:
        given = json.loads(arguments or "{}")
    except (ValueError, RecursionError):
        raise ValueError("the arguments are not a JSON object") from None
    text = given.get("text") if isinstance(given, dict) else None
    options = given.get("choices") if isinstance(given, dict) else None
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_CHOICES_TEXT:
        raise ValueError(f"text: 1 to {MAX_CHOICES_TEXT} characters")
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise ValueError("choices: a list of strings")
    kept = list(dict.fromkeys(" ".join(o.split()) for o in options if o.strip()))
    if not 1 <= len(kept) <= MAX_CHOICES or any(len(o) > MAX_CHOICE_CHARS for o in kept):
        raise ValueError(
            f"choices: 1 to {MAX_CHOICES} different options, "
            f"each at most {MAX_CHOICE_CHARS} characters"
        )
    button = given.get("button")
    label = " ".join(button.split())[:MAX_BUTTON_LABEL] if isinstance(button, str) else ""
    choices = Choices(tuple(kept), label)
    return choices.numbered(text.strip()), choices


class ToolBox:
    """The declared tools and the clients that call them."""

    def __init__(
        self,
        tools: tuple[Tool, ...],
        *,
        max_output_chars: int = 4000,
        lambda_client: Any = None,
        lambda_timeout_seconds: float = MAX_TIMEOUT_SECONDS,
        handoff: bool = False,
        follow_ups: bool = False,
        choices: bool = False,
    ):
        self.tools = {tool.name: tool for tool in tools}
        self.builtins = {HANDOFF_TOOL.name: HANDOFF_TOOL} if handoff else {}
        if choices:
            self.builtins[CHOICES_TOOL.name] = CHOICES_TOOL
        if follow_ups:
            self.builtins[FOLLOW_UP_TOOL.name] = FOLLOW_UP_TOOL
            self.builtins[CANCEL_FOLLOW_UP_TOOL.name] = CANCEL_FOLLOW_UP_TOOL
        self.max_output_chars = max_output_chars
        self.lambda_timeout_seconds = lambda_timeout_seconds
        self._lambda = lambda_client
        if lambda_client is None and any(t.lambda_arn for t in tools):
            import boto3  # at cold start: the consumer's init, not the first tool call
            from botocore.config import Config

            # One attempt in all (total_max_attempts: max_attempts counts retries only, so the
            # max_attempts=2 this replaces made 3): botocore's standard mode retries a read
            # timeout (HTTPClientError is among its transient errors: botocore/retries/
            # standard.py; boto3's "Retries" guide), which would invoke a slow tool again while
            # it still runs, and Invoke has no idempotency token. A throttle, a 5xx or a timeout
            # is the record's retry, on our backoff, with the same idempotency key.
            self._lambda = boto3.client(
                "lambda",
                config=Config(
                    connect_timeout=CONNECT_SECONDS,
                    read_timeout=lambda_timeout_seconds,
                    retries={"mode": "standard", "total_max_attempts": 1},
                ),
            )
        self._http: Any = None

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in (*self.tools.values(), *self.builtins.values())]

    def answers(self) -> bool:
        """Whether a tool offered answers with a result the model reads: any but request_human
        and offer_choices (whose calls end the model's part in the turn)."""
        ending = (HANDOFF_TOOL.name, CHOICES_TOOL.name)
        return bool(self.tools) or any(name not in ending for name in self.builtins)

    def offers_choices(self, name: str) -> bool:
        """Whether a call is the built-in offer_choices (the reply itself, not a call out)."""
        return name == CHOICES_TOOL.name and name in self.builtins

    def hands_off(self, name: str) -> bool:
        """Whether a call is the built-in handoff (the turn's step, not a call out)."""
        return name == HANDOFF_TOOL.name and name in self.builtins

    def schedules(self, name: str) -> bool:
        """Whether a call is a built-in follow-up tool (memagent/turn/follow_ups.py)."""
        return name in FOLLOW_UP_TOOLS and name in self.builtins

    def seconds(self, name: str) -> float:
        """The longest one call of `name` can take before it answers or fails."""
        tool = self.tools.get(name)
        if tool is None:
            return 0.0
        timeout = self.lambda_timeout_seconds if tool.lambda_arn else tool.timeout_seconds
        return CONNECT_SECONDS + timeout

    def call(self, name: str, arguments: str, key: str, caller: Caller | None = None) -> ToolResult:
        """Call one tool with the model's arguments (a JSON string) under `key`, for `caller`."""
        tool = self.tools.get(name)
        if tool is None:
            return self._refused(f"there is no tool called {name!r}")
        try:
            parsed = json.loads(arguments or "{}")
            if _depth(parsed) > MAX_ARGUMENT_DEPTH:
                raise ValueError(f"nested deeper than {MAX_ARGUMENT_DEPTH} levels")
            tool.check(parsed)
        except (ValueError, RecursionError) as error:
            # bad JSON, too deep (the decoder's own limit is RecursionError), or
            # JsonSchemaValueException (a ValueError)
            logger.info("tool arguments refused", extra={"tool": name})
            why = "nested too deeply" if isinstance(error, RecursionError) else error
            return self._refused(f"invalid arguments: {getattr(why, 'message', why)}")
        payload: dict[str, Any] = {"tool": name, "arguments": parsed, "idempotency_key": key}
        if tool.caller:  # after the arguments: nothing the model wrote reaches it
            payload["caller"] = (caller or Caller("")).for_tool(tool)
        answer = self._lambda_call(tool, payload) if tool.lambda_arn else self._https(tool, payload)
        return self._result(name, answer)

    def _refused(self, why: str) -> ToolResult:
        return ToolResult(
            output=json.dumps({"error": why}), summary=why[:SUMMARY_CHARS], failed=True
        )

    def _result(self, name: str, answer: Any) -> ToolResult:
        if not isinstance(answer, dict) or ("output" not in answer and "error" not in answer):
            answer = {"output": answer}
        failed = "error" in answer
        body = {"error": str(answer["error"])} if failed else {"output": answer["output"]}
        output = json.dumps(body, ensure_ascii=False, default=str)
        if len(output) > self.max_output_chars:
            logger.info("tool output cut", extra={"tool": name, "chars": len(output)})
            output = output[: self.max_output_chars] + " [cut: the output was longer]"
        summary = answer.get("summary") or (f"failed: {answer['error']}" if failed else output)
        return ToolResult(output=output, summary=_screened(name, str(summary)), failed=failed)

    def _lambda_call(self, tool: Tool, payload: dict[str, Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            response = self._lambda.invoke(
                FunctionName=tool.lambda_arn,
                InvocationType="RequestResponse",
                Payload=json.dumps(payload).encode(),
            )
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if status >= 500 or status == 429 or "Throttl" in code or "TooMany" in code:
                raise TransientError(f"tool {tool.name}: Lambda {code or status}") from None
            return {"error": f"the tool could not be invoked ({code or status})"}
        except BotoCoreError as error:  # connection errors, timeouts
            raise TransientError(f"tool {tool.name}: {type(error).__name__}") from None
        body = response["Payload"].read()
        if response.get("FunctionError"):
            # a crash or a timeout of the tool's function: a retry may fix it, and the key
            # makes a repeat safe for a tool that made its effect idempotent
            raise TransientError(f"tool {tool.name}: its function failed")
        try:
            return json.loads(body or b"null")
        except ValueError:
            return {"error": "the tool answered something that is not JSON"}

    def _https(self, tool: Tool, payload: dict[str, Any]) -> Any:
        import urllib3

        if self._http is None:
            self._http = urllib3.PoolManager(retries=False)
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": payload["idempotency_key"],
        }
        if tool.auth is not None and tool.auth_header:
            headers[tool.auth_header] = tool.auth.get()
        try:
            response = self._http.request(
                "POST",
                tool.url,
                body=json.dumps(payload).encode(),
                headers=headers,
                timeout=urllib3.Timeout(
                    connect=min(CONNECT_SECONDS, tool.timeout_seconds), read=tool.timeout_seconds
                ),
                redirect=False,
                preload_content=False,  # read up to MAX_BODY_BYTES, never the whole of it
            )
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(f"tool {tool.name}: {type(error).__name__}") from None
        try:
            body = _read_capped(response)
        except urllib3.exceptions.HTTPError as error:
            raise TransientError(f"tool {tool.name}: {type(error).__name__}") from None
        if response.status in (408, 429) or response.status >= 500:
            raise TransientError(f"tool {tool.name}: HTTP {response.status}")
        if body is None:
            logger.info("tool answer over the size cap", extra={"tool": tool.name})
            return {"error": f"the tool answered more than {MAX_BODY_BYTES} bytes"}
        try:
            answer = json.loads(body or b"null")
        except ValueError:
            answer = None
        if response.status >= 300:
            said = answer.get("error") if isinstance(answer, dict) else None
            return {"error": str(said or f"HTTP {response.status}")}
        return (
            answer
            if answer is not None
            else {"error": "the tool answered something that is not JSON"}
        )


def _read_capped(response: Any) -> bytes | None:
    """The body, or None past MAX_BODY_BYTES: then the rest is never read, the connection is
    closed instead of returned to the pool."""
    try:
        declared = int(response.headers.get("Content-Length") or 0)
    except ValueError:
        declared = 0  # not a length: read, and count, what comes
    body = b"" if declared > MAX_BODY_BYTES else response.read(MAX_BODY_BYTES + 1)
    if declared > MAX_BODY_BYTES or len(body) > MAX_BODY_BYTES:
        response.close()
        return None
    response.release_conn()
    return body


def _depth(value: Any) -> int:
    """How deeply `value` nests lists and objects (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_ARGUMENT_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def _screened(name: str, summary: str) -> str:
    """A tool's summary as memory keeps it: screened like a fact (memagent.memory.facts), a sentence
    that reads as an order dropped, since the next turns read it back."""
    from memagent.memory import looks_like_instruction, plain, screen_summary

    if not looks_like_instruction(summary):
        return plain(summary)[:SUMMARY_CHARS]
    logger.warning("tool summary screened", extra={"tool": name})
    kept = screen_summary(summary)
    return (kept or "(its summary read as an instruction; not kept)")[:SUMMARY_CHARS]


def tool_hosts(value: str | None) -> frozenset[Origin]:
    """TOOL_HOSTS: the origins HTTPS tools may call (space- or comma-separated)."""
    return parse_origins(value)
