"""Media downloads are a request to a URL that a signed event names: only allow-listed origins
are fetched, whasp's key goes only to whasp, and a slow host is cut off at the deadline. Through
the consumer handler, with real HTTP servers on this machine."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from devstack import LoopbackServer, Reply, Request
from devstack.fake_whasp import FakeWhasp
from tests.conftest import MAYA, load_function, sqs_batch, whasp_message
from tests.integration.test_consumer import at, attempt, failures, turns

PHOTO_NOTE = "[sent a photo that could not be opened]"


def photo(url: str, event_id: str = "evt_photo") -> dict[str, Any]:
    return whasp_message(
        "",
        created_at=at(0),
        event_id=event_id,
        message={
            "id": "msg_photo",
            "type": "image",
            "timestamp": at(0),
            "media": {"url": url, "mime_type": "image/png", "size": 8},
        },
    )


@pytest.fixture
def elsewhere() -> Any:
    """Another host that would gladly serve (and collect) anything: a second whasp stand-in
    on another port, so another origin, that records every request it gets."""
    with FakeWhasp(api_key="whasp-test-key") as server:
        yield server


def key_sent_to(server: FakeWhasp) -> list[dict[str, Any]]:
    return [r for r in server.requests if "whasp-test-key" in r["headers"].get("authorization", "")]


def photo_is_noted_and_answered(consumer, resources, whasp, url: str, lambda_context) -> None:
    assert failures(consumer.handler(sqs_batch(photo(url)), lambda_context)) == []
    assert [t for r, t in turns(resources.table_name) if r == "user"] == [PHOTO_NOTE]
    assert len(whasp.texts_to(MAYA)) == 1


# ------------------------------------------------------------------ the allow-list


def test_media_on_whasps_own_origin_is_fetched_with_the_key(
    consumer, resources, openai, whasp, lambda_context
):
    openai.responder = lambda request: "A shoe." if "input_image" in str(request["input"]) else "Hi"
    url = whasp.add_media(b"\x89PNG....", "image/png")
    assert failures(consumer.handler(sqs_batch(photo(url)), lambda_context)) == []
    assert [t for r, t in turns(resources.table_name) if r == "user"] == ["[photo: A shoe.]"]
    [download] = [r for r in whasp.requests if r["path"].startswith("/media/")]
    assert download["headers"]["authorization"] == "Bearer whasp-test-key"


def test_media_on_another_host_is_not_fetched_and_the_message_is_answered(
    consumer, resources, whasp, elsewhere, lambda_context
):
    # given a signed event whose media URL points at a host that is not whasp's
    url = elsewhere.add_media(b"\x89PNG....", "image/png")
    # when the consumer handles it, then the photo is remembered as unavailable and answered
    photo_is_noted_and_answered(consumer, resources, whasp, url, lambda_context)
    # and the other host saw no request at all, so never the key
    assert elsewhere.requests == []


def test_a_media_url_with_surrounding_whitespace_is_checked_and_fetched_as_one_url(
    consumer, resources, openai, whasp, lambda_context
):
    # given whasp's own media URL with whitespace around it (the check strips it)
    openai.responder = lambda request: "A shoe." if "input_image" in str(request["input"]) else "Hi"
    url = " \t" + whasp.add_media(b"\x89PNG....", "image/png") + "\n"
    # then the request goes to the very URL that was checked, and the photo is described
    assert failures(consumer.handler(sqs_batch(photo(url)), lambda_context)) == []
    assert [t for r, t in turns(resources.table_name) if r == "user"] == ["[photo: A shoe.]"]
    [download] = [r for r in whasp.requests if r["path"].startswith("/media/")]
    assert download["headers"]["authorization"] == "Bearer whasp-test-key"


@pytest.mark.parametrize(
    "spoil",
    [
        lambda url: url.replace("http://", "https://"),  # whasp's host and port, another scheme
        lambda url: url.replace("127.0.0.1", "localhost"),  # the same machine, another host name
        lambda url: url.replace("http://", "http://whasp-test-key@"),  # credentials in the URL
        lambda url: url.replace("http://", "file://"),
        lambda url: "ftp://127.0.0.1/media/med_1",
    ],
    ids=["https", "localhost", "userinfo", "file", "ftp"],
)
def test_media_on_another_origin_is_not_fetched(consumer, resources, whasp, lambda_context, spoil):
    url = spoil(whasp.add_media(b"\x89PNG....", "image/png"))
    photo_is_noted_and_answered(consumer, resources, whasp, url, lambda_context)
    assert [r for r in whasp.requests if r["path"].startswith("/media/")] == []


def test_a_configured_extra_origin_is_fetched_without_the_key(
    consumer_env, resources, whasp, elsewhere, monkeypatch, lambda_context
):
    # given the operator allows a second origin (say, whasp's CDN) besides WHASP_API_URL's
    consumer = load_function(
        "consumer",
        {**consumer_env, "WHASP_MEDIA_ORIGINS": f"{whasp.url}, {elsewhere.url}"},
        monkeypatch,
    )
    url = elsewhere.add_media(b"\x89PNG....", "image/png")
    # when a photo on it arrives (this stand-in wants the key, so it answers 401)
    photo_is_noted_and_answered(consumer, resources, whasp, url, lambda_context)
    # then it was asked, but never given whasp's key
    assert len(elsewhere.requests) == 1
    assert key_sent_to(elsewhere) == []


class Redirector(LoopbackServer):
    """whasp's media endpoint answering with a redirect to `location`."""

    def __init__(self, location: str) -> None:
        super().__init__()
        self.location = location
        self.requests: list[Request] = []

    def handle(self, request: Request) -> Reply:
        self.requests.append(request)
        return Reply(302, b"", {"Location": self.location})


