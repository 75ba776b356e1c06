"""An OpenAI-compatible stand-in that the real `openai` client talks to over HTTP.

    server = FakeOpenAI().start()
    client = OpenAI(base_url=f"{server.url}/v1", api_key="test")

Endpoints:
- ``POST /v1/responses``: the Responses API (non-streaming). The reply text comes from
  `responder(request_json) -> str`; the default is `offline_model`, a deterministic stand-in that
  is labelled as such in every reply and is never presented as real AI.
- ``POST /v1/audio/transcriptions``: multipart upload; the text comes from
  `transcriber(audio_bytes) -> str` (default `offline_transcriber`).
- ``POST /v1/audio/speech``: a text spoken (`response_format: "opus"`: an Ogg/Opus stream,
  devstack.ogg); refused as OpenAI refuses it (CreateSpeechRequest's schema: input over 4,096
  characters, an unknown field or format; an unknown model, 404; a voice not among the
  built-in ones; instructions or sse with tts-1).
- ``POST /openai/v1/responses``: the same, as Amazon Bedrock's bedrock-runtime serves it. It takes
  only a short-term Bedrock API key, unexpired and signed by `bedrock_key_id` (any key if None),
  and only what bedrock-runtime takes (`bedrock_problems`): 401 or 400 otherwise.

As strict as the real API (docs/stand-ins.md): every Responses request is checked against
OpenAI's published schema, closed as the API reads it (devstack.openai_schema: an unknown field
is a 400), and against the stateless (store=false) rules of a reasoning model. By default
(`reasoning=True`) the model reasons before it calls a function, as OpenAI's reasoning models do:
a `reasoning` item (`rs_` id, its `encrypted_content` only when the request's `include` asks for
"reasoning.encrypted_content") comes before the `function_call` items. A request that continues
a turn must send those items back as they came (`request_problems`): a reasoning item needs its
encrypted_content and the very item that followed it; a function call its `fc_` id; a
function_call_output a function_call in the same input. Otherwise: 400, in OpenAI's words.

Every request is recorded in `.requests` (failed ones too); `.calls(path)` gives the JSON bodies
sent to one path. `.fail_next(n, status)` and `.delay_seconds` inject failures and slowness;
`.outage`, a callable returning an HTTP status (or None), fails every request while it says so
(an outage measured on any clock, e.g. devstack.clock.SQS_CLOCK).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import email
import email.policy
import itertools
import json
import math
import re
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from devstack import RecordingServer, Reply, Request
from devstack.ogg import voice_note
from memagent.memory.context import FACTS_HEADING, NEW_NUMBER_LINE, PICKED_HEADING, SUMMARY_HEADING

RESPONSES = "/v1/responses"
BEDROCK_RESPONSES = "/openai/v1/responses"
DATE = "%Y%m%dT%H%M%SZ"  # SigV4's X-Amz-Date
TRANSCRIPTIONS = "/v1/audio/transcriptions"
SPEECH = "/v1/audio/speech"
# CreateSpeechRequest (OpenAI's OpenAPI document): the models its description names, the built-in
# voices it names (a custom voice is {"id": "voice_..."}), each format's Content-Type
SPEECH_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
SPEECH_VOICES = (
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
    "verse", "marin", "cedar",
)  # fmt: skip
SPEECH_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
OFFLINE = "[offline model]"

Responder = Callable[[dict[str, Any]], "str | dict[str, Any]"]
Transcriber = Callable[[bytes], str]

_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", None),
    429: ("requests", "rate_limit_exceeded"),
}


def error_reply(
    status: int,
    message: str,
    headers: dict[str, str] | None = None,
    *,
    param: str | None = None,
    code: str | None = None,
) -> Reply:
    """An error in the shape the OpenAI API uses, which the client turns into APIStatusError."""
    kind, default_code = _ERROR_TYPES.get(status, ("server_error", None))
    body = {
        "error": {"message": message, "type": kind, "param": param, "code": code or default_code}
    }
    return Reply.json(status, body, headers)


class Refused(Exception):
    """A request the API answers 400, with the parameter it names and OpenAI's error code."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message, self.param, self.code = message, param, code

    def reply(self) -> Reply:
        return error_reply(400, self.message, param=self.param, code=self.code)


