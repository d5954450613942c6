"""Read-only views of a node directory as plain rows (dicts): data records, index records,
checkpoint/currterm against the data, and the difference between two replicas.

Every function here opens files read-only and yields rows lazily, so memory stays flat as
the store grows. Row field names are stable; the man pages document them.
"""

from __future__ import annotations

import json
from typing import Iterator

from .filestore import FileStore
from .format import HEADER_SIZE, INDEX_RECORD, INDEX_UNIT_SIZE, MAGIC_CONFIG
from .errors import StoreCorruptError
from .layout import NodeLayout
from .metafiles import read_checkpoint, read_currterm
from .reading import Selection, open_lists, render_body, start_file
from .scan import BAD_BODY_CRC, BAD_CHAIN_CRC, NO_CRC, OK, FileScan

CRC_TEXT = {OK: "ok", NO_CRC: "none", BAD_BODY_CRC: "bad-body", BAD_CHAIN_CRC: "bad-chain"}


def inspect_data(node_dir: str, sel: Selection | None = None, *, body: str = "none", all_records: bool = False,
                 data_file_size: int | None = None, index_file_size: int | None = None) -> Iterator[dict]:
    sel = sel or Selection()
    layout = NodeLayout(node_dir)
    data, index = open_lists(layout.node_dir, data_file_size, index_file_size)
    try:
        first = start_file(data, index, sel)
        prev = (None, None, None)
        for f in data.files[first:]:
            fname = f"data/{f.name}"
            if all_records:
                yield _data_row(fname, f.start, "file", None, None, f"file of {f.actual_size} bytes")
            scan = FileScan(f.view(), f.start, file_size=data.file_size, include_blank=all_records,
                            prev_index=prev[0], prev_term=prev[1], prev_chain=prev[2])
            done = False
            for e in scan:
                if e.kind == "blank":
                    if sel.pos is None or sel.pos == e.offset:
                        yield _data_row(fname, f.start, "blank", e, None, "padding to the file end")
                    continue
                if sel.past(e.index, e.offset):
                    done = True
                    break
                if sel.wants(e.index, e.offset):
                    text, note = None, ""
                    rel = e.offset - f.start
                    if body != "none":
                        text = render_body(f.mm[rel + HEADER_SIZE : rel + e.size], body)
                    if e.magic == MAGIC_CONFIG:
                        note = config_note(bytes(f.mm[rel + HEADER_SIZE : rel + e.size]))
                    yield _data_row(fname, f.start, "entry", e, text, note)
            prev = (scan.prev_index, scan.prev_term, scan.prev_chain)
            if done:
                return
            stop = scan.stop
            if stop is not None and not stop.clean:
                yield _data_row(fname, f.start, "damage", None, None, f"{stop.reason}: {stop.detail}", offset=stop.offset)
                prev = (None, None, None)
            elif all_records and stop is not None and stop.reason == "end":
                yield _data_row(fname, f.start, "end", None, None, "no entry written past here", offset=stop.offset)
    finally:
        data.close()
        index.close()


def config_note(body: bytes) -> str:
    """What a config entry (magic 3) says: its member list (cluster/raft/membership.py's body)."""
    try:
        o = json.loads(body)
        parts = [f"{k} " + ", ".join(f"{p.split('-', 1)[0]} ({p.split('-', 1)[1]})" for p in o[k].split(";") if p)
                 for k in ("voters", "learners") if o.get(k)]
        return "config: " + "; ".join(parts)
    except (ValueError, KeyError, TypeError, AttributeError, IndexError, RecursionError) as exc:
        return f"config entry, not a member list: {type(exc).__name__ if isinstance(exc, RecursionError) else exc}"


def _data_row(fname, fstart, kind, e, body_text, note, offset=None) -> dict:
    off = e.offset if e is not None else (offset if offset is not None else fstart)
    row = {
        "kind": kind,
        "file": fname,
        "file_offset": off - fstart,
        "pos": off,
        "index": e.index if e is not None and kind == "entry" else None,
        "term": e.term if e is not None and kind == "entry" else None,
        "magic": e.magic if e is not None else None,
        "size": e.size if e is not None else None,
        "body_size": e.body_size if e is not None and kind == "entry" else None,
        "body_crc": e.body_crc if e is not None and kind == "entry" else None,
        "chain_crc": e.chain_crc if e is not None and kind == "entry" else None,
        "crc": CRC_TEXT.get(e.status, "n/a") if e is not None and kind == "entry" else None,
        "status": e.status if e is not None else kind,
        "note": note,
    }
    if body_text is not None:
        row["body"] = body_text
    return row


