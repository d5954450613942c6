"""``mq topics`` and ``mq check`` on a log that holds no RocketMQ message (a dledgerctl
group's own log, entries of plain text and no-ops): no rows, "0 messages", exit 0, never
a traceback (issue 44, item 4)."""

from __future__ import annotations

import json

from store.filestore import FileStore
from store.format import MAGIC_NOOP
from tests.support.commands import invoke
from tests.support.rmq_store import write_broker_store


def plain_log(base) -> str:
    """A node directory as a dledgerctl group leaves it: a no-op, then text appends."""
    node = str(base / "dledger-n0")
    s = FileStore.open(node)
    s.append_leader([b""], 1, MAGIC_NOOP)
    s.append_leader([b"hello", b"x" * 300, b"line %d" % 3], 1)
    s.close()
    return node


def test_topics_of_a_log_without_messages_is_no_rows(tmp_path):
    node = plain_log(tmp_path)
    for path in (tmp_path, node):
        r = invoke("mq", "topics", path, "--format", "json")
        assert r.exit_code == 0 and r.exception is None, r.output
        assert json.loads(r.stdout) == []


def test_check_of_a_log_without_messages_says_0_messages_and_passes(tmp_path):
    node = plain_log(tmp_path)
    for path in (tmp_path, node):
        r = invoke("mq", "check", path)
        assert r.exit_code == 0 and r.exception is None, r.output
        assert "0 messages" in r.stderr and "4 entries" in r.stderr and "0 findings" in r.stderr, r.stderr
        assert "none is a RocketMQ message" in r.stderr, r.stderr


def test_a_broker_store_whose_entries_are_no_messages_still_reports_them(tmp_path):
    """(With consume queues beside it, the log is a broker's: an entry that is no message is
    a finding, as before.)"""
    root = tmp_path / "store"
    write_broker_store(str(root), [dict(topic="T")])
    s = FileStore.open(str(root / "dledger-n0"))
    s.append_leader([b"plain"], 1)
    s.close()
    r = invoke("mq", "check", root, "--format", "jsonl")
    assert r.exit_code == 1 and [json.loads(x)["finding"] for x in r.stdout.splitlines()] == ["not-a-message"]