class FakeOpenAI(RecordingServer):
    """The OpenAI API stand-in. See the module docstring."""

    def __init__(
        self,
        responder: Responder | None = None,
        transcriber: Transcriber | None = None,
        *,
        delay_seconds: float = 0.0,
        retry_after_ms: int | None = 10,
        bedrock_key_id: str | None = None,
        reasoning: bool = True,
    ) -> None:
        super().__init__(delay_seconds=delay_seconds)
        self.reasoning = reasoning  # a reasoning model: a reasoning item before function calls
        # fields this server does not take, answered 400 naming the first (an OpenAI-compatible
        # server that knows fewer fields than OpenAI's API)
        self.unsupported_fields: frozenset[str] = frozenset()
        self._call_ids: dict[str, str] = {}  # call_id -> the fc_ id it came with
        self.responder: Responder = responder or offline_model
        self.transcriber: Transcriber = transcriber or offline_transcriber
        self.outage: Callable[[], int | None] | None = None
        # Injected failures carry `retry-after-ms` so the real client's retries (0.5 s, 1 s ...
        # backoff otherwise) keep tests fast. None sends no such header.
        self.retry_after_ms = retry_after_ms
        self.bedrock_key_id = bedrock_key_id
        self._failures: list[int] = []  # statuses for the next requests, in order
        self._ids = itertools.count(1)

    # ------------------------------------------------------------------ test controls

    def fail_next(self, n: int = 1, status: int = 500) -> None:
        """Answer the next `n` requests (any path) with `status` and an OpenAI error body."""
        with self._lock:
            self._failures.extend([status] * n)

    def calls(self, path: str | None = None) -> list[dict[str, Any]]:
        """The JSON bodies (for transcriptions: the form fields) of every request to `path`;
        by default, to the Responses API on either path (OpenAI's or bedrock-runtime's)."""
        paths = (path,) if path else (RESPONSES, BEDROCK_RESPONSES)
        with self._lock:
            return [r["json"] for r in self.requests if r["path"] in paths]

    def reset(self) -> None:
        """Forget recorded requests and pending failures, and stop delaying replies.

        The responder and transcriber stay as they are."""
        with self._lock:
            self.requests.clear()
            self._failures.clear()
            self.delay_seconds = 0.0
            self.outage = None
            self.unsupported_fields = frozenset()

    # ------------------------------------------------------------------ HTTP

    def answer(self, request: Request, record: dict[str, Any]) -> Reply:
        with self._lock:
            injected = self._failures.pop(0) if self._failures else None
        if injected is None and self.outage is not None:
            injected = self.outage()
        try:
            if request.path == TRANSCRIPTIONS:
                record["json"] = _form_summary(request)
            elif request.body:
                record["json"] = request.json()
        except ValueError:
            reply = error_reply(400, "We could not parse the JSON body of your request.")
        else:
            if injected is not None:
                reply = self._injected(injected)
            elif request.method == "POST" and request.path == RESPONSES:
                reply = self._checked(record["json"])
            elif request.method == "POST" and request.path == BEDROCK_RESPONSES:
                token = request.headers.get("authorization", "").removeprefix("Bearer ")
                if refused := bedrock_token_problem(token, self.bedrock_key_id):
                    reply = error_reply(401, refused)
                elif problems := bedrock_problems(record["json"], request.headers):
                    field = next(iter(undocumented_fields(record["json"])), None)
                    code = "unsupported_parameter" if field else None
                    reply = error_reply(400, "; ".join(problems), param=field, code=code)
                else:
                    reply = self._checked(record["json"])
            elif request.method == "POST" and request.path == TRANSCRIPTIONS:
                reply = self._transcribe(request, record["json"])
            elif request.method == "POST" and request.path == SPEECH:
                reply = self._speak(record.get("json"))
            else:
                reply = error_reply(404, f"Invalid URL ({request.method} {request.path})")
        return reply

    def _injected(self, status: int) -> Reply:
        headers = {}
        if status == 429:
            headers["retry-after"] = "0"
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = str(self.retry_after_ms)
        return error_reply(status, f"Injected failure (HTTP {status}) from FakeOpenAI.", headers)

    def _checked(self, body: Any) -> Reply:
        """The answer to a Responses request, or the 400 the API gives it."""
        if not isinstance(body, dict) or not body.get("model"):
            return error_reply(400, "Missing required parameter: 'model'.", param="model")
        if body.get("stream"):
            return error_reply(400, "FakeOpenAI does not stream; call without stream=True.")
        if refused := sorted(self.unsupported_fields & set(body)):
            message = f"Unsupported parameter: '{refused[0]}'."
            return error_reply(400, message, param=refused[0], code="unsupported_parameter")
        with self._lock:
            issued = dict(self._call_ids)
        try:
            request_problems(body, issued)
        except Refused as problem:
            return problem.reply()
        return self._respond(body)

    def _respond(self, body: dict[str, Any]) -> Reply:
        answer = self.responder(body)  # a text, or {"output": [items]} (e.g. function calls)
        number = next(self._ids)
        if isinstance(answer, dict):
            output = self._as_reasoning_model(body, answer["output"], number)
            text = "".join(
                c.get("text", "") for i in output if i["type"] == "message" for c in i["content"]
            )
        else:
            text, output = answer, [_message(number, answer)]
        input_tokens = math.ceil(sum(len(t) for t in _texts(body)) / 4)
        output_tokens = math.ceil(len(text) / 4)
        # What the openai package's Response model requires, plus the status and the usage we
        # read; the request's own settings are not echoed back (no caller reads them).
        response = {
            "id": f"resp_{number:024x}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": output_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": input_tokens + output_tokens,
            },
        }
        return Reply.json(200, response, {"x-request-id": f"req_{number:024x}"})

    def _as_reasoning_model(
        self, body: dict[str, Any], output: list[dict[str, Any]], number: int
    ) -> list[dict[str, Any]]:
        """The responder's items as the API returns them: every function call with its fc_ id,
        a reasoning item before the first (when `reasoning` and the responder gave none), and
        each reasoning item's encrypted_content only when the request included it (naming
        the item that follows it, which is what the API checks when it comes back)."""
        items = [dict(item) for item in output]
        for n, item in enumerate(items):
            if item["type"] == "function_call":
                item.setdefault("id", f"fc_{number:020x}{n:04x}")
                item.setdefault("status", "completed")
        first_call = next((n for n, i in enumerate(items) if i["type"] == "function_call"), None)
        reasoned = any(i["type"] == "reasoning" for i in items)
        if self.reasoning and first_call is not None and not reasoned:
            items.insert(
                first_call, {"type": "reasoning", "id": f"rs_{number:024x}", "summary": []}
            )
        included = "reasoning.encrypted_content" in (body.get("include") or [])
        for n, item in enumerate(items):
            if item["type"] == "reasoning":
                item.pop("encrypted_content", None)
                following = items[n + 1].get("id") if n + 1 < len(items) else None
                if included:
                    item["encrypted_content"] = _sealed(item["id"], following)
        with self._lock:
            self._call_ids.update(
                {i["call_id"]: i["id"] for i in items if i["type"] == "function_call"}
            )
        return items

    def _transcribe(self, request: Request, form: dict[str, Any]) -> Reply:
        audio = _multipart(request).get("file", (None, None, b""))[2]
        if not form.get("model") or "file_name" not in form:
            return error_reply(400, "Missing required parameters: 'file' and 'model'.")
        from devstack.openai_schema import problems

        # the form's fields as the schema names them (multipart values are text: a numeric
        # field such as temperature would need reading as a number first; we send none)
        if found := problems("CreateTranscriptionRequest", upload_fields(form)):
            param, message = found[0]
            return error_reply(400, message, param=param)
        text = self.transcriber(audio)
        if form.get("response_format") in ("text", "srt", "vtt"):
            return Reply(200, text.encode(), {"Content-Type": "text/plain; charset=utf-8"})
        # a token-billed model's usage, as OpenAI's Transcription object reports it (type
        # "tokens"; whisper-1's is type "duration", in seconds): here, a token per 100 bytes
        # of audio in, and a text token per 4 characters out
        audio_tokens, text_tokens = math.ceil(len(audio) / 100), math.ceil(len(text) / 4)
        usage = {
            "type": "tokens",
            "input_tokens": audio_tokens,
            "input_token_details": {"audio_tokens": audio_tokens, "text_tokens": 0},
            "output_tokens": text_tokens,
            "total_tokens": audio_tokens + text_tokens,
        }
        return Reply.json(200, {"text": text, "usage": usage})

    def _speak(self, body: Any) -> Reply:
        """`POST /v1/audio/speech`: the text spoken (devstack.ogg: an Ogg/Opus stream as long
        as the text, its words in a comment); refused as OpenAI refuses it."""
        from devstack.openai_schema import problems

        if not isinstance(body, dict):
            return error_reply(400, "We could not parse the JSON body of your request.")
        if found := problems("CreateSpeechRequest", body):  # fields, input over 4,096, format
            param, message = found[0]
            return error_reply(400, message, param=param)
        model, voice = body["model"], body["voice"]
        if model not in SPEECH_MODELS:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return error_reply(404, message, code="model_not_found")
        if isinstance(voice, str) and voice not in SPEECH_VOICES:
            message = f"Invalid value: '{voice}'. Supported values are: {', '.join(SPEECH_VOICES)}."
            return error_reply(400, message, param="voice", code="invalid_value")
        if model.startswith("tts-1") and (
            "instructions" in body or body.get("stream_format") == "sse"
        ):
            return error_reply(400, f"{model} does not take instructions or stream_format=sse.")
        kind = body.get("response_format", "mp3")
        audio = voice_note(body["input"]) if kind == "opus" else f"[{kind} audio]".encode()
        return Reply(200, audio, {"Content-Type": SPEECH_TYPES[kind]})


