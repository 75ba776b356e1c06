"""The local stand-ins (devstack) behave like the services they replace, as seen by the real
`openai`, `urllib3` and `boto3` clients."""

from __future__ import annotations

import json
import urllib.parse
from http.client import HTTPConnection

import boto3
import openai
import pytest
import urllib3
from openai import OpenAI

from devstack.aws import MotoServer, aws_env
from devstack.fake_openai import FakeOpenAI
from devstack.fake_whasp import FakeWhasp
from memagent.memory.context import FACTS_HEADING  # the heading the consumer writes
from memagent.model.client import COMPACTION_SCHEMA  # the schema the compactor sends, not a copy

API_KEY = "whasp-test-key"
OUR_NUMBER = "+14155550100"
MAYA = "+447700900123"


@pytest.fixture
def openai_server():
    with FakeOpenAI() as server:
        yield server


@pytest.fixture
def client(openai_server):
    return OpenAI(base_url=f"{openai_server.url}/v1", api_key="test")  # default max_retries=2


@pytest.fixture
def whasp():
    with FakeWhasp(api_key=API_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def http():
    return urllib3.PoolManager(retries=False)


def send(
    http, whasp, *, text="Good luck on Monday!", key="reply:evt_1:0", api_key=API_KEY, to=MAYA
):
    return http.request(
        "POST",
        f"{whasp.url}/v1/messages",
        body=json.dumps({"from": OUR_NUMBER, "to": to, "type": "text", "text": text}),
        headers={
            "Authorization": f"Bearer {api_key}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
    )


# --------------------------------------------------------------------------- FakeOpenAI


def test_responses_create_returns_text_and_usage_and_records_store_false(openai_server, client):
    # Given a reply request with notes in the instructions
    notes = f"{FACTS_HEADING}\n- Name is Maya\n- Has a dog called Biscuit"
    instructions = f"You are Coach.\n\nThe person last wrote 23 days ago.\n\n{notes}"
    turns = [{"role": "user", "content": "I'm back! First week at the new job done."}]

    # When the real client calls the Responses API without storage
    response = client.responses.create(
        model="gpt-6-luna", instructions=instructions, input=turns, store=False
    )

    # Then it gets an offline, memory-aware reply with usage, and the server saw store=false
    assert response.output_text.startswith("[offline model] ")
    assert "23 days" in response.output_text
    assert "Name is Maya" in response.output_text
    assert "First week at the new job" in response.output_text
    chars = len(instructions) + len(turns[0]["content"])
    assert response.usage.input_tokens == -(-chars // 4)
    assert response.usage.total_tokens == response.usage.input_tokens + (
        response.usage.output_tokens
    )
    assert response.model == "gpt-6-luna"
    [call] = openai_server.calls()
    assert call["store"] is False
    assert openai_server.requests[0]["headers"]["authorization"] == "Bearer test"


def test_custom_responder_decides_the_text(openai_server, client):
    # Given a responder set on the server
    openai_server.responder = lambda request: f"echo {request['input']}"

    # When the client asks
    response = client.responses.create(model="m", input="ping", store=False)

    # Then the reply is the responder's
    assert response.output_text == "echo ping"


def test_every_reply_is_a_valid_response_as_the_openai_package_defines_it(openai_server, client):
    # Given a text reply, then function calls (what the booking tools' turns get)
    from openai.types.responses import Response

    from devstack.fake_openai import _calls

    for responder in (None, lambda request: _calls("list_free_slots", {"day": "2026-12-03"})):
        openai_server.responder = responder or openai_server.responder
        # When the real client asks, keeping the raw body
        raw = client.responses.with_raw_response.create(model="m", input="hi", store=False)
        # Then the body validates against the package's own model (its required fields)
        response = Response.model_validate(raw.http_response.json())
        assert response.status == "completed" and response.usage is not None


def test_json_schema_request_gets_summary_and_facts(openai_server, client):
    # Given a compaction request carrying the turns as a transcript
    transcript = "\n".join(
        [
            "user: Hi! My name is Maya and I live in Leeds.",
            "assistant: Lovely to meet you, Maya.",
            "user: I have a dog called Biscuit.",
            "user: I start the new job on Monday!",
        ]
    )

    # When it asks for structured output
    response = client.responses.create(
        model="gpt-6-luna",
        instructions="Fold these turns into the summary and facts.",
        input=[{"role": "user", "content": [{"type": "input_text", "text": transcript}]}],
        text={
            "format": {
                "type": "json_schema",
                "name": "compaction",
                "schema": COMPACTION_SCHEMA,
                "strict": True,
            }
        },
        store=False,
    )

    # Then the text is JSON with a summary and the facts the person stated (no notes were
    # shown, so none is outdated or confirmed)
    result = json.loads(response.output_text)
    assert set(result) == {"summary", "facts", "outdated", "confirmed"}
    assert result["outdated"] == result["confirmed"] == []
    assert "Maya" in result["summary"] and len(result["summary"].split()) < 200
    assert "Lovely to meet you" not in result["summary"]
    assert result["facts"] == [
        "Name is Maya",
        "Lives in Leeds",
        "Has a dog called Biscuit",
        "Plans: starts the new job on Monday",
    ]


# ---------------------------------------------------------------- a reasoning model, store=false

BOOK = {
    "type": "function",
    "name": "book",
    "description": "Book a slot",
    "parameters": {"type": "object", "properties": {}},
    "strict": False,
}


def first_round(openai_server, client, **include):
    """A tool round from the stand-in's reasoning model: its output items as the client got
    them."""
    openai_server.responder = lambda request: (
        {
            "output": [
                {"type": "function_call", "call_id": "call_1", "name": "book", "arguments": "{}"}
            ]
        }
        if not any(i.get("type") == "function_call_output" for i in request["input"])
        else "booked"
    )
    said = [{"role": "user", "content": "book it"}]
    response = client.responses.create(
        model="gpt-6-luna", input=said, tools=[BOOK], store=False, **include
    )
    return said, [item.to_dict() for item in response.output]


def refusal(client, **request) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-6-luna", store=False, **request)
    return refused.value


ANSWER = {"type": "function_call_output", "call_id": "call_1", "output": "{}"}


def test_a_reasoning_model_reasons_before_it_calls_and_encrypts_only_when_asked(
    openai_server, client
):
    # when a tool round is asked for, without and then with the encrypted reasoning included
    _, plain = first_round(openai_server, client)
    _, included = first_round(openai_server, client, include=["reasoning.encrypted_content"])
    # then a reasoning item (rs_) comes before the call (fc_), encrypted only when included
    assert [(i["type"], i["id"][:3]) for i in included] == [
        ("reasoning", "rs_"),
        ("function_call", "fc_"),
    ]
    assert "encrypted_content" not in plain[0] and included[0]["encrypted_content"]


def test_items_sent_back_as_they_came_continue_the_turn(openai_server, client):
    said, items = first_round(openai_server, client, include=["reasoning.encrypted_content"])
    response = client.responses.create(
        model="gpt-6-luna",
        input=[*said, *items, ANSWER],
        tools=[BOOK],
        store=False,
        include=["reasoning.encrypted_content"],
    )
    assert response.output_text == "booked"


def test_a_call_sent_back_without_its_id_is_refused(openai_server, client):
    said, items = first_round(openai_server, client, include=["reasoning.encrypted_content"])
    reasoning, call = items
    stripped = {k: v for k, v in call.items() if k in ("type", "call_id", "name", "arguments")}
    # with its reasoning before it: the reasoning lost the item that followed it
    error = refusal(client, input=[*said, reasoning, stripped, ANSWER], tools=[BOOK])
    assert error.body["message"] == (
        f"Item '{reasoning['id']}' of type 'reasoning' was provided without its required "
        "following item."
    )
    assert error.body["type"] == "invalid_request_error" and error.param == "input[1]"
    # without it: the call came with an id it no longer carries
    error = refusal(client, input=[*said, stripped, ANSWER], tools=[BOOK])
    assert call["id"] in error.body["message"] and error.param == "input[1]"


def test_a_reasoning_item_without_its_encrypted_content_is_refused_under_store_false(
    openai_server, client
):
    said, items = first_round(openai_server, client)  # not included
    error = refusal(client, input=[*said, *items, ANSWER], tools=[BOOK])
    assert error.body["message"].startswith(
        f"Item with id '{items[0]['id']}' not found. Items are not"
    )


def test_an_output_answering_no_call_is_refused(client):
    error = refusal(client, input=[{"role": "user", "content": "hi"}, ANSWER])
    assert (
        error.body["message"] == "No tool call found for function call output with call_id call_1."
    )


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt_cache_keys": "x"}, "prompt_cache_keys"),
        ({"include": ["reasoning.encrypted"]}, "include[0]"),
        ({"input": [{"role": "user", "content": "hi", "name": "Maya"}]}, "input[0].name"),
    ],
    ids=["unknown-field", "unknown-value", "unknown-nested-field"],
)
def test_a_field_or_value_outside_the_published_schema_is_refused(client, extra, param):
    error = refusal(client, input="hi", extra_body=extra)  # sent as it is
    assert error.param == param and error.status_code == 400


def test_bedrock_runtime_refuses_a_field_aws_does_not_document(openai_server):
    # given the stand-in's bedrock-runtime path, with any well-formed bearer token
    from botocore.credentials import Credentials

    from memagent.model.bedrock import bearer_token

    token = bearer_token(Credentials("AKIDEXAMPLE", "secret"), "us-east-1")
    bedrock = OpenAI(base_url=f"{openai_server.url}/openai/v1", api_key=token, max_retries=0)
    # when a request carries a field OpenAI takes but AWS does not document (the cache key)
    error = refusal(bedrock, input="hi", prompt_cache_key="k")
    # then it is refused naming it; without it, it is answered
    assert error.param == "prompt_cache_key" and "Unsupported parameter" in error.body["message"]
    assert bedrock.responses.create(model="gpt-6-luna", input="hi", store=False).output_text


def test_a_500_then_success_is_absorbed_by_the_client_retries(openai_server, client):
    # Given the next request fails with HTTP 500
    openai_server.fail_next(1, status=500)

    # When the client calls with its default retries
    response = client.responses.create(model="m", input="hello", store=False)

    # Then it succeeds, and the server saw both attempts
    assert response.output_text.startswith("[offline model]")
    assert [r["status"] for r in openai_server.requests] == [500, 200]
    assert len(openai_server.calls()) == 2


def test_failures_beyond_the_retries_surface_as_openai_errors(openai_server):
    # Given more rate-limit failures than a client without retries tolerates
    openai_server.fail_next(1, status=429)
    client = OpenAI(base_url=f"{openai_server.url}/v1", api_key="test", max_retries=0)

    # When it calls, then the client raises its typed error with the server's retry hint
    with pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model="m", input="hello", store=False)
    assert caught.value.response.headers["retry-after"] == "0"


