"""Random damage to a small project-written store (three data files, so recovery walks all
of it), with checksums and without (as DLedger 0.2.7 writes): bytes flipped or overwritten
at random places in data and index files.

What must hold, whatever the damage:
- a read-only open raises nothing, changes no byte, and ends where the damage implies;
- a writable open keeps exactly the entries before the first damaged one, byte for byte as
  they are on disk, cuts everything after, and a second open changes nothing.

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

from tests.support.stores import all_digests, file_digests, parse_header, store_files, write_project_store
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


def expected_end(node, raw, end_pos):
    """(number of leading entries no checked byte of which was damaged (see module doc),
    logical offset where the log then ends)."""
    prev_end = prev_term = None
    for i, orig in enumerate(raw):
        ho = parse_header(orig)
        pos = ho["pos"]
        if prev_end is not None and pos // DSIZE != prev_end // DSIZE:
            # the BLANK record at the end of the previous file must be intact
            blank = read_entry(node, prev_end, 8)
            if blank != (-1).to_bytes(4, "big", signed=True) + (DSIZE - prev_end % DSIZE).to_bytes(4, "big"):
                return i, prev_end
        cur = read_entry(node, pos, len(orig))
        hc = parse_header(cur)
        if hc["magic"] not in (1, 2, 3):
            return i, pos
        recorded = hc["body_crc"] != 0 or hc["chain_crc"] != 0
        checked = ["size", "index", "pos", "body_size"] + (["term", "chain_crc", "body_crc"] if recorded else [])
        if any(hc[k] != ho[k] for k in checked):
            return i, pos
        if prev_term is not None and hc["term"] < prev_term:
            return i, pos  # without checksums a changed term shows only where terms go back
        if recorded and cur[48:] != orig[48:]:
            return i, pos
        if i > 0 and recorded:
            prev_chain_now = parse_header(read_entry(node, parse_header(raw[i - 1])["pos"], 48))["chain_crc"]
            if prev_chain_now != parse_header(raw[i - 1])["chain_crc"]:
                return i, pos
        prev_end, prev_term = pos + len(orig), hc["term"]
    return len(raw), end_pos


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

        keep, keep_end = expected_end(node, raw, end_pos)
        on_disk = [read_entry(node, parse_header(r)["pos"], len(r)) for r in raw]
        before = all_digests(node)
        with FileStore.open(str(node), read_only=True) as ro:
            assert (ro.end_index, ro.write_pos) == (keep - 1, keep_end)
            for i in range(keep):
                try:
                    assert ro.get_bytes(i) == on_disk[i]
                except StoreCorruptError:
                    pass  # its index record was damaged; a read-only store does not rebuild it
        assert all_digests(node) == before

        with FileStore.open(str(node)) as s:
            assert (s.end_index, s.write_pos) == (keep - 1, keep_end)
            got = [s.get_bytes(i) for i in range(keep)]
            assert got == on_disk[:keep]
            assert [masked(g, g) for g in got] == [masked(r, g) for r, g in zip(raw, got)]
            assert all(parse_header(g)["magic"] in (1, 2, 3) for g in got)
            after = file_digests(node)
        with FileStore.open(str(node)) as s:
            assert not s.recovery.changed
            assert s.end_index == keep - 1
            assert [s.get_bytes(i) for i in range(keep)] == got
        assert file_digests(node) == after