def upload_fields(form: dict[str, Any]) -> dict[str, Any]:
    """A recorded upload (`_form_summary`) as CreateTranscriptionRequest names its fields: the
    form's fields, and the file as its name."""
    fields = {key: value for key, value in form.items() if not key.startswith("file_")}
    return fields | ({"file": form["file_name"]} if "file_name" in form else {})


def _message(number: int, text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{number:024x}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
    }


# ---------------------------------------------------------------------- what the API refuses

NOT_PERSISTED = (
    "Item with id '{id}' not found. Items are not persisted when `store` is set to false. Try "
    "again with `store` set to true, or remove this item from your input."
)
WITHOUT_FOLLOWING = (
    "Item '{id}' of type 'reasoning' was provided without its required following item."
)
NO_CALL = "No tool call found for function call output with call_id {call_id}."
WITHOUT_ID = (
    "Item of type 'function_call' with call_id '{call_id}' was provided without its id '{id}'."
)


def _sealed(reasoning_id: str, following: str | None) -> str:
    """A reasoning item's encrypted_content: opaque to the caller (Fernet-like), and carrying
    what the API checks when it comes back: the item that followed it."""
    sealed = json.dumps({"rs": reasoning_id, "next": following}).encode()
    return "gAAAAA" + base64.urlsafe_b64encode(sealed).decode()


def _unsealed(content: str) -> dict[str, Any] | None:
    try:
        return json.loads(base64.urlsafe_b64decode(content.removeprefix("gAAAAA")))
    except (binascii.Error, ValueError):
        return None


def request_problems(body: dict[str, Any], issued: dict[str, str] | None = None) -> None:
    """Raise Refused for what OpenAI's Responses API answers 400: a field or value outside its
    published schema, and a continued turn whose items did not come back as they went out
    (docs/stand-ins.md: store=false with a reasoning model). `issued`: call_id -> the fc_ id the
    function call came with."""
    from devstack.openai_schema import problems

    if found := problems("CreateResponse", body):
        param, message = found[0]
        unknown = message.startswith("Unknown parameter")
        raise Refused(message, param, "unknown_parameter" if unknown else "invalid_value")
    items = body.get("input")
    if not isinstance(items, list):
        return
    stateless = body.get("store") is False
    calls = {i.get("call_id") for i in items if i.get("type") == "function_call"}
    for n, item in enumerate(items):
        kind, where = item.get("type"), f"input[{n}]"
        if kind == "reasoning":
            content = item.get("encrypted_content")
            if stateless and not content:
                raise Refused(NOT_PERSISTED.format(id=item["id"]), where)
            sealed = _unsealed(content) if content else None
            following = items[n + 1] if n + 1 < len(items) else {}
            expected = sealed.get("next") if sealed else None
            if not following.get("id") or (expected and following.get("id") != expected):
                raise Refused(WITHOUT_FOLLOWING.format(id=item["id"]), where)
        elif kind == "function_call":
            came_with = (issued or {}).get(item.get("call_id", ""))
            if came_with and item.get("id") != came_with:
                raise Refused(WITHOUT_ID.format(call_id=item["call_id"], id=came_with), where)
        elif kind == "function_call_output" and item.get("call_id") not in calls:
            raise Refused(NO_CALL.format(call_id=item.get("call_id")), where)


