"""Nothing thrown away on truncation (issue 48): the store keeps what it is about to cut
(store/kept.py) when a keeper is set, ``node start --keep-truncated DIR`` sets one, and a
follower cut by a real dledgerctl leader keeps exactly the entries it lost, in a file that
``store inspect-data`` and ``mq salvage`` read.

Real node processes on 127.0.0.1; every wait polls under a deadline."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from cluster.net.client import Client
from cluster.raft.config import parse_peers
from store.errors import StoreIOError
from store.filestore import FileStore
from store.kept import KEPT_RE, Keeper, iter_kept, kept_files
from store.memstore import MemoryStore
from tests.node.test_peer_processes import caught_up, diff, leader_id, node_dir, peer, stop
from tests.node.test_peer_processes import tiny  # noqa: F401 (the fixture)
from tests.support.commands import cli
from tests.support.group import recorded, restart, wait_for
from tests.support.rmq_encode import keyed_message


def _said():
    lines = []
    return lines, (lambda text, fields: lines.append((text, fields)))


@pytest.mark.parametrize("kind", ["file", "memory"])
def test_truncate_keeps_exactly_the_cut_entries_first(tmp_path, kind):
    lines, say = _said()
    if kind == "file":
        s = FileStore.open(str(tmp_path / "n"), data_file_size=1 << 12, index_file_size=1 << 12)
    else:
        s = MemoryStore(data_file_size=1 << 12)
    s.append_leader([b"e%d" % i * 40 for i in range(100)], 1)  # (spans several data files)
    want = [s.get_bytes(i) for i in range(37, 100)]
    s.keeper = Keeper(str(tmp_path / "keep"), say=say)
    assert s.truncate(37) == 63
    (path, size), = kept_files(str(tmp_path / "keep"))
    assert KEPT_RE.match(os.path.basename(path)) and os.path.basename(path).startswith("truncated-37-99-")
    with open(path, "rb") as fh:
        assert fh.read() == b"".join(want)
    assert [h.index for _o, h, _b in iter_kept(path)] == list(range(37, 100))
    assert len(lines) == 1 and "37..99" in lines[0][0] and path in lines[0][0]
    s.close()


def test_reset_keeps_what_is_not_committed_and_a_failed_keep_cuts_nothing(tmp_path):
    s = MemoryStore(data_file_size=1 << 12)
    s.append_leader([b"x" * 30 for _ in range(10)], 1)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    s.keeper = Keeper(str(blocker))
    with pytest.raises(StoreIOError):
        s.truncate(5)
    assert s.end_index == 9  # nothing cut: the entries could not be kept
    s.keeper = Keeper(str(tmp_path / "keep"))
    leader = MemoryStore(data_file_size=1 << 12)
    leader.append_leader([b"a" * 4000], 1)  # its second entry starts the second "file"
    leader.append_leader([b"b"], 2)
    s.set_committed(6)  # (0..6 are the group's: a snapshot or the leader holds them)
    s.reset_to(leader.get_bytes(1))
    (path, _), = kept_files(str(tmp_path / "keep"))
    assert os.path.basename(path).startswith("truncated-7-9-")
    assert [h.index for _o, h, _b in iter_kept(path)] == [7, 8, 9]
    s2 = MemoryStore(data_file_size=1 << 12)
    s2.append_leader([b"x" * 30 for _ in range(10)], 1)
    s2.set_committed(9)
    s2.keeper = Keeper(str(tmp_path / "keep2"))
    s2.reset_to(leader.get_bytes(1))  # (a wholly committed log: nothing to keep)
    assert s2.begin_index == 1 and not os.path.exists(tmp_path / "keep2")


def test_a_keep_that_fails_drops_no_older_kept_file(tmp_path, monkeypatch):
    keep = str(tmp_path / "keep")
    s = MemoryStore(data_file_size=1 << 16)
    s.append_leader([b"y" * 152 for _ in range(30)], 1)  # entries of 200 bytes
    s.keeper = Keeper(keep, max_bytes=1000)
    s.truncate(25)  # 1000 bytes kept: the bound is full
    before = kept_files(keep)

    def no_room(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", no_room)
    with pytest.raises(StoreIOError, match="No space left"):
        s.truncate(22)
    monkeypatch.undo()
    assert s.end_index == 24  # nothing cut
    assert kept_files(keep) == before and sorted(os.listdir(keep)) == [os.path.basename(p) for p, _ in before]


def test_a_damaged_entry_is_not_kept_but_does_not_stop_the_cut(tmp_path):
    from store.errors import StoreCorruptError

    class Damaged(MemoryStore):
        def get_bytes(self, index):
            if index == 6:
                raise StoreCorruptError("entry 6: bad header")
            return super().get_bytes(index)

    lines, say = _said()
    s = Damaged(data_file_size=1 << 12)
    s.append_leader([b"z" * 20 for _ in range(10)], 1)
    s.keeper = Keeper(str(tmp_path / "keep"), say=say)
    assert s.truncate(4) == 6 and s.end_index == 3
    (path, _), = kept_files(str(tmp_path / "keep"))
    assert [h.index for _o, h, _b in iter_kept(path)] == [4, 5]
    assert "entries 6..9 not kept (unreadable from entry 6: entry 6: bad header)" in lines[-1][0]
    s.truncate(2)  # (entry 6 is gone now: 2..3 kept)
    s2 = Damaged(data_file_size=1 << 12)
    s2.append_leader([b"z" * 20 for _ in range(10)], 1)
    s2.keeper = Keeper(str(tmp_path / "keep2"), say=say)
    assert s2.truncate(6) == 4
    assert "nothing kept (unreadable from entry 6" in lines[-1][0]


def test_the_bound_drops_the_oldest_files_and_says_so(tmp_path):
    lines, say = _said()
    clock = iter(range(1000, 2000))
    keep = str(tmp_path / "keep")
    s = MemoryStore(data_file_size=1 << 16)
    s.append_leader([b"y" * 152 for _ in range(30)], 1)  # entries of 200 bytes
    s.keeper = Keeper(keep, max_bytes=1000, say=say, clock=lambda: next(clock))
    s.truncate(27)  # 600 bytes
    first = kept_files(keep)[0][0]
    os.utime(first, (1, 1))  # (which is older goes by the time written)
    s.truncate(25)  # 400 more: 1000 in all
    os.utime(next(p for p, _ in kept_files(keep) if p != first), (2, 2))
    assert len(kept_files(keep)) == 2
    s.truncate(22)  # 600 more: the oldest goes
    assert [os.path.basename(p).split("-")[1] for p, _ in kept_files(keep)] == ["25", "22"]
    assert any("dropped the oldest kept file" in t and first in t for t, _f in lines)
    s.truncate(10)  # 2400 bytes: only the first 1000 are kept, the rest said
    assert os.path.basename(kept_files(keep)[-1][0]).startswith("truncated-10-14-")
    assert "entries 15..21 not kept" in lines[-1][0]


def test_node_start_refuses_bad_keep_options(tmp_path):
    peers = "n0-127.0.0.1:1;n1-127.0.0.1:2"
    f = tmp_path / "file"
    f.write_text("")
    for extra, why in ([["--keep-truncated", str(f)], "not a directory"],
                       [["--keep-truncated-bytes", "1MiB"], "needs --keep-truncated"],
                       [["--keep-truncated", str(tmp_path), "--keep-truncated-bytes", "0"], "positive"]):
        r = cli("node", "start", "--id", "n0", "-p", peers, "--store-base-dir", str(tmp_path / "s"), *extra,
                "--print-config")
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
    conf = tmp_path / "c.toml"
    conf.write_text(f'keep-truncated = "{tmp_path}/k"\nkeep-truncated-bytes = "64MiB"\n')
    r = cli("node", "start", "--id", "n0", "-p", peers, "--store-base-dir", str(tmp_path / "s"), "--config", str(conf),
            "--print-config")
    assert r.returncode == 0, r.stderr
    assert f'keep-truncated = "{tmp_path}/k"' in r.stdout and "keep-truncated-bytes = 67108864" in r.stdout


# -- a follower cut by a real leader -------------------------------------------------------

def append_messages(base: str, bodies: list[bytes]) -> list:
    rec = recorded(base)

    async def go():
        c = Client(parse_peers(rec["peers"]), rec["group"], timeout=20)
        try:
            return [tuple(e) for e in (await c.append(bodies)).entries]
        finally:
            await c.close()
    return asyncio.run(go())


def diverge(base: str, keep: str):
    """A follower whose tail (of an old term) the leader will cut: ``(follower, leader, the
    cut entries' bytes, their first index, the messages held by the group, lost ones)``."""
    append_messages(base, [keyed_message("Orders", k, f"A{k}") for k in range(10)])
    old = leader_id(base)
    new = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != old)
    r = peer(base, "transfer-leader", "--to", new, "--format", "json")
    assert r.returncode == 0, r.stderr
    newer = append_messages(base, [keyed_message("Orders", 10 + k, f"B{k}") for k in range(10)])
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != new)
    wait_for(lambda: caught_up(base), 30, "replicas to catch up")
    stop(base, follower)
    # offline: from the new term's first entry on, entries of the old term: six messages
    # the group never took, and copies of two it holds (the same UNIQ_KEY)
    lost = [keyed_message("Orders", 10 + k, f"LOST{k}") for k in range(6)]
    held = [keyed_message("Orders", 10, "B0"), keyed_message("Orders", 11, "B1")]
    with FileStore.open(node_dir(base, follower)) as s:
        first = s.first_index_of_term(newer[0][0])
        old_term = s.term_of(first - 1)
        s.truncate(first, force=True)
        s.append_leader(lost[:3] + held + lost[3:], old_term)
        cut = [s.get_bytes(i) for i in range(first, s.end_index + 1)]
    with open(recorded(base)["nodes"][int(follower[1:])]["config"], "a", encoding="utf-8") as fh:
        fh.write(f'keep-truncated = "{keep}"\nnever-lead = true\n')  # (the config file's key; a broker member)
    return follower, new, cut, first, lost


