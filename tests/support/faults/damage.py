"""Damage to a node's files, as a crash or a failing disk leaves it: :func:`tear` (the tail
of a killed node's last data file, a crash mid-write), :func:`flip_committed` (a byte of a
committed entry, bit rot) and :func:`flip_tail` (a byte of an entry past the commit index).
Each returns what it did, for the run's log.
"""

from __future__ import annotations

import os
import random

from store.errors import StoreError
from store.filestore import FileStore
from store.format import (CHAIN_INPUT, CRC_MASK, ENTRY_HEADER, HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, MAGIC_NORMAL,
                          crc32)


def tear(node_dir: str, rng: random.Random) -> str:
    """Damage the tail of a stopped node's last data file as a crash in the middle of a
    write leaves it; returns what was done. Modes: ``cut`` (the file ends inside one of
    the last entries), ``zero`` (from inside one of the last entries to the end of what
    was written, the pages never reached the disk), ``corrupt`` (bytes of one of the last
    entries changed), ``garbage`` (a torn partial entry after the last one)."""
    if not os.path.isdir(node_dir):
        return "nothing to tear (no store yet)"
    with FileStore.open(node_dir, read_only=True) as s:
        if s.end_index < 0:
            return "nothing to tear (empty log)"
        fsize = s.data.file_size
        last_file = (s.write_pos - 1) // fsize * fsize
        tail = []
        i = s.end_index
        while i >= s.begin_index and len(tail) < 3:
            try:
                e = s.get(i)
            except StoreError:  # killed between writing an entry and its index record: the record is missing
                i -= 1
                continue
            if e.pos < last_file:
                break
            tail.append(e)
            i -= 1
        write_pos, end_index, end_term, last_chain = s.write_pos, s.end_index, s.end_term, s.last_chain
    path = os.path.join(node_dir, "data", f"{last_file:020d}")
    mode = rng.choice(("cut", "zero", "corrupt", "garbage"))
    with_body = [e for e in tail if len(e.body) > 0]
    if not tail or (mode == "corrupt" and not with_body):
        mode = "garbage"
    if mode == "garbage":
        # the next entry, header and a part of its body, as a write cut short leaves it
        rel = write_pos - last_file
        body = rng.randbytes(rng.randint(20, 200))
        bcrc = crc32(body) & CRC_MASK
        chain = crc32(CHAIN_INPUT.pack(last_chain, end_index + 1, end_term, bcrc)) & CRC_MASK
        entry = ENTRY_HEADER.pack(MAGIC_NORMAL, HEADER_SIZE + len(body), end_index + 1, end_term, write_pos, 0,
                                  chain, bcrc, len(body)) + body
        junk = entry[: min(fsize - rel, rng.randint(8, len(entry) - 1))]
        with open(path, "r+b") as fh:
            fh.seek(rel)
            fh.write(junk)
        return f"garbage: {len(junk)} of the {len(entry)} bytes of an entry {end_index + 1} after the last one"
    victim = rng.choice(with_body if mode == "corrupt" else tail)
    if mode == "corrupt":  # the rest of its body overwritten (sectors holding other bytes)
        cut_at = victim.pos - last_file + HEADER_SIZE + rng.randint(0, len(victim.body) - 1)
        end = victim.pos - last_file + victim.size
        with open(path, "r+b") as fh:
            fh.seek(cut_at)
            fh.write(rng.randbytes(end - cut_at))
        return f"corrupt: bytes {cut_at}..{end} of {os.path.basename(path)} overwritten, in entry {victim.index}"
    cut_at = victim.pos - last_file + rng.randint(1, victim.size - 1)
    if mode == "cut":
        os.truncate(path, cut_at)
        return f"cut: {os.path.basename(path)} truncated to {cut_at} bytes, inside entry {victim.index}"
    end = write_pos - last_file
    with open(path, "r+b") as fh:
        fh.seek(cut_at)
        fh.write(bytes(end - cut_at))
    return f"zero: bytes {cut_at}..{end} of {os.path.basename(path)} zeroed, from inside entry {victim.index}"


def flip_committed(node_dir: str, index: int, rng: random.Random) -> str:
    """Flip one byte of entry ``index`` in a running member's files (through the files, as a
    failing disk would; its mappings see it): of its body, its header or its index record.
    What was flipped, for the log."""
    recs = sorted((int(n), n) for n in os.listdir(os.path.join(node_dir, "index")) if n.isdigit())
    off = index * INDEX_UNIT_SIZE
    start, name = [r for r in recs if r[0] <= off][-1]
    ipath = os.path.join(node_dir, "index", name)
    with open(ipath, "rb") as fh:
        fh.seek(off - start)
        _m, pos, size, _i, _t = INDEX_RECORD.unpack(fh.read(INDEX_UNIT_SIZE))
    where = rng.choice(("body", "header", "record")) if size > HEADER_SIZE else rng.choice(("header", "record"))
    if where == "record":
        path, at = ipath, off - start + 4 + rng.randrange(2, 8)  # a byte of its pos
    else:
        files = sorted((int(n), n) for n in os.listdir(os.path.join(node_dir, "data")) if n.isdigit())
        fstart, fname = [f for f in files if f[0] <= pos][-1]
        rel = pos - fstart + (rng.randrange(HEADER_SIZE, size) if where == "body" else rng.choice((3, 15, 23, 39)))
        path, at = os.path.join(node_dir, "data", fname), rel
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << rng.randrange(8))]))
    return f"entry {index} {where} byte {at} of {os.path.basename(path)}"


def flip_tail(node_dir: str, committed: int, rng: random.Random, body: bytes | None = None) -> str:
    """Flip one body byte of the last entry in a running (or paused) member's files when it
    lies past ``committed`` (and, given ``body``, holds it); what was done, for the log."""
    try:
        with FileStore.open(node_dir, read_only=True) as st:
            end = st.end_index
            if end <= committed or end < 0:
                return f"nothing past the commit index {committed} to damage (log ends at {end})"
            if body is not None and st.get(end).body != body:
                return f"its last entry {end} is not the probe (the probe was not taken)"
            pos, size = st.locate(end)
            fstart = pos - pos % st.data_file_size
    except StoreError as exc:
        return f"log unreadable ({exc})"
    if size <= HEADER_SIZE:
        return f"entry {end} has no body to damage"
    at = pos - fstart + rng.randrange(HEADER_SIZE, size)
    path = os.path.join(node_dir, "data", f"{fstart:020d}")
    with open(path, "r+b") as fh:
        fh.seek(at)
        b = fh.read(1)[0]
        fh.seek(at)
        fh.write(bytes([b ^ (1 << rng.randrange(8))]))
    return f"entry {end} (past commit index {committed}) body byte {at} of {os.path.basename(path)}"
