"""``get --decode rocketmq`` on a live group (real node processes on 127.0.0.1): the
RocketMQ messages of committed entries read through the leader, as ``mq messages`` reads
them from files, with ``--follow`` too; entries that are not messages say so."""

from __future__ import annotations

import json

from tests.support.commands import cli
from tests.support.group import append_bodies
from tests.support.rmq_encode import encode_message


def test_get_decodes_rocketmq_messages(cluster):
    base = cluster
    bodies = [encode_message(topic="Orders", queue_id=k, queue_offset=k, body=f"order {k}".encode(),
                             properties={"TAGS": "paid", "KEYS": f"order-{k}", "UNIQ_KEY": f"U{k}"})
              for k in range(3)]
    bodies.append(encode_message(topic="主题", body=b"z" * 300, compress="zlib", store_host="[::1]:10911"))
    bodies.append(b"plain text, not a message")
    got = append_bodies(base, bodies)
    first = got.entries[0][0]
    r = cli("get", "--base-dir", base, "-i", str(first), "-c", str(len(bodies)), "--decode", "rocketmq",
            "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["kind"] for row in rows] == ["message"] * 4 + ["not-a-message"]
    assert [(row["topic"], row["queue_offset"], row["tags"], row["keys"], row["body"]) for row in rows[:3]] == \
        [("Orders", k, "paid", f"order-{k}", f"order {k}") for k in range(3)]
    assert rows[0]["properties"] == {"TAGS": "paid", "KEYS": "order-0", "UNIQ_KEY": "U0"}
    assert rows[3]["topic"] == "主题" and rows[3]["body"] == "z" * 300 and "zlib-compressed" in rows[3]["note"]
    assert len(rows[3]["msg_id"]) == 56 and rows[3]["body_crc_ok"] is True
    assert rows[4]["msg_id"] is None and "fewer than" in rows[4]["note"]
    # the table, and following the log as it commits
    r = cli("get", "--base-dir", base, "-i", str(first), "-c", "2", "--decode", "rocketmq")
    assert r.returncode == 0 and "Orders" in r.stdout and "order-1" in r.stdout, r.stderr
    r = cli("get", "--base-dir", base, "--follow", "-i", str(first + 1), "-c", "2", "--decode", "rocketmq",
            "--body", "none", "--format", "jsonl", timeout=30)
    assert r.returncode == 0, r.stderr
    assert [json.loads(line)["queue_offset"] for line in r.stdout.splitlines()] == [1, 2]