def test_a_follower_cut_by_a_dledgerctl_leader_keeps_exactly_the_cut_entries(tiny, tmp_path):  # noqa: F811
    base, keep = tiny, str(tmp_path / "kept")
    follower, leader, cut, first, lost = diverge(base, keep)
    restart(base, follower)
    wait_for(lambda: diff(base, follower, leader)["identical"], 40, f"{follower} repaired")
    files = kept_files(keep)
    assert files, "nothing kept"
    kept = b""
    for path, _size in sorted(files, key=lambda f: int(os.path.basename(f[0]).split("-")[1]), reverse=True):
        with open(path, "rb") as fh:
            kept += fh.read()
    assert kept == b"".join(cut)
    (path, _), = files
    assert os.path.basename(path).startswith(f"truncated-{first}-{first + len(cut) - 1}-")
    with open(recorded(base)["nodes"][int(follower[1:])]["log"], encoding="utf-8") as fh:
        assert sum("kept the entries about to be cut" in line and path in line for line in fh) == 1

    r = cli("store", "inspect-data", path, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert [x["index"] for x in rows] == list(range(first, first + len(cut)))
    assert all(x["crc"] == "ok" for x in rows)

    r = cli("mq", "salvage", path, "--against", node_dir(base, leader), "--out", str(tmp_path / "resend.jsonl"),
            "--format", "json")
    assert r.returncode == 1, r.stderr  # (messages are missing)
    rows = json.loads(r.stdout)
    assert sorted(x["uniq_key"] for x in rows) == [f"LOST{k}" for k in range(6)]
    with open(tmp_path / "resend.jsonl", encoding="utf-8") as fh:
        out = [json.loads(line) for line in fh]
    assert sorted(o["properties"]["UNIQ_KEY"] for o in out) == [f"LOST{k}" for k in range(6)]
    import base64
    assert {base64.b64decode(o["body"]) for o in out} == {b"body-LOST%d" % k for k in range(6)}
    assert all(o["topic"] == "Orders" and o["tags"] == "t" and o["keys"].startswith("key-LOST") for o in out)
    # the same against the running group: its committed log, read from its leader over the wire
    r = cli("mq", "salvage", path, "--base-dir", base, "--all", "--format", "json")
    assert r.returncode == 1, r.stderr  # (messages are missing)
    rows = json.loads(r.stdout)
    assert sorted(x["uniq_key"] for x in rows if x["status"] == "missing") == [f"LOST{k}" for k in range(6)]
    now = leader_id(base)
    assert sorted((x["uniq_key"], x["held_by"]) for x in rows if x["status"] == "held") == [("B0", now), ("B1", now)]
    assert f"log on {now} (entries " in r.stderr


@pytest.mark.parametrize("configured", [True, False], ids=["keep-truncated", "node-directory"])
def test_peer_compare_repair_keeps_what_it_cuts(tiny, tmp_path, configured):  # noqa: F811
    """An operator's cut (peer compare --deep, relayed by the leader as a REPAIR) is kept too:
    in the --keep-truncated directory, and without one in the member's node directory."""
    base, keep = tiny, str(tmp_path / "kept")
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--format", "json", "--timeout", "20",
            input="".join(f"d-{k}-".ljust(300, "x") + "\n" for k in range(900)))  # five data files: the
    # damage below lies in the first, outside what recovery reads at a start
    assert r.returncode == 0, r.stderr
    leader = leader_id(base)
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != leader)
    wait_for(lambda: caught_up(base), 30, "replicas to catch up")
    stop(base, follower)
    with FileStore.open(node_dir(base, follower), read_only=True) as s:
        pos, n = s.get(7).pos + 48, s.get(7).size - 48
        assert len(s.data.files) >= 5
    with open(os.path.join(node_dir(base, follower), "data", f"{0:020d}"), "r+b") as fh:
        fh.seek(pos)
        fh.write(b"Z" * n)  # the same terms, other bytes: only a deep compare sees it
    with FileStore.open(node_dir(base, follower), read_only=True) as s:
        end = s.end_index
        cut = [s.data.read(*s.locate(i)) for i in range(7, end + 1)]  # (as they lie: 7 fails its CRC)
    if configured:
        with open(recorded(base)["nodes"][int(follower[1:])]["config"], "a", encoding="utf-8") as fh:
            fh.write(f'keep-truncated = "{keep}"\n')
    else:
        keep = node_dir(base, follower)
    restart(base, follower)
    wait_for(lambda: caught_up(base), 30, f"{follower} back")
    fix = peer(base, "compare", "--peer", follower, "--deep", "--format", "json")
    assert fix.returncode == 0, fix.stderr
    (path, _), = kept_files(keep)
    assert json.loads(fix.stdout)["kept"] == path  # (the follower's answer names it)
    assert os.path.basename(path).startswith(f"truncated-7-{end}-")
    with open(path, "rb") as fh:
        assert fh.read() == b"".join(cut)
    wait_for(lambda: caught_up(base), 30, f"{follower} re-filled")