def test_a_redirect_off_the_allow_list_is_not_followed(
    consumer_env, resources, whasp, elsewhere, monkeypatch, lambda_context
):
    target = elsewhere.add_media(b"\x89PNG....", "image/png")
    with Redirector(target) as redirector:
        consumer = load_function(
            "consumer", {**consumer_env, "WHASP_MEDIA_ORIGINS": redirector.url}, monkeypatch
        )
        photo_is_noted_and_answered(
            consumer, resources, whasp, f"{redirector.url}/media/x", lambda_context
        )
        assert len(redirector.requests) == 1
    assert elsewhere.requests == []


def test_a_bad_origin_setting_is_a_clear_error_naming_it(consumer_env, monkeypatch):
    from memagent.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="WHASP_MEDIA_ORIGINS"):
        load_function(
            "consumer", {**consumer_env, "WHASP_MEDIA_ORIGINS": "media.example.com"}, monkeypatch
        )


# ------------------------------------------------------------------ size and time


def test_media_over_the_cap_is_refused_while_streaming(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", {**consumer_env, "MEDIA_MAX_BYTES": "1000"}, monkeypatch)
    url = whasp.add_media(b"x" * 5000, "image/png")
    photo_is_noted_and_answered(consumer, resources, whasp, url, lambda_context)


class Trickler:
    """A host that answers 200 with a large Content-Length, then sends one byte every 10 ms;
    counts what it managed to send before the client hung up."""

    def __init__(self, total: int = 5000, every: float = 0.01) -> None:
        self.total, self.every = total, every
        self.sent = 0
        self.hung_up = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> Trickler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._listener.close()

    def _serve(self) -> None:
        connection, _ = self._listener.accept()
        with connection:
            connection.recv(65536)  # the request
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\n"
                + f"Content-Length: {self.total}\r\n\r\n".encode()
            )
            try:
                for _ in range(self.total):
                    connection.sendall(b"x")
                    self.sent += 1
                    time.sleep(self.every)
            except OSError:
                pass
            self.hung_up.set()


def test_a_host_that_trickles_bytes_is_cut_off_at_the_deadline(
    consumer_env, resources, whasp, monkeypatch, lambda_context
):
    # given whasp's media host sends one byte every 10 ms (50 s for the whole file)
    with Trickler() as trickler:
        consumer = load_function(
            "consumer",
            {**consumer_env, "WHASP_MEDIA_ORIGINS": trickler.url, "MEDIA_DEADLINE_SECONDS": "0.3"},
            monkeypatch,
        )
        batch = sqs_batch(photo(f"{trickler.url}/media/slow"))
        # when the consumer downloads it, then it gives up at the 0.3 s deadline: the record is
        # retried later (a slow whasp is an outage, not a bad file), and nothing is stored yet
        assert attempt(consumer, batch, lambda_context) == [batch["Records"][0]["messageId"]]
        assert turns(resources.table_name) == []
        assert whasp.sent == []
        # and the host was hung up on long before it could send the whole file
        assert trickler.hung_up.wait(timeout=60)
    assert 0 < trickler.sent < trickler.total // 2
