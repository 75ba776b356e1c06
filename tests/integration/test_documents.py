"""Documents read (issue 43, item 2), through the webhook and consumer handlers: a PDF sent on
Meta (the Graph stand-in serving it by its media id, as Meta's lookup and download do) or a
plain-text file on whasp is read, and its text is the person's message the model reads next;
an encrypted, oversized or unreadable file is answered with a fixed reply in the person's
language, without the model; the file is kept only in the media bucket, between attempts,
under what its lifecycle rule expires, and nothing else keeps its bytes."""

from __future__ import annotations

import base64
from typing import Any

import boto3
import pytest

from devstack.events import meta_contact, meta_message, meta_notification
from devstack.pdf import pdf
from devstack.resources import load_template
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function, sqs_batch, whasp_message
from tests.integration import test_meta
from tests.integration.faults import crash_after
from tests.integration.test_consumer import at, failures, turns
from tests.integration.test_meta import MAYA_BSUID, MAYA_PHONE, NOW, memory_rows, post

webhook, queue = test_meta.webhook, test_meta.queue
graph, graph_server = test_meta.graph, test_meta.graph_server

PRICES = [
    "Coaching price list",
    "Long run plan: 40 EUR a month",
    "Race day kit (with gels): 25 EUR",
]
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
REFUSALS = {
    "encrypted": "Sorry, that file is protected with a password",
    "too_large": "Sorry, that file is too large for me to read",
    "unreadable": "Sorry, I couldn't read any text in that file",
}


@pytest.fixture
def media_bucket(resources) -> str:
    bucket = f"{resources.table_name}-media"  # the template's MediaBucket
    boto3.client("s3").create_bucket(Bucket=bucket)
    return bucket


meta_consumer_env = test_meta.meta_consumer_env  # a fixture


@pytest.fixture
def meta_env(meta_consumer_env, media_bucket) -> dict[str, str]:
    return {**meta_consumer_env, "MEDIA_BUCKET": media_bucket, "DOCUMENT_MAX_BYTES": "20000"}


@pytest.fixture
def consumer(meta_env, monkeypatch) -> Any:
    return load_function("consumer", meta_env, monkeypatch)


def document_in(
    graph, data: bytes, *, name: str = "prices.pdf", mime: str = "application/pdf", at: int = NOW
) -> dict[str, Any]:
    """Meta's webhook for a document Maya sent: its media id, type, sha256 and file name."""
    media_id = graph.add_media(data, mime)
    body = {"id": media_id, "mime_type": mime, "sha256": "c2hhMjU2", "filename": name}
    message = meta_message(
        phone=MAYA_PHONE, bsuid=MAYA_BSUID, kind="document", body=body, timestamp=at
    )
    return meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], messages=[message]
    )


def text_in(words: str, at: int) -> dict[str, Any]:
    message = meta_message(words, phone=MAYA_PHONE, bsuid=MAYA_BSUID, timestamp=at)
    return meta_notification(
        contacts=[meta_contact(phone=MAYA_PHONE, bsuid=MAYA_BSUID)], messages=[message]
    )


def said_by_maya(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["input"] if m.get("role") == "user"]


def kept_objects(bucket: str) -> list[dict[str, Any]]:
    return boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])