def test_a_member_keeps_what_recovery_cuts_at_start_and_the_leader_gives_it_back(tiny, tmp_path):  # noqa: F811
    """A follower's entry is broken where recovery cannot hold it (its magic) while it is
    stopped: at start, recovery ends its log before that entry; with --keep-truncated the
    whole entries after it are kept first, and the leader then sends the log's tail again.
    (A rotten body byte no longer does this: such an entry is held, issue 58.)"""
    base, keep = tiny, str(tmp_path / "kept")
    append_messages(base, [keyed_message("Orders", k, f"A{k}") for k in range(30)])
    leader = leader_id(base)
    follower = next(n["id"] for n in recorded(base)["nodes"] if n["id"] != leader)
    wait_for(lambda: caught_up(base), 30, "replicas to catch up")
    stop(base, follower)
    with FileStore.open(node_dir(base, follower), read_only=True) as s:
        end = s.end_index
        want = [s.get_bytes(i) for i in range(end - 9, end + 1)]
        pos, _size = s.locate(end - 10)
    data = os.path.join(node_dir(base, follower), "data")
    names = sorted(os.listdir(data))
    start_of = [int(n) for n in names]
    name = names[max(k for k, st in enumerate(start_of) if st <= pos)]
    with open(os.path.join(data, name), "r+b") as fh:  # (the magic of entry end - 10)
        fh.seek(pos - int(name) + 3)
        b = fh.read(1)
        fh.seek(pos - int(name) + 3)
        fh.write(bytes([b[0] ^ 0xFF]))
    with open(recorded(base)["nodes"][int(follower[1:])]["config"], "a", encoding="utf-8") as fh:
        fh.write(f'keep-truncated = "{keep}"\n')
    restart(base, follower)
    (path, _), = kept_files(keep)
    assert os.path.basename(path).startswith(f"truncated-{end - 9}-{end}-")
    with open(path, "rb") as fh:
        assert fh.read() == b"".join(want)
    with open(recorded(base)["nodes"][int(follower[1:])]["log"], encoding="utf-8") as fh:
        text = fh.read()
    assert "recovery at open is about to cut" in text and path in text
    wait_for(lambda: diff(base, follower, leader)["identical"], 40, f"{follower} given the tail again")
