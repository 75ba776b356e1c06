"""The optional transcript archive: exported and erased with the rest of a person's memory; under
races, a compaction that loses to an erasure leaves no archived copy, and two racing compactions
leave exactly the winner's. moto's S3 and DynamoDB over HTTP, the model on the local stand-in,
the functions as their handler modules build them."""

from __future__ import annotations

import base64
import json
import runpy
import sys
import threading
from pathlib import Path
from typing import Any

import boto3
import pytest

from memagent.lifecycle.rights import Elsewhere, forget
from memagent.memory.person import person_key
from tests.conftest import AGENT, MAYA, load_function, seed_turns
from tests.integration.test_lifecycle import admin_event


@pytest.fixture
def bucket(resources) -> str:
    name = f"archive-{resources.table_name}".lower()
    boto3.client("s3").create_bucket(Bucket=name)
    return name


@pytest.fixture
def compactor(compactor_env, bucket, monkeypatch) -> Any:
    module = load_function("compactor", {**compactor_env, "ARCHIVE_BUCKET": bucket}, monkeypatch)
    return module.compactor


def archived(bucket: str) -> list[str]:
    return [o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket).get("Contents", [])]


def fold(summary: str = "Maya starts a new job.") -> str:
    return json.dumps({"summary": summary, "facts": ["Starts a new job on Monday"]})


def test_a_compaction_losing_to_an_erasure_during_the_fold_leaves_no_archive_object(
    compactor, bucket, openai
):
    # given Maya has 45 turns and the operator archives transcripts
    seed_turns(compactor.store, MAYA, [f"turn {i}" for i in range(45)])

    def erase_while_folding(request: dict[str, Any]) -> str:
        # the admin erases her
        forget(compactor.store, AGENT, MAYA, elsewhere=Elsewhere(archive=compactor.archive))
        return fold()

    openai.responder = erase_while_folding
    # when the compaction finishes its fold after the erasure
    assert compactor.compact(person_key(AGENT, MAYA)) == "lost_race"
    # then nothing of her transcript is left in the bucket
    assert archived(bucket) == []


def test_an_erasure_right_after_the_archive_write_is_seen_and_the_copy_withdrawn(
    compactor, bucket, openai, monkeypatch
):
    # given the erasure's sweep of the archive runs just before the compaction's write lands
    seed_turns(compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    openai.responder = lambda request: fold()
    put = compactor.archive.put

    def put_after_the_erasure(pk, turns):
        forget(compactor.store, AGENT, MAYA, elsewhere=Elsewhere(archive=compactor.archive))
        return put(pk, turns)

    monkeypatch.setattr(compactor.archive, "put", put_after_the_erasure)
    # when the compaction archives, then re-checks the erasure mark
    assert compactor.compact(person_key(AGENT, MAYA)) == "lost_race"
    # then it withdrew its own copy: the bucket is empty
    assert archived(bucket) == []


def test_two_racing_compactions_leave_the_winners_archive_object(compactor, bucket, openai):
    # given two compactions of Maya's memory that both fold the same 25 turns
    seed_turns(compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    both_folding = threading.Barrier(2, timeout=10)
    summaries = iter(["summary A", "summary B"])
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> str:
        with lock:
            summary = next(summaries)
        both_folding.wait()  # both have read the same memory before either commits
        return fold(summary)

    openai.responder = respond
    pk = person_key(AGENT, MAYA)
    decisions: list[str] = []
    threads = [
        threading.Thread(target=lambda: decisions.append(compactor.compact(pk))) for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # when one commits and the other loses and withdraws its copy
    assert sorted(decisions) == ["compacted", "lost_race"]
    # then exactly one transcript is archived: the winner's, covering the turns now folded
    [key] = archived(bucket)
    body = boto3.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()
    assert [turn["seq"] for turn in json.loads(body)] == list(range(1, 26))
    memory = compactor.store.load(pk)
    assert memory.summary is not None and memory.summary.text in ("summary A", "summary B")
    assert [turn.seq for turn in memory.turns] == list(range(26, 46))


# ------------------------------------------------------------------ export and erasure


@pytest.fixture
def folded(compactor, bucket, openai) -> Any:
    """Maya's 45 turns, 25 of them folded into the summary and archived."""
    openai.responder = lambda request: fold()
    seed_turns(compactor.store, MAYA, [f"turn {i}" for i in range(45)])
    assert compactor.compact(person_key(AGENT, MAYA)) == "compacted"
    assert len(archived(bucket)) == 1
    return compactor


def test_the_admin_export_includes_archived_transcripts(
    folded, resources, bucket, monkeypatch, lambda_context
):
    env = {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT, "ARCHIVE_BUCKET": bucket}
    admin = load_function("admin", env, monkeypatch)
    response = admin.handler(admin_event("GET", MAYA), lambda_context)
    assert response["statusCode"] == 200
    person = json.loads(response["body"])
    # the raw turns still in the table, and the folded ones from the archive: all 45
    [transcript] = person["archived_transcripts"]
    assert [m["text"] for m in transcript["messages"]] == [f"turn {i}" for i in range(25)]
    assert transcript["archived_at"]
    assert [m["seq"] for m in person["messages"]] == list(range(26, 46))
    assert person["kept_media"] == []


def test_the_command_line_tool_exports_and_erases_archived_transcripts(
    folded, resources, bucket, capsys
):
    script = str(Path(__file__).resolve().parents[2] / "scripts" / "people.py")
    common = [MAYA, "--table", resources.table_name, "--agent", AGENT, "--archive-bucket", bucket]
    outputs = {}
    for action in ("export", "forget"):
        sys.argv = [script, action, *common]
        with pytest.raises(SystemExit) as done:
            runpy.run_path(script, run_name="__main__")
        assert done.value.code == 0
        outputs[action] = json.loads(capsys.readouterr().out)
    assert len(outputs["export"]["archived_transcripts"]) == 1
    assert outputs["forget"]["by_kind"]["archived"] == 1
    assert archived(bucket) == []


def test_the_admin_export_includes_kept_media(resources, monkeypatch, lambda_context):
    # given a voice note kept between attempts (its text not stored yet)
    from memagent.aws.archive import KeptMedia

    media_bucket = f"media-{resources.table_name}".lower()
    boto3.client("s3").create_bucket(Bucket=media_bucket)
    KeptMedia(media_bucket).put(person_key(AGENT, MAYA), "evt_voice", b"OggS....", "audio/ogg")
    env = {"TABLE_NAME": resources.table_name, "AGENT_ID": AGENT, "MEDIA_BUCKET": media_bucket}
    admin = load_function("admin", env, monkeypatch)
    # when the operator exports Maya, then the file is in the export, bytes and all
    response = admin.handler(admin_event("GET", MAYA), lambda_context)
    [kept] = json.loads(response["body"])["kept_media"]
    assert kept["content_type"] == "audio/ogg"
    assert base64.b64decode(kept["content_base64"]) == b"OggS...."
    assert kept["bytes"] == 8 and kept["kept_at"]