def inspect_index(node_dir: str, sel: Selection | None = None, *, all_records: bool = False,
                  data_file_size: int | None = None, index_file_size: int | None = None) -> Iterator[dict]:
    """Index records in slot order; stops at the first all-zero slot unless ``all_records``."""
    sel = sel or Selection()
    layout = NodeLayout(node_dir)
    data, index = open_lists(layout.node_dir, data_file_size, index_file_size)
    try:
        for f in index.files:
            if f.mm is None:
                continue
            first_slot = f.start // INDEX_UNIT_SIZE
            lo = sel.lower()
            start_rel = max(0, (lo - first_slot) * INDEX_UNIT_SIZE) if lo is not None else 0
            for rel in range(start_rel, f.actual_size - INDEX_UNIT_SIZE + 1, INDEX_UNIT_SIZE):
                slot = first_slot + rel // INDEX_UNIT_SIZE
                magic, pos, size, idx, term = INDEX_RECORD.unpack_from(f.mm, rel)
                empty = not (magic or pos or size or idx or term)
                if empty and not all_records:
                    return
                if sel.past(slot, pos if sel.pos is not None else -1):
                    return
                if not sel.wants(slot, pos):
                    continue
                status = "empty" if empty else ("ok" if idx == slot else "slot-mismatch")
                yield {"file": f"index/{f.name}", "file_offset": rel, "slot": slot, "magic": magic, "pos": pos,
                       "size": size, "index": idx, "term": term, "status": status}
    finally:
        data.close()
        index.close()


def checkpoint_report(node_dir: str, *, data_file_size: int | None = None,
                      index_file_size: int | None = None) -> list[dict]:
    """checkpoint and currterm beside what the data says; each row flags disagreement."""
    layout = NodeLayout(node_dir)
    cp = read_checkpoint(layout.node_dir)
    try:
        ts, ts_error = read_currterm(layout.node_dir), None
    except StoreCorruptError as exc:  # (shown as a row: the checkpoint and the data are still worth seeing)
        ts, ts_error = None, str(exc)
    with FileStore.open(layout.node_dir, read_only=True, data_file_size=data_file_size,
                        index_file_size=index_file_size) as s:
        begin, end, end_term = s.begin_index, s.end_index, s.end_term

    def row(source, key, value, data_value, status, note=""):
        return {"source": source, "key": key, "value": value, "data": data_value, "status": status, "note": note}

    # status: ok; warning (stale or absent, normal after a crash or before the first write);
    # mismatch (the files contradict each other: committed entries would be missing)
    rows = []
    cp_src = cp.source.rsplit("/", 1)[-1] if cp.source else None
    ts_src = ts.source.rsplit("/", 1)[-1] if ts is not None and ts.source else None
    if cp_src is None:
        rows.append(row("checkpoint", "file", None, None, "warning", "no checkpoint file (nor .bak)"))
    else:
        bak = f"main file not used: {cp.problem}" if cp.problem else ""
        if cp.end_index == end:
            rows.append(row(cp_src, "endIndex", cp.end_index, end, "warning" if bak else "ok", bak))
        elif cp.end_index is None or cp.end_index < end:
            rows.append(row(cp_src, "endIndex", cp.end_index, end, "warning", "behind the data's end (written before "
                                                                               "the last appends)"))
        else:
            rows.append(row(cp_src, "endIndex", cp.end_index, end, "mismatch", "past the data's end"))
        c = cp.committed_index
        if c is None:
            rows.append(row(cp_src, "committedIndex", None, end, "warning", "no committedIndex"))
        elif c > end or (cp.end_index is not None and c > cp.end_index):
            rows.append(row(cp_src, "committedIndex", c, end, "mismatch",
                            "committed index past the end: committed entries are missing"))
        else:
            rows.append(row(cp_src, "committedIndex", c, end, "ok"))
    if ts_error is not None:
        rows.append(row("currterm", "currTerm", None, end_term, "mismatch", ts_error))
    elif ts_src is None:
        rows.append(row("currterm", "file", None, None, "warning", "no currterm file (nor .bak)"))
    else:
        ok = ts.term >= end_term
        rows.append(row(ts_src, "currTerm", ts.term, end_term, "ok" if ok else "mismatch",
                        "" if ok else "lower than the last entry's term"))
        rows.append(row(ts_src, "voteLeader", ts.vote_for or "", None, "ok"))
    rows.append(row("data", "beginIndex", begin, begin, "ok"))
    rows.append(row("data", "endIndex", end, end, "ok"))
    rows.append(row("data", "endTerm", end_term, end_term, "ok"))
    return rows