def test_image_input_gets_a_picture_placeholder(client):
    # When the client sends a photo
    response = client.responses.create(
        model="m",
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Describe this photo."},
                    {
                        "type": "input_image",
                        "image_url": "data:image/jpeg;base64,QUJD",
                        "detail": "auto",  # required by OpenAI's schema, as the stand-in checks
                    },
                ],
            }
        ],
        store=False,
    )

    # Then the offline model describes it as a picture
    assert response.output_text == "[offline model] a picture (image/jpeg, 3 bytes)"


def test_transcription_through_the_real_client(openai_server, client):
    # Given a voice note (binary, including CRLF bytes that a sloppy parser would mangle)
    audio = b"OggS\x00\r\n\r\n" + bytes(range(256)) * 4

    # When the client uploads it
    transcript = client.audio.transcriptions.create(
        model="gpt-4o-transcribe", file=("voice.ogg", audio, "audio/ogg")
    )

    # Then the default transcriber reports the exact size, and the upload was recorded
    assert transcript.text == f"[offline transcription of {len(audio)} bytes]"
    [call] = openai_server.calls("/v1/audio/transcriptions")
    assert call["model"] == "gpt-4o-transcribe"
    assert call["file_size"] == len(audio)
    assert call["file_content_type"] == "audio/ogg"


