"""Random damage to a small project-written store (three data files, so recovery walks all
of it), with checksums and without (as DLedger 0.2.7 writes): bytes flipped or overwritten
at random places in data and index files.

What must hold, whatever the damage:
- a read-only open raises nothing, changes no byte, and ends where the damage implies;
- a writable open keeps exactly the entries before the first entry damaged where its place
  in the log is no longer certain, byte for byte as they are on disk, and cuts everything
  after; an entry damaged only in its body or checksums, whose framing, term and index record
  are as written, is held (kept, never served: every entry is committed here); a second open
  changes nothing.

"Damaged" is decided here from the bytes, independently of the store: an entry is damaged
when any byte that DLedger's framing or the checksums cover differs from what was written,
when the BLANK record before it changed, or when the chain value it links to (the previous
entry's chainCrc) changed. Two header fields are covered by neither: magic (as long as it
stays 1, 2 or 3) and channel. A flip there cannot be detected, so the test only requires
every other byte of a kept entry to be the original one. Without checksums nothing
protects a body, and a term is only checked for not going back (DLedger's own rule).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stores import (all_digests, file_digests, parse_header, parse_index_record, store_files,
                                  write_project_store)
from store.errors import StoreCorruptError
from store.filestore import FileStore
from store.format import file_name

DSIZE, ISIZE = 4096, 256
UNPROTECTED = [(0, 4), (32, 36)]  # magic, channel


@pytest.fixture(scope="module", params=[True, False], ids=["with-crc", "no-crc"])
def pristine(request, tmp_path_factory):
    node = tmp_path_factory.mktemp("fuzz-base") / "dledger-n0"
    raw = write_project_store(node, count=30, terms=(1, 2, 2, 4), max_size=600, noop_at=17,
                              data_file_size=DSIZE, index_file_size=ISIZE, with_crc=request.param)
    assert len(store_files(node, "data")) == 3  # all of it inside recovery's window
    with FileStore.open(str(node), read_only=True) as s:
        end_pos = s.write_pos
    return Pristine(node, raw, end_pos)


class Pristine(tuple):
    """(node dir, raw entries, end pos); a short repr keeps hypothesis' reports readable."""

    def __new__(cls, *parts):
        return super().__new__(cls, parts)

    def __repr__(self):
        return f"<pristine store, {len(self[1])} entries>"


def read_entry(node, pos, size):
    with open(node / "data" / file_name(pos - pos % DSIZE), "rb") as fh:
        fh.seek(pos % DSIZE)
        return fh.read(size)


def masked(raw, like):
    """``raw`` with the bytes nothing protects in entry ``like`` (as found on disk) zeroed:
    magic and channel, and for an entry without checksums (as DLedger 0.2.7 writes them)
    its term, checksum fields and body too."""
    b = bytearray(raw)
    for lo, hi in UNPROTECTED:
        b[lo:hi] = bytes(hi - lo)
    if like[36:44] == bytes(8):
        b[16:24] = bytes(8)
        b[36:] = bytes(len(b) - 36)
    return bytes(b)


def index_record_is(node, i, h) -> bool:
    """Does entry ``i``'s index record say what header ``h`` (as found on disk) says?"""
    off = i * 32
    path = node / "index" / file_name(off - off % ISIZE)
    if not path.exists():
        return False
    with open(path, "rb") as fh:
        fh.seek(off % ISIZE)
        rec = fh.read(32)
    return len(rec) == 32 and parse_index_record(rec) == (h["magic"], h["pos"], h["size"], h["index"], h["term"])


