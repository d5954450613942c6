"""Backup, restore and recovery from quorum loss on real node processes (issue 64).

- A live backup taken while a client appends is a prefix of what the group holds afterwards;
  restored into a new group (three members, a new name), that group serves every entry of
  it and takes new appends, and refuses a client of the old group's name; a backup with one
  flipped byte is refused by verify and by restore.
- With a state machine whose snapshots let the members delete their log's head, a live backup
  copies the latest snapshot too; the restored group's state machine holds every key, those
  whose only entries were deleted included.
- A group of three loses two members' stores for good: the survivor, forced into a group of
  its own, leads; two new members are added with ``peer add``; every entry the survivor held
  is served; an old member started again is not taken back (it gets no entry, and the
  group's leader and term do not move).
"""

from __future__ import annotations

import json
import os
import shutil
import threading

from store.backup import BackupReader
from store.format import HEADER_SIZE, decode_header
from tests.support.commands import cli
from tests.support.group import SMALL, append_lines, file_sizes, leader_of, recorded, status, wait_for
from tests.support.ports import free_port_base


def _get(base: str, first: int, count: int) -> list[tuple[int, int, str]]:
    r = cli("get", "--base-dir", base, "-i", str(first), "-c", str(count), "--format", "json", "--timeout", "20",
            timeout=120)
    assert r.returncode == 0, r.stderr
    return [(e["index"], e["term"], e["body"]) for e in json.loads(r.stdout)]


def _backup_entries(path: str) -> list[tuple[int, int, str]]:
    out = []
    with BackupReader(path) as r:
        for _i, _c, data in r.chunks():
            off = 0
            while off < len(data):
                h = decode_header(data, off)
                out.append((h.index, h.term, data[off + HEADER_SIZE:off + h.size].decode()))
                off += h.size
    return out


class Appending:
    """A client appending batches of lines in a thread until :meth:`stop`."""

    def __init__(self, base: str) -> None:
        self.base, self.done, self.sent = base, threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            append_lines(self.base, [f"live-{self.sent + i}" for i in range(200)], batch=50)
            self.sent += 200

    def stop(self) -> int:
        self.done.set()
        self.thread.join(120)
        assert not self.thread.is_alive()
        return self.sent


