"""The background scrub on real members (cluster/node/scrub.py): bytes flipped in the files
of running members, in committed entries of followers and of the leader, are found and
repaired from a replica; a reader never gets a damaged body meanwhile."""

from __future__ import annotations

import json
import os
import re
import shutil

from store.filestore import FileStore
from store.format import INDEX_RECORD, INDEX_UNIT_SIZE
from tests.support.commands import cli
from tests.support.group import append_bodies, leader_of, recorded, status, wait_for

DATA_FILE = 8 << 20  # tests.support.group.SMALL
BODIES = [(b"scrub %05d " % i) * (1 + i % 50) for i in range(3000)]


def _member(base, node):
    return os.path.join(base, f"dledger-{node}")


def _record(base, node, index):
    with open(os.path.join(_member(base, node), "index", "0" * 20), "rb") as fh:
        fh.seek(index * INDEX_UNIT_SIZE)
        return INDEX_RECORD.unpack(fh.read(INDEX_UNIT_SIZE))  # magic, pos, size, index, term


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([b ^ 0x41]))


def flip_entry(base, node, index, field):
    """Flip a byte of entry ``index`` in ``node``'s data file: ``field`` bytes into it."""
    _m, pos, _size, _i, _t = _record(base, node, index)
    start = pos - pos % DATA_FILE
    _flip(os.path.join(_member(base, node), "data", f"{start:020d}"), pos - start + field)


def flip_record(base, node, index):
    _flip(os.path.join(_member(base, node), "index", "0" * 20), index * INDEX_UNIT_SIZE + 4 + 6)  # its pos


def get(base, node, index):
    return cli("get", "--base-dir", base, "--node", node, "--index", str(index), "--consistency", "serializable",
               "--body", "utf8", "--format", "json", "--timeout", "5")


def scrub_rows(base):
    return {r["id"]: r.get("scrub") for r in status(base)}


def same_files(base, nodes):
    """Every member's data and index files hold the same bytes (up to the shortest)."""
    for kind in ("data", "index"):
        names = sorted(os.listdir(os.path.join(_member(base, nodes[0]), kind)))
        for name in names:
            blobs = []
            for n in nodes:
                with open(os.path.join(_member(base, n), kind, name), "rb") as fh:
                    blobs.append(fh.read())
            end = min(len(b.rstrip(b"\0")) for b in blobs)
            if len({b[:end] for b in blobs}) != 1:
                return False
    return True


def committed_group(group, rate: str, bodies: list[bytes]) -> tuple[str, list[int]]:
    """Three members scrubbing at ``rate`` (started by ``group``, the fixture), ``bodies``
    appended and committed on all: the base directory and their indexes."""
    base = group(3, "--scrub-rate", rate)
    indexes = [e[0] for e in append_bodies(base, bodies).entries]
    wait_for(lambda: (r := status(base)) and all(x["committed_index"] >= indexes[-1] for x in r), 30,
             "every member to commit")
    return base, indexes