def expected_end(node, raw, end_pos):
    """(number of leading entries recovery keeps, logical offset where the log then ends,
    the kept entries that are damaged). Every entry is committed here, so a damaged entry
    whose place in the log is certain (its framing and term as written, its index record
    agreeing) is held, not cut; any other damage (see module doc) ends the log."""
    prev_end = prev_term = None
    held = set()
    for i, orig in enumerate(raw):
        ho = parse_header(orig)
        pos = ho["pos"]
        if prev_end is not None and pos // DSIZE != prev_end // DSIZE:
            # the BLANK record at the end of the previous file must be intact
            blank = read_entry(node, prev_end, 8)
            if blank != (-1).to_bytes(4, "big", signed=True) + (DSIZE - prev_end % DSIZE).to_bytes(4, "big"):
                return i, prev_end, held
        cur = read_entry(node, pos, len(orig))
        hc = parse_header(cur)
        if hc["magic"] not in (1, 2, 3):
            return i, pos, held
        recorded = hc["body_crc"] != 0 or hc["chain_crc"] != 0
        framing = ["size", "index", "pos", "body_size"] + (["term"] if recorded else [])
        if any(hc[k] != ho[k] for k in framing):
            return i, pos, held
        if prev_term is not None and hc["term"] < prev_term:
            return i, pos, held  # without checksums a changed term shows only where terms go back
        damaged = recorded and (hc["chain_crc"] != ho["chain_crc"] or hc["body_crc"] != ho["body_crc"]
                                or cur[48:] != orig[48:])
        if i > 0 and recorded:
            prev_chain_now = parse_header(read_entry(node, parse_header(raw[i - 1])["pos"], 48))["chain_crc"]
            damaged |= prev_chain_now != parse_header(raw[i - 1])["chain_crc"]
        if damaged:
            if not index_record_is(node, i, hc):
                return i, pos, held
            held.add(i)
        prev_end, prev_term = pos + len(orig), hc["term"]
    return len(raw), end_pos, held


def served(store, i):
    """Entry ``i``'s bytes as the store serves them, None when it refuses them as damaged."""
    try:
        return store.get_bytes(i, checked=True)
    except StoreCorruptError:
        return None


damage = st.tuples(
    st.sampled_from(["entry", "entry", "data", "index"]),
    st.integers(0, 1 << 30),  # which entry / where
    st.integers(0, 1 << 16),  # offset inside the entry
    st.sampled_from(["xor", "write"]),
    st.binary(min_size=1, max_size=8),
)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(damages=st.lists(damage, min_size=1, max_size=4))
def test_random_damage(pristine, damages):
    src, raw, end_pos = pristine
    n = len(raw)
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(shutil.copytree(src, os.path.join(tmp, "dledger-n0")))
        for target, where, inner, how, payload in damages:
            if target == "entry":
                orig = raw[where % n]
                logical = parse_header(orig)["pos"] + inner % len(orig)
                sub, fsize = "data", DSIZE
            elif target == "data":
                logical, sub, fsize = where % (3 * DSIZE), "data", DSIZE
            else:
                logical, sub, fsize = where % (n * 32 + 64), "index", ISIZE
            path = node / sub / file_name(logical - logical % fsize)
            rel = logical % fsize
            with open(path, "r+b") as fh:
                fh.seek(rel)
                old = fh.read(min(len(payload), fsize - rel))
                new = bytes(a ^ b for a, b in zip(old, payload)) if how == "xor" else payload[:len(old)]
                fh.seek(rel)
                fh.write(new)

        keep, keep_end, damaged = expected_end(node, raw, end_pos)
        on_disk = [read_entry(node, parse_header(r)["pos"], len(r)) for r in raw]
        before = all_digests(node)
        with FileStore.open(str(node), read_only=True) as ro:
            assert (ro.end_index, ro.write_pos) == (keep - 1, keep_end)
            for i in range(keep):
                try:
                    assert ro.get_bytes(i) == on_disk[i]
                except StoreCorruptError:
                    pass  # damaged, or its index record is; a read-only store does not rebuild it
            assert {h.index for h in ro.plan.held} <= damaged
        assert all_digests(node) == before

        with FileStore.open(str(node)) as s:
            assert (s.end_index, s.write_pos) == (keep - 1, keep_end)
            got = [served(s, i) for i in range(keep)]
            # a held entry is never served; every entry served is the one on disk
            assert all(got[i] is None for i in damaged if i < keep and raw[i][48:] != on_disk[i][48:])
            assert all(g is None or i in damaged for i, g in enumerate(got) if g != on_disk[i])
            assert {i for i, g in enumerate(got) if g is None} <= damaged
            sound = [(g, r) for g, r in zip(got, raw) if g is not None]
            assert [masked(g, g) for g, _ in sound] == [masked(r, g) for g, r in sound]
            assert all(parse_header(g)["magic"] in (1, 2, 3) for g, _ in sound)
            after = file_digests(node)
        with FileStore.open(str(node)) as s:
            assert not s.recovery.changed
            assert s.end_index == keep - 1
            assert [served(s, i) for i in range(keep)] == got
        assert file_digests(node) == after