# ---------------------------------------------------------------------- Bedrock


def bedrock_token_problem(token: str, key_id: str | None) -> str | None:
    """Why bedrock-runtime would refuse `token`, or None: a base64 presigned
    `POST bedrock.amazonaws.com/?Action=CallWithBearerToken` (SigV4, service bedrock) that has not
    expired, signed by `key_id`."""
    from urllib.parse import parse_qs, urlsplit

    try:
        url = base64.b64decode(token.removeprefix("bedrock-api-key-"), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return "not a Bedrock API key"
    query = {k: v[0] for k, v in parse_qs(urlsplit(f"https://{url}").query).items()}
    credential = query.get("X-Amz-Credential", "").split("/")
    if not token.startswith("bedrock-api-key-") or not url.startswith("bedrock.amazonaws.com/?"):
        return "not a Bedrock API key"
    if query.get("Action") != "CallWithBearerToken" or query.get("Version") != "1":
        return "not a bearer-token presign"
    if len(credential) != 5 or credential[3:] != ["bedrock", "aws4_request"]:
        return "not signed for bedrock"
    if key_id is not None and credential[0] != key_id:
        return "signed by another access key"
    signed = calendar.timegm(time.strptime(query.get("X-Amz-Date", "19700101T000000Z"), DATE))
    if signed + int(query.get("X-Amz-Expires", "0")) < time.time():
        return "the bearer token has expired"
    return None


def undocumented_fields(body: dict[str, Any]) -> list[str]:
    """The request's fields AWS does not document bedrock-runtime's Responses API as taking
    (memagent.model.client.BEDROCK_FIELDS says which it does, and where AWS says so)."""
    from memagent.model.client import BEDROCK_FIELDS

    return sorted(set(body) - BEDROCK_FIELDS)


def bedrock_problems(body: Any, headers: dict[str, str]) -> list[str]:
    """What bedrock-runtime's Responses API rejects in a request (AWS's list of its
    differences): background mode, server-side tools, a project other than the default one, an
    application inference profile as the model, a missing model; and any field AWS does not
    document it as taking (docs/stand-ins.md: a risk we do not take)."""
    if not isinstance(body, dict) or not body.get("model"):
        return ["model is required on every request"]
    problems = [f"Unsupported parameter: '{field}'." for field in undocumented_fields(body)]
    if body.get("background"):
        problems.append("background=true: requests are always synchronous")
    if any(t.get("type") not in ("function", "custom") for t in body.get("tools") or []):
        problems.append("server-side tools are not available")
    if headers.get("openai-project", "default") != "default":
        problems.append("only the default project is supported")
    if ":application-inference-profile/" in body["model"]:
        problems.append("application inference profiles are not supported")
    return problems


# ---------------------------------------------------------------------- multipart


def _multipart(request: Request) -> dict[str, tuple[str | None, str | None, bytes]]:
    """Parts of a multipart/form-data body, name -> (filename, content type, bytes), as the
    standard library's MIME parser reads them."""
    content_type = request.headers.get("content-type", "")
    if not content_type.startswith("multipart/form-data") or "boundary=" not in content_type:
        raise ValueError("not multipart/form-data")
    head = f"Content-Type: {content_type}\r\n\r\n".encode()
    message = email.message_from_bytes(head + request.body, policy=email.policy.HTTP)
    return {
        str(name): (part.get_filename(), part.get("content-type") and part.get_content_type(), data)
        for part in message.iter_parts()
        if (name := part.get_param("name", header="content-disposition"))
        and isinstance(data := part.get_payload(decode=True), bytes)
    }


def _form_summary(request: Request) -> dict[str, Any]:
    """What gets recorded for an upload: the form fields and the file's name, type and size."""
    summary: dict[str, Any] = {}
    for name, (filename, kind, data) in _multipart(request).items():
        if filename is None:
            summary[name] = data.decode("utf-8", "replace")
        else:
            summary.update(file_name=filename, file_content_type=kind, file_size=len(data))
    return summary


# ---------------------------------------------------------------------- the offline model


def offline_transcriber(audio: bytes) -> str:
    return f"[offline transcription of {len(audio)} bytes]"


def offline_model(request: dict[str, Any]) -> str | dict[str, Any]:
    """A deterministic stand-in for a model, so the local stack works with no API key.

    It shows the memory mechanics rather than intelligence: replies say what the notes in the
    instructions contain (days since, facts, summary), structured-output requests get a summary
    and facts pulled out of the conversation with simple patterns, and images get a placeholder.
    Offered request_human and asked for someone from the business in other words than the
    handoff phrases ("can someone from the clinic call me?", in six languages), it calls it.
    A message "/tool NAME {json}" makes it call the declared tool NAME with those arguments, once,
    then say what the tool answered (`make chat`'s way to try a tool of your own).
    A question after a document the person sent is answered with the document's line that
    shares the most words with it (the demo's price list).
    Every reply starts with "[offline model]" so nobody mistakes it for real AI.
    """
    text_format = (request.get("text") or {}).get("format") or {}
    if text_format.get("type") == "json_schema":
        return json.dumps(_structured(request, text_format.get("schema") or {}))
    if image := _first_image(request.get("input")):
        return f"{OFFLINE} a picture ({image})"
    if (named := _named_tool(request)) is not None:
        return named
    if (handed := _request_human(request)) is not None:
        return handed
    if (followed := _follow_up(request)) is not None:
        return followed
    if (acted := _act(request)) is not None:
        return acted
    if (looked_up := _from_a_document(request)) is not None:
        return looked_up
    return _reply(request)


# a document the person sent, as memory keeps it (memagent.turn.documents): its name, its text
_DOCUMENT = re.compile(r'^\[sent ("[^"\n]*"|a document)(?: \([^)]*\))?: (.*)\]', re.S)


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"\w+", text.lower()) if len(w) > 3}


