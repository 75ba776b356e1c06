"""memagent.providers.meta on payloads exactly as the `pywa` library's fixtures hold them
(tests/data/updates/*.json: message.json "text" and "voice", system.json, message_status.json):
cut into queued units by the webhook's parser, then parsed back by the consumer's."""

from __future__ import annotations

import json

import pytest

from memagent.errors import BadRequest, InvalidSignature, MalformedEvent
from memagent.providers.meta import (
    answer_challenge,
    parse_event,
    parse_notification,
    sign,
    verify_signature,
)
from memagent.providers.seam import IdentityChanged, InboundMessage, ReplyStatus

METADATA = {"display_phone_number": "972123456789", "phone_number_id": "1122334455667"}
CONTACT = {
    "profile": {"name": "Test Name"},
    "wa_id": "972987654321",
    "user_id": "US.13491208655302741918",
    "parent_user_id": "US.ENT.11815799212886844830",
}


def notification(value: dict) -> dict:
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "1234567890987654321",
                "changes": [
                    {"value": {"messaging_product": "whatsapp", **value}, "field": "messages"}
                ],
            }
        ],
    }


PYWA_TEXT = notification(
    {
        "metadata": METADATA,
        "contacts": [CONTACT],
        "messages": [
            {
                "from": "972987654321",
                "id": "wamid.xyzxyz",
                "timestamp": "1697043223",
                "text": {"body": "Body Text"},
                "type": "text",
            }
        ],
    }
)
PYWA_VOICE = notification(
    {
        "metadata": METADATA,
        "contacts": [CONTACT],
        "messages": [
            {
                "from": "972987654321",
                "id": "wamid.xyzxyz",
                "timestamp": "1697043473",
                "type": "audio",
                "audio": {
                    "mime_type": "audio/ogg; codecs=opus",
                    "sha256": "E3dxS/PdYZE7ppA3pQ4mpCFaXBJ8pX4SRN/dsfvds/iPGA=",
                    "id": "1234567890987654321",
                    "voice": True,
                },
            }
        ],
    }
)
PYWA_NUMBER_CHANGE = notification(
    {
        "metadata": METADATA,
        "messages": [
            {
                "from": "972987654321",
                "id": "wamid.xyzxyz==",
                "timestamp": "1753851315",
                "system": {
                    "body": "User A changed from 972987654321 to 972912345678",
                    "wa_id": "972912345678",
                    "type": "user_changed_number",
                },
                "type": "system",
            }
        ],
    }
)
PYWA_SENT_WITH_TRACKER = notification(
    {
        "metadata": METADATA,
        "contacts": [CONTACT],
        "statuses": [
            {
                "id": "wamid.xyzxyz",
                "status": "sent",
                "timestamp": "1698266945",
                "recipient_id": "972987654321",
                "biz_opaque_callback_data": "reply:wamid.inbound123:0",
                "conversation": {
                    "id": "7270432eae37498234f4444b35ffc5",
                    "expiration_timestamp": "1698339900",
                    "origin": {"type": "service"},
                },
                "pricing": {"billable": True, "pricing_model": "CBP", "category": "service"},
            }
        ],
    }
)


def queued(payload: dict) -> list:
    return parse_notification(json.dumps(payload).encode(), max_bytes=256 * 1024).envelopes


def test_a_text_is_keyed_by_its_bsuid_with_the_phone_as_alias_and_reply_address():
    [envelope] = queued(PYWA_TEXT)
    # queued in the phone's FIFO group (present on both sides of the BSUID rollout), keyed by
    # the BSUID in memory
    assert (envelope.id, envelope.chat) == ("wamid.xyzxyz", "+972987654321")
    message = parse_event(envelope.raw)
    assert isinstance(message, InboundMessage)
    assert (message.chat, message.aliases) == ("US.13491208655302741918", ("+972987654321",))
    assert (message.address, message.number) == ("+972987654321", "1122334455667")
    assert (message.kind, message.text, message.sent_at.year) == ("text", "Body Text", 2023)


def test_a_voice_note_carries_its_media_id():
    message = parse_event(queued(PYWA_VOICE)[0].raw)
    assert message.kind == "audio"
    assert (message.media.url, message.media.mime_type) == (
        "1234567890987654321",
        "audio/ogg; codecs=opus",
    )


def test_a_phone_number_change_is_an_identity_change():
    [envelope] = queued(PYWA_NUMBER_CHANGE)
    event = parse_event(envelope.raw)
    assert isinstance(event, IdentityChanged)
    assert (event.previous, event.current) == (("+972987654321",), ("+972912345678",))


def test_a_sent_status_with_our_callback_data_is_queued_in_a_group_of_its_own():
    [envelope] = queued(PYWA_SENT_WITH_TRACKER)
    assert envelope.chat == "status:+972987654321" and envelope.id == "wamid.xyzxyz:sent"
    status = parse_event(envelope.raw)
    assert isinstance(status, ReplyStatus)
    assert (status.key, status.status, status.message_id) == (
        "reply:wamid.inbound123:0",
        "sent",
        "wamid.xyzxyz",
    )


def test_statuses_without_our_callback_data_are_not_queued():
    payload = json.loads(json.dumps(PYWA_SENT_WITH_TRACKER))
    del payload["entry"][0]["changes"][0]["value"]["statuses"][0]["biz_opaque_callback_data"]
    parsed = parse_notification(json.dumps(payload).encode(), max_bytes=10_000)
    assert (parsed.envelopes, parsed.ignored) == ([], 1)


def test_signature_over_the_raw_bytes_in_constant_form():
    body = json.dumps(PYWA_TEXT).encode()
    verify_signature("s3cret", {"X-Hub-Signature-256": sign("s3cret", body)}, body)
    for headers in (
        {},
        {"x-hub-signature-256": sign("other", body)},
        {"x-hub-signature-256": sign("s3cret", body).upper()},  # Meta sends lowercase hex
        {"x-hub-signature-256": sign("s3cret", body).removeprefix("sha256=")},
    ):
        with pytest.raises(InvalidSignature):
            verify_signature("s3cret", headers, body)
    with pytest.raises(InvalidSignature):  # a missing app secret fails closed
        verify_signature("", {"x-hub-signature-256": sign("", body)}, body)


def test_challenge_and_bad_bodies():
    params = {"hub.mode": "subscribe", "hub.verify_token": "tok", "hub.challenge": "42"}
    assert answer_challenge("tok", params) == "42"
    with pytest.raises(InvalidSignature):
        answer_challenge("tok", {**params, "hub.verify_token": "nope"})
    for body in (b"not json", b"[]", json.dumps({"object": "page", "entry": []}).encode()):
        with pytest.raises(BadRequest):
            parse_notification(body, max_bytes=1000)
    with pytest.raises(BadRequest):
        parse_notification(json.dumps(PYWA_TEXT).encode(), max_bytes=10)
    with pytest.raises(MalformedEvent):
        parse_event({"object": "whatsapp_business_account", "entry": []})