def diff_stores(dir_a: str, dir_b: str, *, data_file_size: int | None = None,
                index_file_size: int | None = None) -> dict:
    """Last common index and first differing index of two replicas, both sides shown.
    Only the entries both hold are compared (``compared_from``..``compared_to``): replicas
    whose heads were deleted at different points begin apart.

    Replicas keep entries at the same positions, so the data files are compared in large
    blocks first and only the entry holding the first differing byte is decoded.
    """
    sizes = {"data_file_size": data_file_size, "index_file_size": index_file_size}
    with FileStore.open(dir_a, read_only=True, **sizes) as a, FileStore.open(dir_b, read_only=True, **sizes) as b:
        lo = max(a.begin_index, b.begin_index)
        hi = min(a.end_index, b.end_index)
        result = {
            "a": dir_a, "b": dir_b,
            "a_begin": a.begin_index, "a_end": a.end_index, "b_begin": b.begin_index, "b_end": b.end_index,
            # the range both logs hold, which is what is compared (a log's beginning moves
            # when its head files are deleted; entries before the later begin are not compared)
            "compared_from": lo if 0 <= lo <= hi else None, "compared_to": hi if 0 <= lo <= hi else None,
            "last_common_index": None, "first_diff_index": None, "field": None,
            "a_term": None, "b_term": None, "a_size": None, "b_size": None,
            "a_body_crc": None, "b_body_crc": None, "a_chain_crc": None, "b_chain_crc": None,
            "identical": False,
        }
        if a.end_index < 0 or b.end_index < 0 or lo > hi:
            first = lo if a.end_index >= 0 and b.end_index >= 0 else max(a.begin_index, b.begin_index, 0)
            if a.end_index < 0 and b.end_index < 0:
                result.update(identical=True, field=None)  # two empty logs
                return result
            result.update(first_diff_index=first)
            _fill_sides(result, a, b, first)
            return result
        first_diff = _first_differing(a, b, lo, hi)
        if first_diff is None:
            if a.end_index == b.end_index:
                result.update(last_common_index=hi, identical=True)
                return result
            first_diff = hi + 1
            result["field"] = "missing-on-" + ("a" if a.end_index < b.end_index else "b")
        result["last_common_index"] = first_diff - 1 if first_diff > lo else None
        result["first_diff_index"] = first_diff
        _fill_sides(result, a, b, first_diff)
        return result


def _fill_sides(result: dict, a: FileStore, b: FileStore, index: int | None) -> None:
    if index is None:
        return
    sides = {}
    for name, s in (("a", a), ("b", b)):
        try:
            e = s.get(index)
        except Exception:  # outside that side's log, or unreadable
            sides[name] = None
            continue
        sides[name] = e
        result.update({f"{name}_term": e.term, f"{name}_size": e.size, f"{name}_body_crc": e.body_crc,
                       f"{name}_chain_crc": e.chain_crc})
    ea, eb = sides.get("a"), sides.get("b")
    if result["field"] is None and ea is not None and eb is not None:
        for fld, va, vb in (("term", ea.term, eb.term), ("size", ea.size, eb.size), ("pos", ea.pos, eb.pos),
                            ("body_crc", ea.body_crc, eb.body_crc), ("body", ea.body, eb.body),
                            ("chain_crc", ea.chain_crc, eb.chain_crc), ("magic", ea.magic, eb.magic)):
            if va != vb:
                result["field"] = fld
                break
    elif result["field"] is None:
        result["field"] = "missing-on-" + ("a" if ea is None else "b")


def _first_differing(a: FileStore, b: FileStore, lo: int, hi: int) -> int | None:
    """First index in [lo, hi] whose encoded bytes differ, or None."""
    pa, _ = a.locate(lo)
    pb, _ = b.locate(lo)
    if pa != pb or a.data.file_size != b.data.file_size:
        return _first_differing_slow(a, b, lo, hi)
    end_a, _ = a.locate(hi)
    end = end_a + a.locate(hi)[1]
    block = 1 << 20
    pos = pa
    while pos < end:
        fa, fb = a.data.find(pos), b.data.find(pos)
        if fa is None or fb is None:
            return _first_differing_slow(a, b, lo, hi)
        rel = pos - fa.start
        n = min(block, fa.actual_size - rel, fb.actual_size - rel, end - pos)
        if n <= 0:
            return _first_differing_slow(a, b, lo, hi)
        ca, cb = fa.mm[rel : rel + n], fb.mm[rel : rel + n]
        if ca != cb:
            k = next(i for i in range(n) if ca[i] != cb[i])
            return _index_at(a, b, lo, hi, pos + k)
        pos += n
    return None


def _index_at(a: FileStore, b: FileStore, lo: int, hi: int, byte_pos: int) -> int:
    """The entry of ``a`` holding logical ``byte_pos`` (binary search over index records)."""
    left, right = lo, hi
    while left < right:
        mid = (left + right + 1) // 2
        if a.locate(mid)[0] <= byte_pos:
            left = mid
        else:
            right = mid - 1
    # The byte may sit in BLANK padding after entry `left`; the differing entry is then the next.
    pos, size = a.locate(left)
    if byte_pos >= pos + size and left < hi:
        left += 1
    return _first_differing_slow(a, b, left, hi) or left


def _first_differing_slow(a: FileStore, b: FileStore, lo: int, hi: int) -> int | None:
    for i in range(lo, hi + 1):
        if a.get_bytes(i) != b.get_bytes(i):
            return i
    return None