def _from_a_document(request: dict[str, Any]) -> str | None:
    """A question after a document the person sent ("How much is the long run plan?" after a
    price list): the document's line that shares the most words with it, quoted."""
    said = _user_messages(request)
    if len(said) < 2 or "?" not in said[-1]:
        return None
    asked = _words(said[-1])
    for earlier in reversed(said[:-1]):
        if (document := _DOCUMENT.match(earlier)) is None:
            continue
        lines = [line.strip() for line in document.group(2).splitlines() if line.strip()]
        best = max(lines, key=lambda line: len(asked & _words(line)), default="")
        if asked & _words(best):
            return f"{OFFLINE} From {document.group(1)}: {best}"
    return None


# "/tool NAME {json}": the person names a declared tool and its arguments (docs/tools.md)
_TOOL_PHRASE = re.compile(r"^\s*/tool\s+(\S+)\s*(.*)$", re.S)


def _named_tool(request: dict[str, Any]) -> Any:
    """The person wrote "/tool NAME {json}": call NAME with the JSON (no JSON: no arguments),
    then, its output back, say what it answered. A tool not offered, or arguments that are not
    a JSON object, get a reply saying so, and no call."""
    said = (_user_messages(request) or [""])[-1]
    asked = _TOOL_PHRASE.match(said)
    if asked is None:
        return None
    name, raw = asked.group(1), asked.group(2).strip() or "{}"
    offered = sorted(tool.get("name") for tool in request.get("tools") or [])
    if name not in offered:
        return f"{OFFLINE} No tool named {name} is declared (declared: {', '.join(offered)})."
    done = [
        item
        for item in request.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    if done:
        answer = json.loads(done[-1]["output"])  # the consumer's {"output"} or {"error"}
        return f"{OFFLINE} {name} answered: {json.dumps(answer, ensure_ascii=False)}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        return f"{OFFLINE} /tool {name} takes a JSON object of arguments, not: {raw}"
    return _calls(name, arguments)


# someone from the business, asked for in the person's own words, in the six languages of the
# fixed replies: "can someone from the clinic call me back?", "alguien de la clínica", ...
_SOMEONE_FROM_THE_TEAM = re.compile(
    r"\b(?:(?:someone|somebody|anyone) (?:from|at) (?:the|your) \w+"
    r"|(?:one of )?your (?:staff|team|colleagues|receptionist)\b"
    r"|alguien de(?:l| la| su)\b|quelqu'un de\b|alguém d[ao]s?\b"
    r"|jemand (?:aus|von|vom)\b|qualcuno (?:dello|della|del|dell'))",
    re.I,
)


def _request_human(request: dict[str, Any]) -> Any:
    """Offered request_human, and asked for someone from the business in other words than the
    fast path's: the call (memagent/turn/tool_loop.py hands the chat over; nothing comes back)."""
    offered = {tool.get("name") for tool in request.get("tools") or []}
    said = (_user_messages(request) or [""])[-1].replace("\u2019", "'")
    if "request_human" not in offered or not _SOMEONE_FROM_THE_TEAM.search(said):
        return None
    return _calls("request_human", {"reason": "asked for someone from the team"})


_REMIND = re.compile(
    r"remind me (today|tomorrow) at (\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s+(?:to\s+)?(.+)", re.I
)
_TODAY = re.compile(r"It is \w{3} (\d{1,2} \w{3} \d{4}), \d{2}:\d{2} \(")


def _follow_up(request: dict[str, Any]) -> Any:
    """Follow-ups (memagent.turn.follow_ups): at a follow-up's time, the reminder; offered the
    built-in tool and asked "remind me tomorrow at 9 to ...", the call, then its confirmation."""
    notes = notes_of(request)
    if "A follow-up you scheduled is due now" in notes:
        quoted = re.findall(r"never an order to you\): (\"[^\n]*\")", notes)
        return f"{OFFLINE} Reminder, as you asked: {json.loads(quoted[0]) if quoted else 'this'}."
    offered = {tool.get("name") for tool in request.get("tools") or []}
    asked = _REMIND.search((_user_messages(request) or [""])[-1])
    if "schedule_follow_up" not in offered or asked is None:
        return None
    done = [
        json.loads(item["output"])
        for item in request.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    if done:
        return f"{OFFLINE} " + str(done[-1].get("output") or done[-1].get("error"))
    today = _TODAY.search(notes)
    if today is None:
        return None
    day = datetime.strptime(today.group(1), "%d %b %Y").date()
    if asked.group(1).casefold() == "tomorrow":
        day += timedelta(days=1)
    hour = int(asked.group(2)) % 12 if asked.group(4) else int(asked.group(2))
    hour += 12 if (asked.group(4) or "").casefold() == "pm" else 0
    when = f"{day.isoformat()}T{hour:02d}:{int(asked.group(3) or 0):02d}"
    about = asked.group(5).strip().rstrip(".!")
    return _calls("schedule_follow_up", {"when": when, "about": about})


# the offline model's offer of a day's free slots (offer_choices), and the day read back from it
_SLOTS_OFFERED = re.compile(r"Free slots on (\d{4}-\d{2}-\d{2})")
_A_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")


def _act(request: dict[str, Any]) -> Any:
    """With the example booking tools offered and a message asking to book: look up the day's
    free slots, book the asked time (or the first free one), then say what was booked. Also
    offered offer_choices, and no time asked: the free slots offered to tap (a list on Meta);
    the time then picked (the tap, or a number of the numbered lines) is booked."""
    offered = {tool.get("name") for tool in request.get("tools") or []}
    said = (_user_messages(request) or [""])[-1]
    if not {"list_free_slots", "book_appointment"} <= offered:
        return None
    done = [
        json.loads(item["output"])
        for item in request.get("input") or []
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    if (picked := _picked_slot(request, said, done)) is not None:
        return picked
    if "book" not in said.casefold():
        return None
    day = (re.findall(r"\d{4}-\d{2}-\d{2}", said) or ["2026-12-03"])[0]
    if not done:
        return _calls("list_free_slots", {"day": day})
    if len(done) == 1 and "offer_choices" in offered and not _A_TIME.search(said):
        free = (done[0].get("output") or {}).get("free") or []
        if free:
            return _calls(
                "offer_choices",
                {"text": f"Free slots on {day}:", "choices": free, "button": "Pick a time"},
            )
        return f"{OFFLINE} No free slots on {day}."
    if len(done) == 1:
        free = (done[0].get("output") or {}).get("free") or ["09:00"]
        asked = re.findall(r"\b\d{1,2}:\d{2}\b", said)
        time_ = asked[0].zfill(5) if asked and asked[0].zfill(5) in free else free[0]
        return _calls("book_appointment", {"day": day, "time": time_, "name": "the person"})
    booked = (done[-1].get("output") or {}).get("booked")
    return f"{OFFLINE} " + (f"Booked: {booked}." if booked else f"No booking: {done[-1]}")


def _picked_slot(request: dict[str, Any], said: str, done: list[dict[str, Any]]) -> Any:
    """The person answered the slots the last reply offered with one of them (its time, or
    its number in the numbered lines): book it, then say what was booked."""
    last_reply = next((t for r, t in reversed(turns_of(request)) if r == "assistant"), "")
    offer = _SLOTS_OFFERED.search(last_reply)
    if offer is None:
        return None
    day = offer.group(1)
    slots = re.findall(r"^\d+\. (\d{1,2}:\d{2})$", last_reply, re.M)
    answer = said.strip()
    time_ = answer if answer in slots else None
    if answer.isdigit() and 1 <= int(answer) <= len(slots):
        time_ = slots[int(answer) - 1]
    if time_ is None:
        return None
    if not done:
        return _calls("book_appointment", {"day": day, "time": time_, "name": "the person"})
    booked = (done[-1].get("output") or {}).get("booked")
    return f"{OFFLINE} " + (f"Booked: {booked}." if booked else f"No booking: {done[-1]}")


def _calls(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call_id = f"call_{name}"
    item = {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name}
    return {"output": [{**item, "arguments": json.dumps(arguments), "status": "completed"}]}


def turns_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    """A request's conversation: (role, text) of its user and assistant input items."""
    return [(r, t) for r, t in _items(request.get("input")) if r in ("user", "assistant")]


def input_of(request: dict[str, Any]) -> list[tuple[str, str]]:
    """Every input item of a request as (role or type, text): the messages, and a tool turn's
    calls (name and arguments) and their outputs, in order (what `make chat`'s /prompt shows)."""
    value = request.get("input")
    if not isinstance(value, list):
        return _items(value)
    shown = []
    for item in value:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            shown.append((kind, f"{item.get('name')} {item.get('arguments')}"))
        elif kind == "function_call_output":
            shown.append((kind, str(item.get("output"))))
        elif kind == "reasoning":
            shown.append((kind, "(the model's reasoning, encrypted)"))
        else:
            shown += _items([item])
    return shown


def notes_of(request: dict[str, Any]) -> str:
    """A request's notes: its instructions, then its developer and system input items (the
    context's dated lines and its volatile tail)."""
    tail = [t for r, t in _items(request.get("input")) if r in ("developer", "system")]
    return "\n\n".join([_as_text(request.get("instructions")), *tail])


def _reply(request: dict[str, Any]) -> str:
    notes = _read_notes(notes_of(request))
    parts = [OFFLINE]
    if notes["days"]:
        parts.append(f"Welcome back, it's been {notes['days']} days since you last wrote.")
    if notes["new_number"]:
        parts.append("(I'm writing from a new number now.)")
    if notes["facts"]:
        more = len(notes["facts"]) - 1
        parts.append(
            f"I remember: {_shorten(notes['facts'][0], 80).rstrip('.!?;,')}"
            + (f" (and {more} more note{'s' if more > 1 else ''})." if more else ".")
        )
    elif notes["summary"]:
        parts.append(f"I remember we talked about: {_shorten(notes['summary'], 80)}")
    user_messages = _user_messages(request)
    if user_messages:
        parts.append(f'You said: "{_shorten(user_messages[-1], 80)}"')
    return " ".join(parts)


# The notes are read as memagent.memory.context and memagent.model.client write them (their own
# headings), so rewording a heading there cannot leave the offline model silently blind to it.
_NONE = {"", "(none)", "(empty)"}


def _note(text: str, heading: str) -> str:
    """The paragraph under `heading` in `text` (up to a blank line), or ""."""
    _, found, rest = text.partition(heading)
    body = rest.strip("\n").split("\n\n", 1)[0].strip() if found else ""
    return "" if body.lower() in _NONE else body


def _read_notes(instructions: str) -> dict[str, Any]:
    """Facts, summary, days since and a new number, from a reply request's instructions."""
    days = re.search(r"last wrote (\d+) days? ago", instructions)
    facts = [
        *_note(instructions, FACTS_HEADING).splitlines(),
        *_note(instructions, PICKED_HEADING).splitlines(),
    ]
    return {
        # a fact's date ("(noted 3 Mar 2026)") is for the model, not part of the fact
        "facts": [re.sub(r" \(noted [^)]*\)$", "", f[2:]) for f in facts if f.startswith("- ")],
        # after the heading's label line: its first line may name the summary's date
        "summary": _note(instructions, SUMMARY_HEADING.split("\n", 1)[1]),
        "days": int(days.group(1)) if days else None,
        "new_number": NEW_NUMBER_LINE in instructions,
    }


# ---------------------------------------------------------------------- compaction


def _structured(request: dict[str, Any], schema: dict[str, Any]) -> Any:
    """A JSON value matching `schema`; "summary" and "facts" properties get real content, and
    "outdated" / "confirmed" the numbers of the notes shown that a new fact replaces (one about
    the same thing: "Lives in London" replaces "Lives in Leeds"), a denial takes back ("I don't
    have a dog" and "Has a dog called Biscuit") or a new fact restates."""
    messages = _user_messages(request, compaction=True)
    facts = _facts(messages, _dated_lines(request))
    notes = _numbered_notes(request)
    outdated: list[int] = []
    confirmed: list[int] = []
    for number, note in notes.items():
        subject = _subject(note)
        if any(_subject(f) == subject for f in facts) or any(
            re.search(
                rf"\b(?:don't|do not|no longer) (?:have|own) (?:an? )?{re.escape(thing)}\b", m, re.I
            )
            for m in messages
            for thing in re.findall(r"^Has an? (\w+)", note)
        ):
            (confirmed if note in facts else outdated).append(number)
    known = {
        "summary": _summary(request, messages),
        "facts": [f for f in facts if f not in notes.values()],
        "outdated": outdated,
        "confirmed": confirmed,
    }
    return _fill(schema, known)


_NOTE = re.compile(r"^\s*(\d+)[.)]\s+(.+?)(?:\s+\(noted [^)]*\))?\s*$")


def _numbered_notes(request: dict[str, Any]) -> dict[int, str]:
    """The notes a fold request shows, by number: "3. Lives in Leeds (noted ...)"."""
    return {
        int(m.group(1)): m.group(2)
        for text in _texts(request)
        for line in text.splitlines()
        if (m := _NOTE.match(line))
    }


def _subject(fact: str) -> str:
    """What a fact is about, from the offline model's own phrasings: "Lives in", "Has a dog"."""
    words = fact.split()
    return " ".join(words[:3] if words[:1] == ["Has"] else words[:2]).casefold()


def _fill(schema: dict[str, Any], known: dict[str, Any], name: str | None = None) -> Any:
    kind = schema.get("type")
    if isinstance(kind, list):  # e.g. ["string", "null"]
        kind = next((k for k in kind if k != "null"), "null")
    if "enum" in schema:
        return schema["enum"][0]
    if kind == "object" or "properties" in schema:
        props = schema.get("properties") or {}
        return {key: _fill(sub, known, key) for key, sub in props.items()}
    if name in known:
        value = known[name]
        item = {"string": str, "integer": int}.get(
            (schema.get("items") or {}).get("type", "string")
        )
        if kind == "array" and not (item and all(type(v) is item for v in value)):
            return []
        return value
    defaults = {"string": "", "array": [], "integer": 0, "number": 0, "boolean": False}
    return defaults.get(kind) if isinstance(kind, str) else None


def _summary(request: dict[str, Any], messages: list[str]) -> str:
    previous = _previous_summary(request)
    said = "; ".join(_shorten(m, 60).rstrip(".!?;,") for m in messages[:8])
    text = " ".join(
        part
        for part in (
            f"Earlier: {previous}" if previous else "",
            f"They said: {said}." if said else "",
        )
        if part
    )
    words = text.split()
    return " ".join(words[:190]) if words else "Earlier: nothing of note."


def _previous_summary(request: dict[str, Any]) -> str:
    """The summary a fold starts from (memagent.model.client's "Current summary:" paragraph)."""
    return _note("\n".join(_texts(request)), "Current summary:\n")


_WHEN_SAID = re.compile(r" (?:last|this|yesterday|today)\b.*$")
# Ordered: the first pattern that matches a sentence wins for that sentence.
_FACT_PATTERNS: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (
        re.compile(r"(?i:\bmy name(?:'s| is)) ([A-Z][\w'-]*(?: [A-Z][\w'-]*)?)"),
        lambda m: f"Name is {m.group(1)}",
    ),
    (
        re.compile(r"(?i:\b(?:i'm called|i am called|call me)) ([A-Z][\w'-]*)"),
        lambda m: f"Name is {m.group(1)}",
    ),
    (
        re.compile(r"\bI(?:'m| am)? start(?:ing|s)? (.*\bjob\b.*)", re.I),
        lambda m: f"Plans: starts {m.group(1)}",
    ),
    (
        re.compile(r"\bI work (as|at|in|for) (.+)", re.I),
        lambda m: f"Works {m.group(1).lower()} {m.group(2)}",
    ),
    (
        re.compile(r"(?i:\bI have an? (\w+(?: \w+)?) (called|named)) ([A-Z][\w'-]*)"),
        lambda m: f"Has a {m.group(1)} {m.group(2).lower()} {m.group(3)}",
    ),
    (
        re.compile(
            r"\b(?:I live in|I moved to|we moved to|we've moved to|j'habite à|vivo en|moro em|"
            r"me mudé a|mudei-me para|mudei para) (.+)",
            re.I,
        ),
        lambda m: "Lives in " + _WHEN_SAID.sub("", m.group(1)),
    ),
    (
        # a plan: "my interview is tomorrow" -> "Interview on Tue 3 Mar 2026" (see _facts)
        re.compile(r"\bmy (\w+(?: \w+)?) is (today|tomorrow|on \w+ \d+ \w+ \d{4})\b", re.I),
        lambda m: f"{m.group(1).capitalize()} on {m.group(2)}",
    ),
    (
        re.compile(r"\b(?:I'm|I am) allergic to (.+)", re.I),
        lambda m: f"Allergic to {m.group(1)}",
    ),
    (
        # "I'm a nurse" but not "I'm a bit tired"
        re.compile(r"\b(?:I'm|I am) (an? (?!bit\b|little\b|lot\b|big\b|tad\b)\w+(?: \w+)?)$", re.I),
        lambda m: f"Works as {m.group(1)}",
    ),
]


_DAY = re.compile(r"\((?:\w{3} )?(\d{1,2} \w{3} \d{4})|\((\d{4}-\d\d-\d\d)")


def _dated_lines(request: dict[str, Any]) -> dict[str, datetime]:
    """The date each transcript line of a fold request was written, by the text said."""
    dates: dict[str, datetime] = {}
    for text in _texts(request):
        for line in text.splitlines():
            if (said := _USER_LINE.match(line)) and (found := _DAY.search(line)):
                written = found.group(1) or found.group(2)
                shape = "%d %b %Y" if found.group(1) else "%Y-%m-%d"
                dates[said.group(1).strip()] = datetime.strptime(written, shape)
    return dates


def _absolute(fact: str, written: datetime | None) -> str:
    """ "Interview on tomorrow" -> "Interview on Tue 3 Mar 2026", from the line's date."""
    shift = {"on today": 0, "on tomorrow": 1}
    for word, days in shift.items():
        if fact.endswith(word) and written is not None:
            when = written + timedelta(days=days)
            return f"{fact[: -len(word)]}on {when:%a} {when.day} {when:%b %Y}"
    return fact


def _facts(messages: list[str], dates: dict[str, datetime] | None = None) -> list[str]:
    facts: list[str] = []
    for message in messages:
        written = (dates or {}).get(message.strip())
        # Sentences and "..., and I ..." clauses, so each can yield its own fact.
        for sentence in re.split(r"(?<=[.!?;])\s+|\n|,?\s+(?:and|but|so)\s+(?=I\b)", message):
            sentence = sentence.strip().rstrip(".!?;,")
            for pattern, render in _FACT_PATTERNS:
                if match := pattern.search(sentence):
                    fact = _shorten(_absolute(render(match), written), 120)
                    if fact not in facts:
                        facts.append(fact)
                    break
    return facts


# ---------------------------------------------------------------------- reading requests

# A fold's transcript line: "Person (2026-12-01): ..." (memagent.model.client), or "user: ...".
_USER_LINE = re.compile(r"^\s*(?:user|person)\s*(?:\([^)]*\))?\s*:\s*(.+)$", re.I)


def _user_messages(request: dict[str, Any], *, compaction: bool = False) -> list[str]:
    """What the person said, oldest first.

    Normally the user-role input items. For compaction the turns may instead arrive as a
    transcript ("user: ..." lines) anywhere in the instructions or input, so those win if present.
    """
    items = list(_items(request.get("input")))
    if compaction:
        everything = [_as_text(request.get("instructions")), *(t for _, t in items)]
        transcript = [
            m.group(1).strip()
            for text in everything
            for line in text.splitlines()
            if (m := _USER_LINE.match(line))
        ]
        if transcript:
            return transcript
    said = [text.strip() for role, text in items if role == "user" and text.strip()]
    if compaction and said:
        return [line.strip() for text in said for line in text.splitlines() if line.strip()]
    return said


def _items(value: Any) -> list[tuple[str, str]]:
    """(role, text) for each input item; a plain string input is one user item."""
    if value is None:
        return []
    if isinstance(value, str):
        return [("user", value)]
    items = []
    for item in value if isinstance(value, list) else [value]:
        if isinstance(item, dict):
            role = item.get("role") or ("user" if item.get("type") == "message" else "")
            items.append((str(role), _as_text(item.get("content", item.get("text")))))
        elif isinstance(item, str):
            items.append(("user", item))
    return items


def _as_text(value: Any) -> str:
    """All the text in a content value: a string or a list of content parts."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(t for part in value if (t := _as_text(part)))
    if isinstance(value, dict):
        if isinstance(value.get("text"), str):
            return value["text"]
        if "content" in value:
            return _as_text(value["content"])
    return ""


def _texts(request: dict[str, Any]) -> list[str]:
    return [_as_text(request.get("instructions")), *(t for _, t in _items(request.get("input")))]


def _first_image(value: Any) -> str | None:
    """A short description of the first input_image part, or None."""
    if isinstance(value, list):
        for item in value:
            if found := _first_image(item):
                return found
    elif isinstance(value, dict):
        if value.get("type") == "input_image":
            url = value.get("image_url") or ""
            if url.startswith("data:"):
                header, _, data = url.partition(",")
                try:
                    size = len(base64.b64decode(data))
                except (binascii.Error, ValueError):
                    size = 0
                return f"{header[5:].split(';')[0] or 'image'}, {size} bytes"
            return "an image file" if value.get("file_id") else "an image link"
        return _first_image(value.get("content"))
    return None


def _shorten(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
