"""The provider seam's pure parts: reply parts, send keys, headers and bodies."""

from __future__ import annotations

import pytest
import urllib3

from memagent.errors import BadRequest, TransientError
from memagent.providers.seam import (
    header,
    idempotency_key,
    json_body,
    parse_send_key,
    post_with_fresh_key,
    shorten,
    split_text,
)

# ------------------------------------------------------------------ reply parts


def test_a_reply_within_the_limit_is_one_part_without_its_outer_whitespace():
    # given a reply of exactly the limit once stripped
    # when it is split
    # then it is one part, as written
    assert split_text("  " + "a" * 10 + "\n", limit=10) == ["a" * 10]


def test_a_reply_that_fits_is_not_split_at_a_space():
    assert split_text("abcde fghi", limit=10) == ["abcde fghi"]


def test_an_empty_reply_has_no_parts():
    assert split_text(" \n ", limit=10) == []


def test_a_long_reply_breaks_at_its_last_paragraph_not_its_last_word():
    # given a reply whose first paragraph ends in the second half of the limit, followed by
    # words that would fit the limit
    text = "First paragraph here.\n\nSecond one with words"
    # when it is split at 30 characters
    parts = split_text(text, limit=30)
    # then the first message is the whole first paragraph, the second the rest
    assert parts == ["First paragraph here.", "Second one with words"]


def test_a_paragraph_break_wins_over_a_later_line_break():
    text = "First paragraph ends.\n\nA line\nand more words"
    assert split_text(text, limit=35) == ["First paragraph ends.", "A line\nand more words"]


def test_without_a_paragraph_break_a_line_break_wins_over_a_later_space():
    text = "A line that ends.\nthen more words"
    assert split_text(text, limit=25) == ["A line that ends.", "then more words"]


def test_without_line_breaks_a_reply_breaks_between_words():
    text = "one two three four five six"
    assert split_text(text, limit=14) == ["one two three", "four five six"]


def test_a_paragraph_break_in_the_first_half_gives_way_to_a_later_space():
    # given a paragraph break so early that its part would be a fragment
    text = "Hi.\n\nThis sentence is long enough"
    # when it is split at 20 characters
    # then it breaks at the last space in the window instead
    assert split_text(text, limit=20) == ["Hi.\n\nThis sentence", "is long enough"]


def test_a_break_just_past_the_limit_still_ends_a_full_part():
    assert split_text("abcdefghij klm", limit=10) == ["abcdefghij", "klm"]


def test_a_reply_with_no_break_near_the_limit_is_cut_at_the_limit():
    # given a reply with no whitespace in the second half of each window (a long URL)
    text = "see https://example.com/" + "x" * 40
    # when it is split at 20 characters
    parts = split_text(text, limit=20)
    # then the parts are cut hard at the limit, and nothing is lost
    assert parts == ["see https://example.", "com/xxxxxxxxxxxxxxxx", "x" * 20, "x" * 4]


def test_a_space_exactly_half_way_is_a_break_and_one_before_is_not():
    # the half-way rule at its edge: limit 10, a space at index 5 is used, at index 4 it is not
    assert split_text("abcde fghijkl", limit=10) == ["abcde", "fghijkl"]
    assert split_text("abcd efghijklmn", limit=10) == ["abcd efghi", "jklmn"]
    # and for an odd limit, half is rounded down: limit 11, a space at index 5 is used
    assert split_text("abcde fghijkl", limit=11) == ["abcde", "fghijkl"]


def test_later_parts_start_and_end_without_whitespace():
    # given a reply whose breaks are runs of spaces and blank lines
    text = "word " * 3 + "   \n\n   " + "next " * 3 + "  \n  end"
    # when it is split
    parts = split_text(text, limit=16)
    # then no part starts or ends with whitespace
    assert parts == ["word word word", "next next next", "end"]


# ------------------------------------------------------------------ a reply over its parts


def test_a_reply_within_its_parts_is_sent_as_written():
    text = " ".join(["word"] * 7)  # 34 characters: two parts of 20
    assert shorten(text, 2, limit=20) == text


def test_a_reply_over_its_parts_is_cut_at_a_word_with_an_ellipsis():
    # given 20 words, five parts of 20 characters, and room for two
    # then it ends at the last word that leaves room for the mark, in two parts
    shortened = shorten(" ".join(["word"] * 20), 2, limit=20)
    assert shortened == "word word word word word word word \u2026"
    assert split_text(shortened, limit=20) == ["word word word word", "word word word \u2026"]


def test_a_reply_without_spaces_over_its_parts_is_cut_hard():
    assert shorten("x" * 100, 2, limit=20) == "x" * 38 + " \u2026"