def test_damage_on_followers_and_the_leader_is_found_and_repaired(group):
    base = group(3, "--scrub-rate", "32MiB")
    answer = append_bodies(base, BODIES)
    assert answer.code == 200, answer
    indexes = [e[0] for e in answer.entries]
    rows = wait_for(lambda: (r := status(base)) and len({x["committed_index"] for x in r}) == 1
                    and r[0]["committed_index"] >= indexes[-1] and r, 30, "every member to commit the appends")
    leader = leader_of(base)
    followers = sorted(r["id"] for r in rows if r["id"] != leader)
    a, b = followers
    body, header, record, on_leader = indexes[100], indexes[1500], indexes[2200], indexes[2700]
    flip_entry(base, a, body, 48 + 7)  # a body byte
    flip_entry(base, b, header, 16 + 3)  # its term
    flip_record(base, a, record)
    flip_entry(base, leader, on_leader, 48 + 1)
    before = {n: r["passes"] for n, r in scrub_rows(base).items()}

    def healed():
        rows = scrub_rows(base)
        if not all(r is not None and r["passes"] >= before[n] + 2 and not r["damaged"] for n, r in rows.items()):
            return False
        return same_files(base, [leader, a, b])
    try:
        wait_for(healed, 90, "every member's scrub to pass twice with no damage left, and identical files")
    except AssertionError as exc:
        said = {n["id"]: [x for x in open(n["log"], errors="replace").read().splitlines() if "scrub" in x or
                          "leader" in x][-15:] for n in recorded(base)["nodes"]}
        raise AssertionError(f"{exc}: {scrub_rows(base)} {json.dumps(said, indent=1)}") from None

    for n in (leader, a, b):
        r = cli("store", "verify", _member(base, n), "--format", "json")
        assert r.returncode == 0, (n, r.stdout[-2000:], r.stderr)
    # every acknowledged append reads back with its own bytes, from every member
    for n in (leader, a, b):
        for i in (body, header, record, on_leader):
            r = get(base, n, i)
            assert r.returncode == 0, (n, i, r.stderr)
            assert json.loads(r.stdout)[0]["body"] == BODIES[indexes.index(i)].decode()
    # each repair is one line in its member's log; the leader handed leadership over first
    logs = {n["id"]: open(n["log"], errors="replace").read() for n in recorded(base)["nodes"]}
    assert f"scrub: repaired entry {body} (body-crc" in logs[a]
    assert f"scrub: repaired entry {record} (index-record" in logs[a]
    assert f"scrub: repaired entry {header} (chain-crc" in logs[b]
    # the leader's own entry was repaired with another member's copy: it handed leadership over
    # first (or, on a loaded machine, lost it before its scrub got there)
    fixed = re.search(rf"scrub: repaired entry {on_leader} \(body-crc[^\n]* with (n\d)'s copy", logs[leader])
    assert fixed and fixed.group(1) != leader, logs[leader][-3000:]
    m = cli("cluster", "status", "--base-dir", base, "--format", "table")
    assert m.returncode == 0 and "scrub" in m.stdout, m.stdout


def test_a_reader_never_gets_a_damaged_body(group):
    base, indexes = committed_group(group, "0", BODIES[:200])
    victim = indexes[120]
    for n in ("n0", "n1", "n2"):
        flip_entry(base, n, victim, 48 + 2)
    leader = leader_of(base)
    for n in ("n0", "n1", "n2"):
        r = get(base, n, victim)
        if n == leader and r.returncode == 0:
            # a leader serves its latest writes from what it wrote (store/logreads.py remember):
            # the entry's own bytes, not the damaged copy on its disk
            assert json.loads(r.stdout)[0]["body"] == BODIES[120].decode()
            continue
        assert r.returncode == 1, (n, r.stdout)
        assert f"entry {victim}" in r.stderr and "damaged" in r.stderr, r.stderr
        assert r.stderr.count("\n") == 1, r.stderr
        r = get(base, n, victim - 1)  # its neighbours are served
        assert r.returncode == 0 and json.loads(r.stdout)[0]["body"] == BODIES[119].decode()
    follower = next(n for n in ("n0", "n1", "n2") if n != leader)
    r = cli("get", "--base-dir", base, "--node", follower, "--consistency", "serializable", "--index",
            str(indexes[100]), "--count", "50", "--body", "utf8", "--format", "jsonl", "--timeout", "5")
    # a range that reaches it: the entries before it, then one line naming it
    assert [json.loads(x)["index"] for x in r.stdout.splitlines()] == indexes[100:120], r.stderr
    assert r.returncode == 1 and f"entry {victim}" in r.stderr, r.stderr


def _crcless_group(base: str, bodies: list[bytes]) -> None:
    """Three members' files as a Java-written group leaves them: the same entries, no CRCs."""
    first = os.path.join(base, "dledger-n0")
    with FileStore.open(first, data_file_size=DATA_FILE, index_file_size=1 << 20, with_crc=False) as s:
        s.append_leader(bodies, term=1)
        s.set_committed(len(bodies) - 1)
        s.flush()
        s.persist_checkpoint()
    for n in ("n1", "n2"):
        shutil.copytree(first, os.path.join(base, f"dledger-{n}"))


