"""The fold's input is bounded whatever people write, and a fold the model refuses ends."""

from __future__ import annotations

import json
import re

from boto3.dynamodb.conditions import Key

from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, dynamodb_table, seed_turns
from tests.integration.test_compactor import fold_reply, run, state

MB = 1024 * 1024


def seqs(table_name: str) -> list[int]:
    """Every stored turn's seq, through all the Query's pages (100 KB turns fill 1 MB fast)."""
    table = dynamodb_table(table_name)
    condition = Key("pk").eq(person_key(AGENT, MAYA)) & Key("sk").begins_with("MSG#")
    found, start = [], {}
    while True:
        page = table.query(KeyConditionExpression=condition, ConsistentRead=True, **start)
        found += [int(i["seq"]) for i in page["Items"]]
        if "LastEvaluatedKey" not in page:
            return found
        start = {"ExclusiveStartKey": page["LastEvaluatedKey"]}


def transcript(fold_input: str) -> list[str]:
    """The turns' texts in a fold request's input (a line each: "Person (date): text")."""
    lines = re.split(r"Conversation to fold in[^\n]*:\n", fold_input, maxsplit=1)[1].splitlines()
    return [line.split("): ", 1)[1] for line in lines]


def test_42_messages_of_100_kb_fold_in_requests_under_1_mb(
    compactor, store, tap, resources, openai, lambda_context
):
    openai.responder = fold_reply()
    # given 42 messages of 100 KB each (pasted essays, or an attack on the fold's cost)
    seed_turns(store, MAYA, [f"{i:02d} " + "x" * 100_000 for i in range(42)])
    # when the stream runs the compactor
    assert run(compactor, tap.matching(), lambda_context) == []
    # then every model request of the fold stayed under 1 MB (in fact far under)
    requests = [r for r in openai.requests if r["path"] == "/v1/responses"]
    assert len(requests) == 2  # 22 turns, cut to 4,000 characters each: two parts
    assert all(len(json.dumps(r["json"]).encode()) < MB for r in requests)
    assert all(len(json.dumps(r["json"]).encode()) < 100_000 for r in requests)
    # and the marker moved, the oldest raw turns are gone, the newest 20 stay raw
    current = state(resources.table_name)
    assert int(current["marker"]) == 22
    assert seqs(resources.table_name) == list(range(23, 43))
    assert current["compaction_due"] is False


def test_a_fold_refused_twice_ends_committed_and_does_not_come_back(
    compactor, store, tap, resources, openai, lambda_context, capsys
):
    openai.responder = fold_reply()
    texts = [f"{i:02d} " + " ".join(["word"] * 100) for i in range(45)]  # 502 characters each
    seed_turns(store, MAYA, texts)
    records = tap.matching()
    # given the model refuses the fold for good, also on the shortened transcript
    openai.fail_next(2, status=400)
    # when the stream runs the compactor
    assert run(compactor, records, lambda_context) == []
    # then it ended: committed, the flag down, the folded turns gone, the refusal alarmed
    current = state(resources.table_name)
    assert int(current["marker"]) == 25
    assert current["compaction_due"] is False
    assert seqs(resources.table_name) == list(range(26, 46))
    out = capsys.readouterr().out
    assert '"FoldsRefused"' in out
    # and the second request was the same 25 turns, each shortened to 280 characters
    first, second = [
        transcript(r["json"]["input"]) for r in openai.requests if r["path"] == "/v1/responses"
    ]
    assert first == texts[:25]
    assert second == [text[:279] + "\u2026" for text in texts[:25]]
    # and a redelivery of the same records asks the model nothing more
    calls = len(openai.requests)
    assert run(compactor, records, lambda_context) == []
    assert len(openai.requests) == calls