def test_a_reply_whose_cut_still_needs_more_parts_is_cut_shorter():
    # given words of 11 characters: each part of 20 holds one
    text = " ".join(["a" * 11] * 5)
    # then the cut moves back until the words and the mark fit two parts
    assert shorten(text, 2, limit=20) == "aaaaaaaaaaa aaaaaaaaaaa \u2026"


# ------------------------------------------------------------------ send keys


def test_the_send_key_names_the_event_and_the_part():
    assert idempotency_key("evt_1", 0) == "reply:evt_1:0"
    assert idempotency_key("evt_1", 12) == "reply:evt_1:12"


def test_a_send_key_at_whasps_limit_is_kept_and_one_over_it_is_hashed():
    # given event ids that make a key of exactly 255 characters, and of 256
    at_limit = "evt_" + "x" * 243
    over = "evt_" + "x" * 244
    # then the first is used as it is, the second by its hash (whasp refuses longer keys)
    assert idempotency_key(at_limit, 0) == f"reply:{at_limit}:0"
    assert idempotency_key(over, 3) == (
        "reply:ccec6be8bd0a8a0c776ed1d3100f10b95aa745a731d96761e88fbba4e06ecc5a:3"
    )


def test_a_send_key_is_read_back_into_its_event_and_part():
    assert parse_send_key("reply:evt_1:0") == ("evt_1", 0)
    assert parse_send_key("reply:evt:with:colons:9999") == ("evt:with:colons", 9999)


@pytest.mark.parametrize(
    "key", ["reply:evt_1:12345", "reply::1", "reply:evt_1:", "xreply:evt_1:1", "reply:evt_1:1\n"]
)
def test_keys_we_did_not_make_are_not_read_as_ours(key):
    assert parse_send_key(key) is None


# ------------------------------------------------------------------ requests


def test_a_header_is_found_whatever_its_case():
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": "sha256=ab"}
    assert header(headers, "x-hub-signature-256") == "sha256=ab"
    assert header(headers, "content-type") == "application/json"


def test_a_missing_or_non_text_header_is_none():
    assert header(None, "x-a") is None
    assert header({"x-b": "1"}, "x-a") is None
    assert header({"x-a": ["1"]}, "x-a") is None
    assert header({1: "1", "X-A": "2"}, "x-a") == "2"


def test_a_body_up_to_the_limit_is_parsed():
    body = b'{"a": 1}'
    assert json_body(body, max_bytes=len(body)) == {"a": 1}


def test_a_body_over_the_limit_is_refused_before_parsing():
    with pytest.raises(BadRequest, match=r"^body too large$"):
        json_body(b'{"a": 1}', max_bytes=7)


@pytest.mark.parametrize("body", [b"not json", b'{"a": "\xff"}'])
def test_a_body_that_is_not_json_is_a_bad_request(body):
    with pytest.raises(BadRequest, match=r"^body is not JSON we accept$"):
        json_body(body, max_bytes=100)


# ------------------------------------------------------------------ a refused key


class Answers:
    """A urllib3 PoolManager's stand-in: answers each POST with the next of `statuses` (an
    exception is raised), noting the headers each was sent with."""

    def __init__(self, *statuses):
        self.statuses, self.sent = list(statuses), []

    def request(self, method, url, *, body, headers):
        self.sent.append(headers)
        answer = self.statuses.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return type("Response", (), {"status": answer})()


def post(http):
    return post_with_fresh_key(
        http,
        "https://api.example/v1/messages",
        b"{}",
        lambda fresh: {"Authorization": "fresh" if fresh else "cached"},
        refused=lambda response: response.status == 401,
        name="whasp",
        dependency="whasp",
    )


def test_a_refused_key_is_read_again_past_the_cache_and_tried_once_more():
    # given the cached key refused, and the key read again accepted
    http = Answers(401, 200)
    # then the send goes again, once, with the key read past the cache, and its answer is kept
    assert post(http).status == 200
    assert [h["Authorization"] for h in http.sent] == ["cached", "fresh"]


def test_an_accepted_key_is_sent_once_and_a_key_refused_twice_is_the_callers_to_name():
    assert post(http := Answers(200)).status == 200 and len(http.sent) == 1
    assert post(http := Answers(401, 401)).status == 401 and len(http.sent) == 2


def test_an_unreachable_api_is_a_transient_error_naming_the_provider_and_not_retried():
    http = Answers(urllib3.exceptions.ProtocolError("reset"), 200)
    with pytest.raises(TransientError, match="whasp unreachable: ProtocolError"):
        post(http)
    assert len(http.sent) == 1
