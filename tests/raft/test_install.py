"""The follower's side of INSTALL_SNAPSHOT (cluster/raft/install.py) on its own: chunks in order,
resumed, refused when malformed, checked before the snapshot is placed, and the log begun
again with the leader's first entry only once the state is restored."""

from __future__ import annotations

import json
import os
import zlib

from cluster.raft.follower import FollowerLog
from cluster.raft.install import receive
from cluster.raft.rpc import Code, InstallSnapshotRequest
from cluster.raft.statemachine import Applier, KeyValue
from store.format import MAGIC_NOOP, encode_entry
from store.memstore import MemoryStore
from store.snapshot import INSTALL_TMP_DIR, SNAPSHOT_DIR, SnapshotStore

STATE = json.dumps({"values": {"a": "1", "b": "2"}, "applied": 90, "ignored": 0}).encode()
FIRST = encode_entry(b"a=1", index=88, term=3, pos=0)  # the leader's first entry: its log begins at 88


def follower(tmp_path):
    store = MemoryStore(data_file_size=4096)
    store.append_leader([b""], 1, MAGIC_NOOP)
    store.append_leader([b"x=%d" % i for i in range(5)], 1)
    store.set_committed(5)
    a = Applier(KeyValue(), store, SnapshotStore(str(tmp_path)), threshold=1000)
    a.recover()
    a.step()
    return FollowerLog(store), a


def chunk(offset: int, n: int, first: bytes = b"", crc: int | None = None, size: int | None = None):
    return InstallSnapshotRequest("g", "n0", 3, 90, 3, len(STATE) if size is None else size,
                                  zlib.crc32(STATE) if crc is None else crc, offset, STATE[offset:offset + n], first)


def test_chunks_then_the_last_one_installs_and_the_log_begins_at_the_leaders_first_entry(tmp_path):
    log, a = follower(tmp_path)
    r = receive(chunk(0, 20), log, a)
    assert (r.code, r.received, r.installed) == (Code.SUCCESS, 20, False)
    assert receive(chunk(40, 10), log, a).received == 20  # past what it holds: the leader goes on from 20
    assert receive(chunk(0, 10), log, a).received == 20  # held already: nothing changes
    assert a.sm.values == {"x": "4"} and log.store.begin_index == 0  # nothing installed yet
    r = receive(chunk(20, len(STATE) - 20, FIRST), log, a)
    assert (r.code, r.received, r.installed) == (Code.SUCCESS, len(STATE), True), r.remark
    assert a.sm.values == {"a": "1", "b": "2"} and (a.applied, a.snapshot_index) == (90, 90)
    s = log.store
    assert (s.begin_index, s.end_index, s.committed_index, log.matched) == (88, 88, 87, 88)
    assert s.get_bytes(88) == FIRST
    assert [x.index for x in a.snapshots.list()] == [90]
    assert not os.path.exists(os.path.join(str(tmp_path), SNAPSHOT_DIR, INSTALL_TMP_DIR))


def test_a_snapshot_whose_bytes_fail_their_crc_is_discarded_and_nothing_changes(tmp_path):
    log, a = follower(tmp_path)
    r = receive(chunk(0, len(STATE), FIRST, crc=1), log, a)
    assert r.code == Code.INSTALL_SNAPSHOT_ERROR and r.received == 0 and "crc32" in r.remark
    assert a.snapshots.list() == [] and a.sm.values == {"x": "4"} and log.store.begin_index == 0
    assert receive(chunk(0, 5, crc=1), log, a).received == 5  # the next install starts over


def test_one_placed_before_a_crash_is_not_sent_again_only_the_log_begins_again(tmp_path):
    log, a = follower(tmp_path)
    a.snapshots.write(90, 3, STATE)  # placed, the log not yet begun again: then a restart
    a = Applier(KeyValue(), log.store, SnapshotStore(str(tmp_path)), threshold=1000)
    assert a.recover().startswith("restored snapshot 90")
    assert receive(chunk(0, 8), log, a).received == len(STATE)  # it has it all
    r = receive(chunk(len(STATE), 0, FIRST), log, a)
    assert r.installed and log.store.begin_index == 88


def test_malformed_requests_and_a_follower_without_a_state_machine_are_refused(tmp_path):
    log, a = follower(tmp_path)
    assert receive(chunk(0, 5), log, None).code == Code.UNSUPPORTED
    bad = [
        chunk(0, 5, size=-1),
        chunk(0, 5, crc=1 << 32),
        chunk(len(STATE) + 1, 0),
        chunk(0, 5, FIRST),  # the first entry with a chunk that is not the last
        chunk(0, len(STATE), FIRST[:-1]),  # not a whole entry
        chunk(0, len(STATE), FIRST + FIRST),  # two
        chunk(0, len(STATE), encode_entry(b"z", index=92, term=3, pos=0)),  # a gap after the snapshot
    ]
    for req in bad:
        r = receive(req, log, a)
        assert r.code == Code.UNEXPECTED_ARGUMENT and r.remark, req
    assert a.snapshots.list() == [] and log.store.begin_index == 0 and a.sm.values == {"x": "4"}