def test_a_pdfs_text_reaches_the_model_and_the_next_answer_uses_it(
    webhook, queue, consumer, graph, openai, resources, lambda_context
):
    # given Maya sends her coach's price list as a PDF
    assert post(webhook, document_in(graph, pdf(PRICES)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then memory keeps it as her message, the file named, its text in it
    [stored] = [r["text"] for r in memory_rows(resources, MAYA_BSUID) if r.get("role") == "user"]
    assert stored == '[sent "prices.pdf": ' + "\n".join(PRICES) + "]"
    # and the model request answering it carries that text
    assert said_by_maya(openai.calls()[-1]) == [stored]
    # when she asks about it next
    assert post(webhook, text_in("How much is the long run plan?", NOW + 60), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then the next request carries the price list before her question, and the answer uses it
    assert said_by_maya(openai.calls()[-1]) == [stored, "How much is the long run plan?"]
    assert "40 EUR" in graph.texts_to(MAYA_PHONE)[-1]


def test_only_the_first_pages_are_read_and_the_text_is_cut_to_its_cap(
    webhook, queue, resources, meta_env, graph, monkeypatch, lambda_context
):
    consumer = load_function(
        "consumer",
        {**meta_env, "DOCUMENT_MAX_PAGES": "2", "DOCUMENT_MAX_CHARS": "200"},
        monkeypatch,
    )
    pages = [[f"Page {n} line {i}: " + "x" * 20 for i in range(5)] for n in range(1, 5)]
    assert post(webhook, document_in(graph, pdf(*pages)), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    [stored] = [r["text"] for r in memory_rows(resources, MAYA_BSUID) if r.get("role") == "user"]
    assert stored.startswith('[sent "prices.pdf" (its first 2 of 4 pages): Page 1 line 0')
    assert "Page 3" not in stored and stored.endswith(" [...]]")
    assert len(stored) <= 200 + len('[sent "prices.pdf" (its first 2 of 4 pages): ]')


@pytest.mark.parametrize(
    ("what", "data", "name", "mime"),
    [
        ("encrypted", pdf(PRICES, password="s3cret"), "statement.pdf", "application/pdf"),
        ("too_large", pdf(*[PRICES * 40] * 12), "catalogue.pdf", "application/pdf"),
        ("unreadable", b"%PDF-1.7\n" + b"\x00garbage" * 200, "broken.pdf", "application/pdf"),
        ("unreadable", pdf([]), "scan.pdf", "application/pdf"),  # no text: a scan
        ("unreadable", b"PK\x03\x04" + b"\x00" * 100, "notes.docx", DOCX),
    ],
)
def test_a_file_not_read_gets_the_fixed_reply_and_no_model_call(
    webhook, queue, consumer, graph, openai, resources, lambda_context, what, data, name, mime
):
    # given a file the agent cannot read (the too large one over DOCUMENT_MAX_BYTES=20000)
    assert (len(data) > 20_000) is (what == "too_large")
    # when Maya sends it
    assert post(webhook, document_in(graph, data, name=name, mime=mime), lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then she gets exactly one reply, which says so, and the model was not asked
    [reply] = graph.texts_to(MAYA_PHONE)
    assert reply.startswith(REFUSALS[what])
    assert openai.calls("/v1/responses") == []
    # and memory keeps what she sent, and why it was not read, never the file
    [stored] = [r["text"] for r in memory_rows(resources, MAYA_BSUID) if r.get("role") == "user"]
    assert stored.startswith(f'[sent "{name}", not read: ')


def test_the_refusal_is_in_her_language(webhook, queue, consumer, graph, openai, lambda_context):
    # given Maya writes in Spanish, then sends a locked PDF
    assert post(webhook, text_in("Hola, ¿cómo está usted?", NOW), lambda_context) == 200
    locked = document_in(graph, pdf(PRICES, password="s3cret"), at=NOW + 60)
    assert post(webhook, locked, lambda_context) == 200
    assert queue.drain(consumer, lambda_context) == 0
    # then the refusal is the Spanish one
    assert graph.texts_to(MAYA_PHONE)[-1].startswith("Perdone, ese archivo está protegido")


def test_a_plain_text_file_on_whasp_is_read(
    consumer_env, resources, openai, whasp, monkeypatch, lambda_context
):
    consumer = load_function("consumer", consumer_env, monkeypatch)
    url = whasp.add_media(b"Shopping list\nBananas\nOat milk\n", "text/plain")
    event = whasp_message(
        "",
        chat=MAYA,
        created_at=at(0),
        event_id="evt_list",
        message={
            "id": "msg_list",
            "type": "document",
            "timestamp": at(0),
            "media": {"url": url, "mime_type": "text/plain; charset=utf-8", "size": 30},
            "caption": "for Saturday",
        },
    )
    assert failures(consumer.handler(sqs_batch(event), lambda_context)) == []
    # whasp names no file: "a document"; the caption follows the note
    expected = "[sent a document: Shopping list\nBananas\nOat milk] for Saturday"
    assert [t for r, t in turns(resources.table_name) if r == "user"] == [expected]
    assert said_by_maya(openai.calls()[-1]) == [expected]
    assert len(whasp.texts_to(MAYA)) == 1


# ------------------------------------------------------------------ the file's life


def test_the_file_is_kept_only_where_the_media_lifecycle_expires_it_and_only_until_read(
    webhook, queue, consumer, graph, resources, media_bucket, lambda_context, monkeypatch
):
    # given the turn crashes after the PDF was downloaded and kept, before its text is stored
    data = pdf(PRICES)
    agent = consumer.consumer.agent
    crash_after(agent.media, "put", monkeypatch)
    assert post(webhook, document_in(graph, data), lambda_context) == 200
    assert queue.deliver(consumer, lambda_context) == 1
    # then the one copy is in the media bucket, under the person's key, which the bucket's
    # lifecycle rule expires: every object, no filter, after 2 days (template.yaml MediaBucket)
    [kept] = kept_objects(media_bucket)
    assert kept["Key"].startswith(person_key(AGENT, MAYA_BSUID) + "/")
    [rule] = load_template()["Resources"]["MediaBucket"]["Properties"]["LifecycleConfiguration"][
        "Rules"
    ]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] == 2
    assert "Filter" not in rule and "Prefix" not in rule  # it covers every key
    # when the record is retried: the kept copy is read, not downloaded again
    downloads = [r for r in graph.requests if r["path"].startswith("/download/")]
    assert queue.drain(consumer, lambda_context) == 0
    assert [r for r in graph.requests if r["path"].startswith("/download/")] == downloads
    # then one message and one reply, and the copy is gone once its text is stored
    assert len(graph.texts_to(MAYA_PHONE)) == 1
    assert kept_objects(media_bucket) == []
    # and nothing in her memory holds the file's bytes, raw or in base64
    rows = repr(memory_rows(resources, MAYA_BSUID))
    assert "%PDF" not in rows and base64.b64encode(data[:48]).decode()[:40] not in rows


@pytest.mark.parametrize("method", ["remember_inbound", "remember_reply", "finish_event"])
def test_a_crash_after_the_download_neither_stores_twice_nor_replies_twice(
    webhook, queue, consumer, graph, resources, media_bucket, lambda_context, monkeypatch, method
):
    crash_after(consumer.consumer.agent.store, method, monkeypatch)
    assert post(webhook, document_in(graph, pdf(PRICES)), lambda_context) == 200
    assert queue.deliver(consumer, lambda_context) == 1
    assert queue.drain(consumer, lambda_context) == 0
    rows = memory_rows(resources, MAYA_BSUID)
    assert len([r for r in rows if r.get("role") == "user"]) == 1
    assert len([r for r in rows if r.get("role") == "assistant"]) == 1
    assert len(graph.texts_to(MAYA_PHONE)) == 1
    assert kept_objects(media_bucket) == []


# ------------------------------------------------------------------ the stand-in


def test_the_graph_stand_in_carries_only_documents_meta_carries(graph):
    # Meta's supported document types, up to 100 MB; nothing else arrives as a document
    assert graph.add_media(b"%PDF-1.7", "application/pdf")
    assert graph.add_media(b"hello", "text/plain")
    with pytest.raises(ValueError, match="no document of type application/zip"):
        graph.add_media(b"PK\x03\x04", "application/zip")
    with pytest.raises(ValueError, match="1 byte to"):
        graph.add_media(b"%" * (100 * 1024 * 1024 + 1), "application/pdf")
