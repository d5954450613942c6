"""A replica whose last message was torn (its header whole, its body's last bytes never
written: a crash mid-write, or a transfer cut mid-message) read by ``mq align`` and ``mq
epochs`` as RocketMQ 5.3.3's own store then recovers it: CommitLog's recovery checks every
message's BODYCRC (checkCRCOnRecover, on by default) and ends the log before one whose CRC
fails, so that message is not the replica's. Three replica processes of
tests/support/javarocketmq5ha.py (AutoSwitchHAService), the test playing the controller; every
wait bounded; skipped, saying why, when Java, a mirror or a Debian jar is missing."""

from __future__ import annotations

import json
import os
from pathlib import Path

from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq.message import decode
from store.rocketmq.replica import log_extent
from tests.java.test_rocketmq5_ha_java import group, java, put_ok  # noqa: F401 (fixtures)
from tests.support.commitlogs import boundaries

runner = CliRunner()


def tear(root, start: int, end: int) -> int:
    """Zero the message at [start, end) of ``root``'s log from the middle of its body on (a
    write that stopped there); the bytes zeroed."""
    d = os.path.join(root, "commitlog")
    name = max(n for n in os.listdir(d) if int(n) <= start)
    with open(os.path.join(d, name), "r+b") as fh:
        fh.seek(start - int(name))
        m = decode(fh.read(end - start))
        cut = start + m.body_at + m.body_size // 2
        fh.seek(cut - int(name))
        fh.write(bytes(end - cut))
    return end - cut


def align(*args):
    r = runner.invoke(app, ["mq", "align", *map(str, args), "-f", "json"])
    assert "Traceback" not in r.output, r.output
    return r.exit_code, json.loads(r.stdout) if r.stdout.strip() else [], r.stderr


def test_a_torn_last_message_is_not_the_replicas(group):
    """Master 1 at epoch 1 with slaves 2, 3; 40 messages reach all (to A); all stop cleanly.
    Replica 3's last message is zeroed from the middle of its body on. ``mq align`` (1 master, 3
    slave) says 3's log ends where that message starts (S), as RocketMQ recovers it (its max
    offset after the start); made 1's slave at epoch 2, its handshake keeps S and it copies
    the message again from the master, to A."""
    group.start_master_and_slaves(master_id=1, epoch=1)
    a = put_ok(group[1], "TopicT", 40, "t")["max_phy_offset"]
    assert group.wait_caught_up(1) == a
    for i in (1, 2, 3):
        assert group[i].quit() == 0
    root = Path(group[3].root)
    starts = boundaries(root)
    s = starts[-1]
    assert tear(root, s, a) > 0
    assert log_extent(str(root))[1] == s
    code, rows, _ = align(group[1].root, root, "--master", group[1].root)
    slave = next(r for r in rows if r["role"] == "slave")
    assert slave["max_offset"] == s and slave["cut_bytes"] == 0, rows

    assert group[3].start()["max_phy_offset"] == s  # (RocketMQ's recovery: the torn message is not its)
    group[1].start()
    group[1].master(2, 2, [1])
    group[3].slave(group[1], 2)
    assert group[3].wait_until(lambda st: st["max_phy_offset"] == a, "the slave caught up")["max_phy_offset"] == a
    assert group[3].run_handshakes()[0] == s