def test_entries_without_crcs_are_compared_across_members(group):
    """A body byte changed on one member is replaced by the copy the two others hold; an entry
    changed differently on two members has no majority: nothing is rewritten, every member
    reports it, and no member serves it."""
    base = group.base()
    os.makedirs(base)
    _crcless_group(base, BODIES[:400])
    one, two = 150, 320
    flip_entry(base, "n2", one, 48 + 9)
    flip_entry(base, "n0", two, 48 + 4)
    flip_entry(base, "n1", two, 48 + 11)
    damaged = {}
    for n in ("n0", "n1", "n2"):
        _m, pos, size, _i, _t = _record(base, n, two)
        with open(os.path.join(_member(base, n), "data", "0" * 20), "rb") as fh:
            fh.seek(pos)
            damaged[n] = fh.read(size)
    group(3, "--scrub-rate", "32MiB", base=base)

    def settled():
        rows = scrub_rows(base)
        return all(r is not None and r["passes"] >= 2 and r["damaged"] == [two] for r in rows.values())
    wait_for(settled, 60, "every member to hold exactly the entry no majority agrees on as damaged")
    with open(os.path.join(_member(base, "n2"), "data", "0" * 20), "rb") as fh:
        _m, pos, size, _i, _t = _record(base, "n2", one)
        fh.seek(pos)
        assert fh.read(size)[48:] == BODIES[one]  # repaired from the majority's copy
    for n in ("n0", "n1", "n2"):
        _m, pos, size, _i, _t = _record(base, n, two)
        with open(os.path.join(_member(base, n), "data", "0" * 20), "rb") as fh:
            fh.seek(pos)
            assert fh.read(size) == damaged[n]  # nothing rewritten
        r = get(base, n, two)
        assert r.returncode == 1 and f"entry {two} is damaged on {n}" in r.stderr, (n, r.stdout, r.stderr)
        r = get(base, n, one)
        assert r.returncode == 0 and json.loads(r.stdout)[0]["body"] == BODIES[one].decode()
    logs = {n["id"]: open(n["log"], errors="replace").read() for n in recorded(base)["nodes"]}
    assert f"scrub: repaired entry {one} (differs" in logs["n2"]
    assert all(f"entry {two}: differs damage" in logs[n] and "no majority holds one copy" in logs[n] for n in logs)
    # a header flipped while it runs: the copy it is given has no CRC, so it is written only
    # once a majority of the members say they hold those very bytes
    follower = next(n for n in ("n0", "n1", "n2") if n != leader_of(base))
    flip_entry(base, follower, 60, 8 + 7)  # its index field
    log_of = next(n["log"] for n in recorded(base)["nodes"] if n["id"] == follower)
    wait_for(lambda: "scrub: repaired entry 60 (header" in open(log_of, errors="replace").read(), 30,
             f"{follower} to repair entry 60 from a copy a majority holds")


def test_a_read_that_meets_damage_sends_the_scrub_there_first(group):
    """At a crawling scrub rate the pass would reach the entry in minutes: the GET refused for
    it makes the scrub check and repair it at once."""
    base, indexes = committed_group(group, "1KiB", BODIES[:400])
    leader = leader_of(base)
    follower = next(n for n in ("n0", "n1", "n2") if n != leader)
    victim = indexes[390]
    flip_entry(base, follower, victim, 48 + 5)
    r = get(base, follower, victim)
    assert r.returncode == 1 and f"entry {victim}" in r.stderr, (r.stdout, r.stderr)
    wait_for(lambda: get(base, follower, victim).returncode == 0, 20, "the entry repaired after the refused read")
    assert json.loads(get(base, follower, victim).stdout)[0]["body"] == BODIES[390].decode()
    assert scrub_rows(base)[follower]["position"] < victim  # (the pass itself was still far before it)