def test_an_upload_field_outside_the_schema_is_refused(client):
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.transcriptions.create(
            model="gpt-transcribe", file=("v.ogg", b"OggS", "audio/ogg"), extra_body={"voice": "x"}
        )
    assert refused.value.body["message"] == "Unknown parameter: 'voice'."


# --------------------------------------------------------------------------- FakeWhasp


def test_send_is_accepted_and_recorded(http, whasp):
    # When a valid text is sent
    response = send(http, whasp)

    # Then whasp queues it
    assert response.status == 201
    assert response.json() == {"id": "msg_1", "status": "queued"}
    [sent] = whasp.sent
    assert sent["from"] == OUR_NUMBER and sent["to"] == MAYA
    assert sent["text"] == "Good luck on Monday!"
    assert sent["idempotency_key"] == "reply:evt_1:0"


def test_repeated_idempotency_key_returns_the_first_result_and_sends_once(http, whasp):
    # Given one accepted send
    first = send(http, whasp, key="reply:evt_9:0")

    # When the same key is sent again
    again = send(http, whasp, key="reply:evt_9:0")

    # Then the answer repeats and nothing new is sent
    assert again.status == first.status == 201
    assert again.json()["id"] == first.json()["id"]
    assert len(whasp.sent) == 1
    assert [r["replayed"] for r in whasp.requests] == [False, True]


def test_on_send_hook_sees_each_accepted_send(http):
    seen = []
    with FakeWhasp(api_key=API_KEY, on_send=seen.append) as whasp:
        send(http, whasp, key="a")
        send(http, whasp, key="a")
    assert [s["text"] for s in seen] == ["Good luck on Monday!"]


