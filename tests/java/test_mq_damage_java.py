"""``mq migrate --skip-damaged`` proven with RocketMQ's own master-slave store (4.9.4 and 4.9.8:
tests/support/javarocketmq.py): a DLedger-mode store dledgerctl wrote (its entries hold
bodyCrcs), one message's KEYS value flipped (not under the message's BODYCRC), moved with
the damaged entry left out. RocketMQ's ``DefaultMessageStore`` opens the result, serves every
other message through getMessage at its queue offset (rolling past the left-out one's blank
unit, which serves nothing), and takes new messages on every queue at the next offset.
Skipped, saying why, when Java, a mirror or a Debian jar is missing.
"""

from __future__ import annotations

import base64
import json

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.rocketmq.test_mq_damage import CL, HIT, N, damaged_store
from tests.support import javarocketmq

runner = CliRunner()
READER = "RocketMQStoreReader"


def test_rocketmq_serves_a_move_that_left_a_damaged_entry_out(rocketmq, tmp_path):
    root = tmp_path / "src"
    written = damaged_store(root)
    dest = tmp_path / "ms"
    r = runner.invoke(app, ["mq", "migrate", str(root), str(dest), "--commitlog-file-size", str(CL),
                            "--skip-damaged", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)[0]["damaged"] == 1
    lines = javarocketmq._run_json(rocketmq.command(READER, str(dest), str(CL), str(64 * 20), "110000",
                                                    "put:T0:0", "put:T1:1"), 120, READER)
    assert [m for m in lines if m["kind"] == "undecodable"] == []
    # (keyed by the message's own QUEUEOFFSET: the reader numbers what one pull gives from where it began, and
    # a pull across the blank unit gives the messages after it)
    msgs = [m for m in lines if m["kind"] == "message"]
    got = {(m["topic"], m["queue_id"], m["stored_queue_offset"]): m for m in msgs}
    assert len(got) == len(msgs)
    want = {(f"T{i % 2}", i % 2, written[i]["queue_offset"]): i for i in range(N) if i != HIT}
    assert set(got) == set(want)
    for key, i in want.items():
        g = got[key]
        assert base64.b64decode(g["body"]) == b"body %d" % i * 10 and g["keys"] == f"key-{i:03d}" and g["look_ok"]
    assert {(m["topic"], m["status"]) for m in lines if m["kind"] == "miss"} <= {(f"T{HIT % 2}", "MESSAGE_WAS_REMOVING")}
    queues = {(q["topic"], q["queue_id"]): (q["min"], q["max"]) for q in lines if q["kind"] == "queue" and q["max"]}
    assert queues == {("T0", 0): (0, N // 2), ("T1", 1): (0, N // 2)}
    for p in (p for p in lines if p["kind"] == "put"):
        assert (p["status"], p["queue_offset"], p["dispatched"], p["pulled"]) == ("PUT_OK", N // 2, True, "FOUND"), p
