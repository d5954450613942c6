"""Kept files (``--keep-truncated``, ``store truncate``'s backup) as ``mq salvage`` and ``store
inspect-data`` read them, fuzzed (issue 59): a kept file written by the store's own writer from
messages of tests/support/rmq_encode.py, then cut short, padded, or with bytes changed at
random places. Whatever the bytes, reading gives whole entries up to the first place that
is not one and then one StoreCorruptError naming it (never another exception, never a hang),
and every message taken from a kept entry is one the writer put there or is read from a
body changed in a way its decoder accepts."""

from __future__ import annotations

import os
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from store.errors import StoreCorruptError
from store.format import HEADER_SIZE, encode_entry
from store.kept import iter_kept, kept_rows, write_kept
from store.rocketmq.salvage import Salvage, read_kept
from tests.support.rmq_encode import encode_message

BODIES = [encode_message(topic=f"T{i % 3}", body=b"m%03d" % i * (1 + i % 5), queue_offset=i,
                         properties={"UNIQ_KEY": f"U{i:04d}", "KEYS": f"k{i}"}) for i in range(12)]


def pristine() -> bytes:
    out, pos, chain = b"", 1000, 0
    for i, body in enumerate(BODIES):
        raw = encode_entry(body, index=100 + i, term=3, pos=pos, prev_chain=chain)
        chain = int.from_bytes(raw[36:40], "big")
        out += raw
        pos += len(raw)
    return out


PRISTINE = pristine()


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(0, len(PRISTINE)), pad=st.binary(max_size=80),
       flips=st.lists(st.tuples(st.integers(0, len(PRISTINE) - 1), st.integers(1, 255)), max_size=6))
def test_any_kept_file_reads_as_whole_entries_then_one_error(cut, pad, flips):
    data = bytearray(PRISTINE)
    for at, x in flips:
        data[at] ^= x
    data = bytes(data[:cut]) + pad
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "truncated-100-111-1.entries")
        with open(path, "wb") as fh:
            fh.write(data)
        got, error = [], None
        try:
            for off, h, body in iter_kept(path):
                assert h.size == HEADER_SIZE + len(body) and off + h.size <= len(data)
                got.append((off, h))
        except StoreCorruptError as exc:
            error = str(exc)
        ends = sum(h.size for _o, h in got)
        assert (error is None) == (ends == len(data)), (error, ends, len(data))
        if error is not None:
            assert f"offset {ends}" in error or f"at offset {ends}" in error
        rows = list(kept_rows(path))  # (inspect-data's rows: the damage is a last row, never raised)
        assert [r["status"] for r in rows if r["kind"] == "damage"] == ([] if error is None else ["damage"])
        assert all(r["status"] in ("ok", "bad-body", "bad-chain", "none") for r in rows if r["kind"] == "entry")
        assert len([r for r in rows if r["kind"] == "entry"]) == len(got)
        result = Salvage()
        try:
            read_kept([path], result)
        except StoreCorruptError:
            pass
        read = {h.index for _o, h in got}
        assert {k.index for k in result.kept} <= read  # (a message only from an entry read whole)
        if not flips and not pad:  # (a file cut short: each whole entry's message, as written)
            assert [(k.index, k.message.uniq_key) for k in result.kept] == \
                [(100 + i, f"U{i:04d}") for i in range(len(got))]
            assert all(r["status"] == "ok" for r in rows if r["kind"] == "entry")


def test_write_kept_then_read_round_trips(tmp_path):
    path = str(tmp_path / "k.entries")
    raws = [encode_entry(b, index=5 + i, term=1, pos=48 * i) for i, b in enumerate(BODIES[:3])]
    write_kept(path, raws)
    assert [b for _o, _h, b in iter_kept(path)] == BODIES[:3]