def test_live_backup_restores_into_a_new_group(group, tmp_path):
    base = group(3)
    append_lines(base, [f"before-{i}" for i in range(500)])
    load = Appending(base)
    wait_for(lambda: load.sent >= 400, 60, "the client to append")
    out = str(tmp_path / "live.dlbk")
    r = cli("cluster", "backup", "--base-dir", base, "--out", out, "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    wait_for(lambda: load.sent >= made["entries"] + 400, 60, "appends after the backup")
    load.stop()

    # a prefix of what the group holds afterwards, which holds more
    assert cli("store", "backup-verify", out).returncode == 0
    backed = _backup_entries(out)
    assert [e[0] for e in backed] == list(range(made["first_index"], made["last_index"] + 1))
    held = _get(base, 0, made["last_index"] + 1)
    assert [(i, t, b or "") for i, t, b in held] == backed
    assert max(x["committed_index"] for x in status(base)) > made["last_index"]

    # one flipped byte: refused by verify and by restore, which makes nothing
    bad = bytearray(open(out, "rb").read())
    bad[len(bad) // 3] ^= 0x04
    flipped = str(tmp_path / "flipped.dlbk")
    open(flipped, "wb").write(bad)
    r = cli("store", "backup-verify", flipped)
    assert r.returncode == 1 and "Error:" in r.stderr and "chunk" in r.stderr, r.stderr
    port = free_port_base(3)
    peers = ";".join(f"n{i}-127.0.0.1:{port + i}" for i in range(3))
    new_base = str(tmp_path / "restored")
    r = cli("store", "restore", flipped, "--id", "n0", "--peers", peers, "--store-base-dir", new_base)
    assert r.returncode == 1 and "chunk" in r.stderr and not os.path.exists(os.path.join(new_base, "dledger-n0"))

    # restored, a new group serves every entry and takes new appends
    for i in range(3):
        r = cli("store", "restore", out, "--id", f"n{i}", "--peers", peers, "--store-base-dir", new_base,
                "--data-file-size", "8MiB", "--index-file-size", "1MiB", "--format", "json")
        assert r.returncode == 0, r.stderr
        row = json.loads(r.stdout)
        assert row["group"] == "default-restored" and row["config_index"] == made["last_index"] + 1
    group(3, "--group", "default-restored", base=new_base, port_base=port, sizes=SMALL)
    served = _get(new_base, 0, made["last_index"] + 1)
    assert [(i, t, b or "") for i, t, b in served] == backed
    new = append_lines(new_base, ["after-restore"])
    assert new[0]["index"] > made["last_index"] + 1
    # a client of the old group's name is refused by every restored member
    r = cli("cluster", "status", "--peers", peers, "--group", "default", "--format", "json")
    assert r.returncode == 1
    assert all(x["state"] == "refused" and "UNKNOWN_GROUP" in x["error"] for x in json.loads(r.stdout))


def _append_kv(base: str, pairs: list[tuple[str, str]]) -> None:
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", "100", "--timeout", "20",
            "--format", "json", input="".join(f"{k}={v}\n" for k, v in pairs), timeout=120)
    assert r.returncode == 0, r.stderr


def _kv(base: str, keys: list[str]) -> dict:
    r = cli("kv", "get", "--base-dir", base, *keys, "--format", "json", "--timeout", "20")
    assert r.returncode in (0, 1), r.stderr
    return {x["key"]: x["value"] for x in json.loads(r.stdout)}


def test_live_backup_carries_the_snapshot_a_compacted_log_needs(group, tmp_path):
    base, _rec = group.recorded(3, "--state-machine", "kv", "--snapshot-threshold", "300",
                                sizes=file_sizes("64KiB", "64KiB"))
    early = [(f"early{i}", f"e{i}") for i in range(20)]  # written once: after the head is deleted, in snapshots only
    _append_kv(base, early)
    keys = [f"k{i}" for i in range(50)]
    for r in range(40):
        _append_kv(base, [(k, f"{r}-{k}-".ljust(100, "v")) for k in keys])
    leader = leader_of(base)
    wait_for(lambda: next(x for x in status(base) if x["id"] == leader)["begin_index"] > len(early) + 1, 30,
             f"{leader} to delete its log's head")
    out = str(tmp_path / "kv.dlbk")
    r = cli("cluster", "backup", "--base-dir", base, "--out", out, "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr
    made = json.loads(r.stdout)
    assert made["first_index"] > len(early) + 1 and made["snapshot_index"] is not None, made
    assert made["last_index"] >= made["snapshot_index"] >= made["first_index"] - 1, made
    with BackupReader(out) as rd:
        assert rd.manifest.snapshot["index"] == made["snapshot_index"]
    assert cli("store", "backup-verify", out).returncode == 0
    assert not os.path.exists(out + ".snapshot.partial")  # (the spool is gone)
    again = cli("cluster", "backup", "--base-dir", base, "--out", out, "--format", "json", timeout=120)
    assert again.returncode == 1 and "exists already" in again.stderr and again.stderr.count("\n") == 1, again.stderr
    assert not os.path.exists(out + ".snapshot.partial") and not os.path.exists(out + ".partial")

    port = free_port_base(3)
    peers = ";".join(f"n{i}-127.0.0.1:{port + i}" for i in range(3))
    new_base = str(tmp_path / "restored")
    for i in range(3):
        r = cli("store", "restore", out, "--id", f"n{i}", "--peers", peers, "--store-base-dir", new_base,
                "--data-file-size", "64KiB", "--index-file-size", "64KiB", "--format", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["snapshot_index"] == made["snapshot_index"]
    group(3, "--group", "default-restored", "--state-machine", "kv", base=new_base, port_base=port,
          sizes=file_sizes("64KiB", "64KiB"))
    names = [k for k, _ in early] + keys
    want = {**dict(early), **{k: "39-{}-".format(k).ljust(100, "v") for k in keys}}
    assert _kv(base, names) == want
    assert _kv(new_base, names) == want


def test_two_of_three_lost_survivor_forced_then_grown(group, tmp_path):
    base = group(3)
    append_lines(base, [f"kept-{i}" for i in range(300)])
    rec = recorded(base)
    survivor = leader_of(base)
    lost = [n["id"] for n in rec["nodes"] if n["id"] != survivor]
    address = next(a for a in rec["peers"].split(";") if a.startswith(f"{survivor}-"))
    r = cli("cluster", "stop", "--base-dir", base, *lost, survivor)
    assert r.returncode == 0, r.stderr
    for n in lost:  # (their machines are gone for good)
        shutil.rmtree(os.path.join(base, f"dledger-{n}"))
    node_dir = os.path.join(base, f"dledger-{survivor}")
    held = json.loads(cli("store", "inspect-data", node_dir, "--body", "utf8", "--format", "json").stdout)

    # the plan changes nothing; several survivors are refused
    r = cli("store", "force-new-group", node_dir, "--peers", address)
    assert r.returncode == 0 and "Nothing changed" in r.stderr, r.stderr
    r = cli("store", "force-new-group", node_dir, node_dir, "--peers", address, "--yes")
    assert r.returncode == 2 and "store elect" in r.stderr
    r = cli("store", "force-new-group", node_dir, "--peers", address, "--yes")
    assert r.returncode == 0, r.stderr

    # the survivor leads alone, then two new members join
    r = cli("cluster", "start", "--base-dir", base, survivor, "--wait", "30")
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: leader_of(base) == survivor, 30, "the survivor to lead")
    port = free_port_base(2)
    for i, new in enumerate(("n3", "n4")):
        r = cli("peer", "add", "--id", new, "--address", f"127.0.0.1:{port + i}", "--base-dir", base,
                "--format", "json", "--timeout", "20", timeout=180)
        assert r.returncode == 0, r.stderr

    def settled():
        rows = {x["id"]: x for x in status(base)}
        ours = [rows.get(n) or {} for n in (survivor, "n3", "n4")]
        return rows if (all(x.get("state") == "up" and x.get("member") == "voter" for x in ours)
                        and len({x.get("committed_index") for x in ours}) == 1) else None
    rows = wait_for(settled, 60, "the new members to catch up")
    term = rows[survivor]["term"]

    # every entry the survivor held is served, from the new members too
    served = _get(base, 0, len(held))
    assert [(i, t, b or "") for i, t, b in served] == [(e["index"], e["term"], e.get("body") or "") for e in held]
    for n in ("n3", "n4"):
        r = cli("store", "inspect-data", os.path.join(base, f"dledger-{n}"), "--body", "utf8", "--format", "json")
        theirs = json.loads(r.stdout)[:len(held)]
        assert [(e["index"], e["term"], e.get("body")) for e in theirs] == [
            (e["index"], e["term"], e.get("body")) for e in held]

    # an old member started again (its store lost, its old --peers) is not taken back: its
    # votes are refused (it is no member: UNKNOWN_MEMBER), so it may not even count as serving
    old = lost[0]
    old_address = next(a for a in rec["peers"].split(";") if a.startswith(f"{old}-"))
    r = cli("cluster", "start", "--base-dir", base, old, "--wait", "5")
    assert r.returncode in (0, 1), r.stderr

    def old_alone():
        r = cli("cluster", "status", "--peers", old_address, "--format", "json", "--timeout", "1")
        rows = json.loads(r.stdout) if r.stdout.strip() else []
        o = rows[0] if rows else {}
        return o if o.get("state") == "up" and o.get("end_index", 0) < 0 and o.get("leader") in (None, "") else None
    for _ in range(3):  # (over a few election timeouts: it stays out, and the group does not move)
        wait_for(old_alone, 20, f"{old} to stay out")
        rows = {x["id"]: x for x in status(base)}
        assert rows[survivor]["role"] == "leader" and rows[survivor]["term"] == term, rows[survivor]
        assert append_lines(base, ["after"])[0]["index"] > len(held)
