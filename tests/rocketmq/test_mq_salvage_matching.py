"""mq salvage's matching (store/rocketmq/salvage.py), offline: kept entries written as a
truncation keeps them (store/kept.py), a log written by the file store.

- A UNIQ_KEY is matched within its topic: RocketMQ keeps the producer's id on its own copies
  in other topics (a consumer's retry in %RETRY%<group>, a delayed message's re-put), so a
  cut retry whose original survives is still missing.
- A compressed body that inflates past the limit is a listed message with a note (never
  counted as "not a message"), left out of --out, and --max-body brings it back.
"""

from __future__ import annotations

import json
import os

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.rmq_encode import encode_message
from store.filestore import FileStore
from store.kept import kept_name, write_kept
from store.rocketmq.salvage import salvage

runner = CliRunner()


def _log(path: str, bodies: list[bytes]) -> str:
    with FileStore.open(path) as s:
        s.append_leader(bodies, 1)
    return path


def _kept(tmp_path, bodies: list[bytes]) -> str:
    """A kept file holding ``bodies`` as entries 10.. of term 2 (what a leader's cut keeps)."""
    src = str(tmp_path / "old" / "dledger-n1")
    with FileStore.open(src) as s:
        s.append_leader([b"pad"] * 10, 1)
        s.append_leader(bodies, 2)
        raws = [s.get_bytes(i) for i in range(10, 10 + len(bodies))]
    path = str(tmp_path / kept_name(10, 9 + len(bodies), 1_700_000_000.0))
    write_kept(path, raws)
    return path


def test_a_uniq_key_held_only_in_another_topic_is_missing(tmp_path):
    uniq = "7F00000100002A9F0000000000000001"
    original = encode_message(topic="Orders", body=b"order 1", properties={"UNIQ_KEY": uniq})
    retry = encode_message(topic="%RETRY%billing", body=b"order 1", properties={"UNIQ_KEY": uniq, "RETRY_TOPIC": "Orders"})
    node = _log(str(tmp_path / "dledger-n0"), [original])
    kept = _kept(tmp_path, [retry, original])
    result = salvage(kept, [node])
    by_topic = {k.message.topic: k for k in result.kept}
    assert by_topic["Orders"].held_by == ["dledger-n0"]  # (the same message, held)
    assert by_topic["%RETRY%billing"].held_by == []  # (the consumer's retry: cut, nobody has it)
    assert [k.message.topic for k in result.missing] == ["%RETRY%billing"]
    assert by_topic["Orders"].row()["matched_by"] == "topic+uniq_key"


def test_a_body_past_the_limit_is_listed_with_a_note_and_not_resent(tmp_path):
    big = os.urandom(64) * (80 * 1024)  # 5 MiB that compresses well: stored far below the limit
    stored = encode_message(topic="Big", body=big, compress="zlib", properties={"UNIQ_KEY": "AA01"})
    small = encode_message(topic="Small", body=b"tiny", properties={"UNIQ_KEY": "AA02"})
    node = _log(str(tmp_path / "dledger-n0"), [encode_message(topic="Other", body=b"x")])
    kept = _kept(tmp_path, [stored, small])
    out = str(tmp_path / "resend.jsonl")
    r = runner.invoke(app, ["mq", "salvage", kept, "--against", node, "--out", out, "--format", "json"])
    assert r.exit_code == 1, r.output  # (messages are missing)
    rows = {x["topic"]: x for x in json.loads(r.stdout)}
    assert set(rows) == {"Big", "Small"} and rows["Big"]["status"] == "missing"
    assert rows["Big"]["body_size"] is None and "--max-body" in rows["Big"]["note"]
    assert "not messages" not in r.stderr and "1 missing with a body past the limit" in r.stderr
    with open(out) as fh:
        assert [json.loads(line)["topic"] for line in fh] == ["Small"]
    out2 = str(tmp_path / "resend2.jsonl")
    r = runner.invoke(app, ["mq", "salvage", kept, "--against", node, "--out", out2, "--max-body", "8MiB",
                            "--format", "json"])
    assert r.exit_code == 1, r.output
    assert {x["topic"]: x["body_size"] for x in json.loads(r.stdout)} == {"Big": len(big), "Small": 4}
    with open(out2) as fh:
        assert sorted(json.loads(line)["topic"] for line in fh) == ["Big", "Small"]