def test_opted_out_chat_gets_409(http, whasp):
    # Given Maya has opted out
    whasp.opted_out.add(MAYA)

    # When a reply is sent to her
    response = send(http, whasp)

    # Then whasp refuses and sends nothing
    assert response.status == 409
    assert response.json() == {"error": "opted_out"}
    assert whasp.sent == []


@pytest.mark.parametrize(
    ("text", "key"),
    [("x" * 4097, "k1"), ("", "k2"), ("hello", "")],
    ids=["text over 4096 chars", "empty text", "no idempotency key"],
)
def test_invalid_send_gets_400(http, whasp, text, key):
    response = send(http, whasp, text=text, key=key)
    assert response.status == 400
    assert response.json()["error"] == "invalid_request"
    assert whasp.sent == []


def test_text_of_exactly_4096_chars_is_accepted(http, whasp):
    assert send(http, whasp, text="x" * 4096).status == 201


def test_bad_key_gets_401(http, whasp):
    response = send(http, whasp, api_key="wrong")
    assert response.status == 401
    assert whasp.sent == []


def test_injected_failures_are_not_remembered_by_the_idempotency_key(http, whasp):
    # Given whasp fails once with 503 and a Retry-After
    whasp.fail_next(1, status=503, retry_after=1)

    # When the client sends, then retries with the same key
    failed = send(http, whasp, key="reply:evt_2:0")
    retried = send(http, whasp, key="reply:evt_2:0")

    # Then the failure carried the hint, and the retry went through once
    assert failed.status == 503 and failed.headers["Retry-After"] == "1"
    assert retried.status == 201
    assert len(whasp.sent) == 1


def test_reject_next_refuses_permanently(http, whasp):
    whasp.reject_next(1, status=403)
    assert send(http, whasp).status == 403
    assert whasp.sent == []


def test_media_download_requires_the_key(http, whasp):
    # Given a registered voice note
    url = whasp.add_media(b"OggS voice", "audio/ogg")

    # When it is fetched with and without the key
    with_key = http.request("GET", url, headers={"Authorization": f"Bearer {API_KEY}"})
    without_key = http.request("GET", url)

    # Then only the keyed request gets the bytes and their type
    assert with_key.status == 200
    assert with_key.data == b"OggS voice"
    assert with_key.headers["Content-Type"] == "audio/ogg"
    assert without_key.status == 401


# --------------------------------------------------------------------------- moto


def test_boto3_reaches_moto_through_aws_endpoint_url_alone(monkeypatch):
    with MotoServer() as moto:
        # Given only the environment aws_env describes
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_SQS"):
            monkeypatch.delenv(name, raising=False)
        for name, value in aws_env(moto.url).items():
            monkeypatch.setenv(name, value)

        # When boto3 clients are created with no endpoint argument
        dynamodb = boto3.client("dynamodb")
        dynamodb.create_table(
            TableName="memory",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"},
        )
        stream_arn = dynamodb.describe_table(TableName="memory")["Table"]["LatestStreamArn"]
        stream = boto3.client("dynamodbstreams").describe_stream(StreamArn=stream_arn)
        queue_url = boto3.client("sqs").create_queue(
            QueueName="turns.fifo", Attributes={"FifoQueue": "true"}
        )["QueueUrl"]

        # Then they all talk to this server
        assert dynamodb.meta.endpoint_url == moto.url
        assert stream["StreamDescription"]["StreamStatus"] == "ENABLED"
        assert queue_url.startswith(moto.url)

        # And reset wipes the state
        moto.reset()
        assert dynamodb.list_tables()["TableNames"] == []


def test_moto_answers_several_requests_on_one_connection_whatever_each_left_unread(moto_server):
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    def list_tables() -> tuple[str, str, dict[str, str], bytes]:
        request = AWSRequest(
            "POST",
            moto_server.url,
            data=b"{}",
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": "DynamoDB_20120810.ListTables",
            },
        )
        SigV4Auth(boto3.Session().get_credentials(), "dynamodb", "us-east-1").add_auth(request)
        return "POST", "/", dict(request.headers.items()), b"{}"

    # Given one HTTP/1.1 connection to the worker's moto server (as a boto3 client keeps one)
    where = urllib.parse.urlparse(moto_server.url)
    connection = HTTPConnection(where.hostname, where.port, timeout=5)
    answers = []
    # When it sends a request whose body moto never reads (its dashboard's data), then two more
    unread = ("GET", "/moto-api/data.json", {}, b'{"padding": "' + b"x" * 5000 + b'"}')
    for method, path, headers, body in (unread, list_tables(), list_tables()):
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        answers.append((response.status, response.getheader("Connection"), response.read()))
    # Then each is answered on that same connection, the first one's body not taken for the
    # next request
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert all(kept != "close" for _, kept, _ in answers)
    assert b"TableNames" in answers[2][2]
    connection.close()
