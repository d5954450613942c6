"""``mq check`` and ``mq topics`` in bounded memory: one walk of the log, a batch at a time.

What a batch of messages needs is read into columns (:func:`walk`, shared with check.py's
whole-log path), used, and dropped. Per topic and queue only a few counters are kept (the
rows of ``mq topics``; the last queue offset seen, for ``queue-offset``), and per consume
queue a cursor into its files (:class:`Cursor`, a chunk of units at a time). Units and
messages are both in commit-log order, so matching them is a merge: before a batch is
judged, every queue gives up its units up to the batch's last message (a unit points at a
message of this batch, at none, or before the log), then the batch's messages that no unit
pointed at are holes or missing.

Invariants that make the merge exact (else :class:`Unbounded` is raised, and check.py reads
the whole log as it did before):

- the messages' commit-log offsets only go up (data files do not overlap);
- each queue's units' offsets never go back (``Queue.ascending``), or the queue is merged
  as the runs in which they do not (:class:`Runs`), up to ``MAX_RUNS`` such runs in all.

What still grows with the store: the findings, and the messages no unit points at (those
below where a broker restarts dispatch are ``cq-missing`` runs, the others are counted) --
none on a store whose queues are dispatched.
"""

from __future__ import annotations

import numpy as np

from ..format import HEADER_SIZE
from .consumequeue import (BLANK_SIZE, CQ_STORE_UNIT_SIZE, Piece, _rel, expected_file, file_size, find_queues,
                           offsets, plan_units, read_piece)
from .layout import batch_queue_keys
from .logwalk import _finding, _key, place, walk

CHUNK = 1 << 12  # units of a queue read at a time
# cursors more than one per queue (runs of queues whose units go back) merged at once, each
# holding up to a chunk (80 KB): more, and the whole-log path runs instead
MAX_RUNS = 256
PAST_LOG, ELSEWHERE, MISMATCH = 0, 1, 2  # what a unit that is a finding does (check._match_units)


class Unbounded(Exception):
    """The store breaks an invariant of the merge: read the whole log instead."""


class Capped(list):
    """Findings in order, the first ``limit`` kept (and every ``damage`` one: one per data
    file at most), all counted: ``total``, and ``dropped`` of the kinds ``not-a-message``."""

    def __init__(self, limit: int | None):
        super().__init__()
        self.limit = limit
        self.total = 0
        self.not_messages = 0

    def append(self, f: dict) -> None:
        self.total += 1
        self.not_messages += f["finding"] == "not-a-message"
        if self.limit is None or len(self) < self.limit or f["finding"] == "damage":
            super().append(f)


class Log:
    """What the walk learns of the log as a whole."""

    def __init__(self):
        self.topics: dict[str, int] = {}  # topic -> id
        self.names: list[str] = []  # id -> topic
        self.entries = 0
        self.messages = 0
        self.first_pos = self.end_pos = -1
        self.last = (-1, -1)  # the last entry walked: (pos, index)
        self.files: set = set()
        self.places: dict = {}  # file start -> (its directory, shift): logwalk.place

    def topic_id(self, name: str) -> int:
        tid = self.topics.get(name)
        if tid is None:
            tid = self.topics[name] = len(self.topics)
            self.names.append(name)
        return tid

    def topic_names(self) -> list[str]:
        return self.names


def _overlaps(c, file_ends: dict) -> bool:
    """Does a data file hold messages past where the next file read begins (check._overlapped)?"""
    starts = sorted(c.files)
    nxt = {s: starts[i + 1] for i, s in enumerate(starts[:-1])}
    return any(s in nxt and end > nxt[s] for s, end in file_ends.items())


class Cursor:
    """One queue's units in order, ``CHUNK`` at a time."""

    def __init__(self, pieces: list[Piece]):
        self.pieces = list(reversed(pieces))
        self.buf = None
        self.at = 0  # queue offset of buf[0]
        self.pos = 0  # units of buf given up
        self.skip = 0  # units of the next piece read

    def _load(self) -> bool:
        while self.pieces:
            p = self.pieces[-1]
            n = min(CHUNK, p.count - self.skip)
            self.buf, self.at, self.pos = read_piece(p, self.skip, n), p.at + self.skip, 0
            self.skip += n
            if self.skip >= p.count or len(self.buf) < n:
                self.pieces.pop()
                self.skip = 0
            if len(self.buf):
                return True
        self.buf = None
        return False

    def upto(self, hi: int | None) -> list[tuple[int, np.ndarray]]:
        """The units not given up yet that point at ``hi`` or before (all with None), as
        (queue offset of the first, units) runs."""
        out = []
        while True:
            if self.buf is None or self.pos >= len(self.buf):
                if not self._load():
                    return out
            n = len(self.buf) - self.pos if hi is None else \
                int(np.searchsorted(self.buf["offset"][self.pos:], hi, "right"))
            if n:
                out.append((self.at + self.pos, self.buf[self.pos:self.pos + n]))
                self.pos += n
            if self.pos < len(self.buf):
                return out


def bounded_topics(broker, *, data_file_size=None, index_file_size=None, progress=None, notes=None) -> list[dict]:
    """check.topic_rows, a batch at a time (raises :class:`Unbounded` where data files overlap)."""
    c = Log()
    acc: dict[int, list] = {}  # queue key -> [messages, bytes, min/max queue offset, min/max store time, queue id]
    file_ends: dict[int, int] = {}
    for b, a in walk(broker, None, c, data_file_size=data_file_size, index_file_size=index_file_size,
                     progress=progress, notes=notes):
        file_ends[b.start] = max(file_ends.get(b.start, -1), int((a["phy"] + a["size"]).max()))
        key = _key(a["topic"], a["queue_id"])
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        count = np.diff(np.r_[starts, len(key)])
        size, qo, ts = a["size"][order], a["queue_offset"][order], a["store_ts"][order]
        nbytes = np.add.reduceat(size, starts)
        qmin, qmax = np.minimum.reduceat(qo, starts), np.maximum.reduceat(qo, starts)
        tmin, tmax = np.minimum.reduceat(ts, starts), np.maximum.reduceat(ts, starts)
        for g, k in enumerate(key[starts].tolist()):
            r = acc.get(k)
            if r is None:
                acc[k] = [int(count[g]), int(nbytes[g]), int(qmin[g]), int(qmax[g]), int(tmin[g]), int(tmax[g]),
                          int(a["queue_id"][order[starts[g]]])]
            else:
                r[0] += int(count[g])
                r[1] += int(nbytes[g])
                r[2], r[3] = min(r[2], int(qmin[g])), max(r[3], int(qmax[g]))
                r[4], r[5] = min(r[4], int(tmin[g])), max(r[5], int(tmax[g]))
    if _overlaps(c, file_ends):
        raise Unbounded("data files overlap")
    rows: dict[tuple[str, int], dict] = {}
    for k in sorted(acc):
        n, nbytes, qmin, qmax, tmin, tmax, qid = acc[k]
        t = c.names[k >> 32]
        rows[(t, qid)] = {"topic": t, "queue_id": qid, "messages": n, "bytes": nbytes, "first_queue_offset": qmin,
                          "last_queue_offset": qmax, "first_store_time": tmin, "last_store_time": tmax}
    return queue_rows(broker, rows, notes)



def queue_rows(broker, rows: dict, notes: list | None) -> list[dict]:
    """``mq topics``' rows (``rows``: (topic, queue id) -> the messages' columns) with each
    consume queue's columns added (first and last queue offset, units; the queue's files
    planned, not read: only their counts are needed), a row of its own for a queue no
    message reached, sorted. Both paths end here (check.topic_rows_whole too)."""
    if broker.has_consume_queues:
        queues = find_queues(broker.root)
        fsize = file_size(queues)
        for q in queues:
            plan_units(q, fsize)
            if notes is not None:
                notes += [f"{path}: {detail}" for path, _off, detail in q.damaged]
            row = rows.setdefault((q.topic if q.utf8 else "\0" + q.topic, q.queue_id),
                                  {"topic": q.topic, "queue_id": q.queue_id, "messages": 0, "bytes": 0,
                                   "first_queue_offset": None, "last_queue_offset": None, "first_store_time": None,
                                   "last_store_time": None})
            n = q.count
            row.update(cq_first=q.first if n else None, cq_last=q.end - 1 if n else None, cq_units=n)
    for row in rows.values():
        row.setdefault("cq_first", None)
        row.setdefault("cq_last", None)
        row.setdefault("cq_units", None)
    return sorted(rows.values(), key=lambda r: (r["topic"], r["queue_id"]))

def unit_of(u: np.ndarray, k: int) -> dict:
    """Unit ``k`` of ``u`` as plain numbers (not a view that keeps the chunk)."""
    return {"offset": int(u["offset"][k]), "size": int(u["size"][k]), "tags": int(u["tags"][k])}


class Runs:
    """A queue whose units go back, as its ascending runs (:func:`ascending_runs`), a
    :class:`Cursor` each: the units up to an offset are each run's up to it (runs of
    consecutive queue offsets, as a Cursor gives them; unit findings are sorted by queue
    offset when reported, so the order they come in does not matter)."""

    def __init__(self, runs: list[list[Piece]]):
        self.cursors = [Cursor(r) for r in runs]

    def upto(self, hi: int | None) -> list[tuple[int, np.ndarray]]:
        out = []
        for cur in self.cursors:
            out += cur.upto(hi)
        return out


def ascending_runs(pieces: list[Piece], budget: int) -> list[list[Piece]]:
    """A queue's pieces cut where a unit's offset goes below the one before it: runs in each
    of which the offsets never go back, read ``CHUNK`` units at a time. Raises
    :class:`Unbounded` past ``budget`` runs (each holds a chunk of units while merged)."""
    runs: list[list[Piece]] = []
    cur: list[Piece] = []
    prev = None
    for p in pieces:
        start = 0  # the current run's first unit in p
        for skip in range(0, p.count, CHUNK):
            offs = read_piece(p, skip, min(CHUNK, p.count - skip))["offset"]
            if not len(offs):
                break
            back = (np.flatnonzero(offs[1:] < offs[:-1]) + 1 + skip).tolist()
            if prev is not None and int(offs[0]) < prev:
                back.insert(0, skip)
            for b in back:
                if b > start:
                    cur.append(Piece(p.at + start, p.path, p.byte + start * CQ_STORE_UNIT_SIZE, b - start))
                runs.append(cur)
                if len(runs) >= budget:
                    raise Unbounded("a queue's units go back too often")
                cur, start = [], b
            prev = int(offs[-1])
        if p.count > start:
            cur.append(Piece(p.at + start, p.path, p.byte + start * CQ_STORE_UNIT_SIZE, p.count - start))
    return runs + [cur] if cur else runs


def _stage(queues: list, fsize: int) -> list[tuple]:
    """Each queue's cursor; a queue whose units go back, a cursor per ascending run
    (:class:`Runs`: at most ``MAX_RUNS`` more than one per queue in all, else
    :class:`Unbounded`)."""
    out = []
    budget = MAX_RUNS
    for q in queues:
        pieces = plan_units(q, fsize)
        if q.ascending:
            out.append((q, Cursor(pieces)))
            continue
        runs = ascending_runs(pieces, budget + 1)
        budget -= len(runs) - 1
        out.append((q, Runs(runs)))
    return out


def span_table(c, queues: list) -> tuple:
    """(sorted queue keys, first and end queue offset of each one's only span, {key: queue} of
    all, [(key, queue)] of those with more than one span) for the topics the log holds."""
    spans: dict[int, object] = {}  # (the last queue of a key wins, as check_queues has it)
    for q in queues:
        tid = c.topics.get(q.topic, -1) if q.utf8 else -1
        if tid >= 0:
            spans[int(_key(tid, q.queue_id))] = q
    ks = np.array(sorted(spans), np.int64)
    lo, hi, multi = np.zeros(len(ks), np.int64), np.zeros(len(ks), np.int64), []
    for j, k in enumerate(ks.tolist()):
        q = spans[k]
        if len(q.spans) == 1:
            lo[j], hi[j] = q.spans[0][0], q.spans[0][0] + q.spans[0][1]
        elif q.spans:
            multi.append((k, q))
    return ks, lo, hi, spans, multi


def inside(table: tuple, key: np.ndarray, qo: np.ndarray) -> np.ndarray:
    """Whether each message's queue offset lies in one of its queue's spans."""
    ks, lo, hi, _spans, multi = table
    if not len(ks):
        return np.zeros(len(key), bool)
    j = np.minimum(np.searchsorted(ks, key), len(ks) - 1)
    out = (ks[j] == key) & (qo >= lo[j]) & (qo < hi[j])
    for k, q in multi:
        rows = np.flatnonzero(key == k)
        for first, n in q.spans:
            out[rows] |= (qo[rows] >= first) & (qo[rows] < first + n)
    return out



def missing(topic, queue_id, qo, index, names: list, spans: dict, fsize: int, reput: int, findings: list,
            batch_queued: frozenset = frozenset(), in_use: bool = False) -> int:
    """``cq-missing``: one finding per run of consecutive queue offsets of one queue whose
    messages (these, in log order) no unit points at, though they lie before where dispatch
    restarts (``reput``). Not for the queues in ``batch_queued`` ((topic, queue id) of
    RocketMQ 5's ``batchconsumequeue/``, where their units are: not read here). With
    ``in_use`` (a running broker writes the store), a run past its queue's last unit, or of
    a queue not there yet, is in flight (dispatched after its queue's files were read): not
    a finding. Returns how many messages were taken as in flight."""
    if batch_queued and len(qo):
        keep = np.array([(names[t], int(q)) not in batch_queued for t, q in zip(topic.tolist(), queue_id.tolist())],
                        bool)
        topic, queue_id, qo, index = topic[keep], queue_id[keep], qo[keep], index[keep]
    if not len(qo):
        return 0
    flying = 0
    key = _key(topic, queue_id)
    order = np.lexsort((qo, key))
    key, qo, index, topic, queue_id = key[order], qo[order], index[order], topic[order], queue_id[order]
    starts = np.flatnonzero(np.r_[True, (key[1:] != key[:-1]) | (qo[1:] != qo[:-1] + 1)])
    for lo, hi in zip(starts.tolist(), np.r_[starts[1:], len(qo)].tolist()):
        k = int(key[lo])
        t, qid, q = names[topic[lo]], int(queue_id[lo]), spans.get(k)
        first, last = int(qo[lo]), int(qo[hi - 1])
        if in_use and (q is None or not q.spans or first >= q.end):
            flying += hi - lo
            continue
        path, off = expected_file(t, qid, first, fsize)
        holds = ("it has no consume queue" if q is None else "its consume queue holds no unit" if not q.spans
                 else f"its units begin at queue offset {q.first}" if last < q.first
                 else f"its units end at queue offset {q.end - 1}" if first >= q.end
                 else "its files leave them out")
        # (messages of an old commit log before a DLedger log have no entry index: -1)
        entries = f", {offsets(int(index[lo]), int(index[hi - 1]), 'entry', 'entries')}" if index[lo] >= 0 else ""
        findings.append(_finding(
            "cq-missing", path, off, int(index[lo]), topic=t, queue_id=qid, queue_offset=first,
            detail=f"{offsets(first, last)} ({hi - lo} message{'s' if hi - lo > 1 else ''}{entries}) "
                   f"{'is' if hi - lo == 1 else 'are'} in no unit ({holds}): a broker "
                   f"restarts dispatch at commit-log offset {reput}, past them, so consumers never get them"))
    return flying


def blanks_only(q, end_pos: int) -> dict | None:
    """A finding when ``q`` holds fillPreBlank units (0, Integer.MAX_VALUE, 0) and no other:
    ``ConsumeQueue.recover`` takes each as written, so the queue's maxPhysicOffset is
    Integer.MAX_VALUE, which recovery's ``truncateDirtyLogicFiles`` keeps (it cuts by a unit's
    offset, 0 here), and ``DefaultMessageStore.start`` resumes dispatch at the largest
    queue's: past the log's end (``end_pos``), nothing the broker stores next would reach a
    consume queue."""
    if not q.blanks or q.count or q.damaged or not q.files or BLANK_SIZE <= end_pos:
        return None
    return _finding("cq-blanks-only", _rel(q, q.files[0].path), 0, None, topic=q.topic, queue_id=q.queue_id,
                    detail=f"{q.blanks} fillPreBlank units and no other: RocketMQ takes {BLANK_SIZE} as the queue's "
                           f"maxPhysicOffset and resumes dispatch there, past the log's end at {end_pos} (nothing "
                           f"stored next would reach a consume queue); remove the queue's directory (its offsets "
                           f"restart at 0) or move the store again")


def unit_finding(kind: str, q, qoff: int, unit, detail: str) -> dict:
    path, off = q.file_of(qoff)
    return _finding(kind, path, off, None, topic=q.topic, queue_id=q.queue_id, queue_offset=qoff,
                    detail=f"unit ({int(unit['offset'])}, {int(unit['size'])}, {int(unit['tags'])}) {detail}")


def mismatch(a: dict, i: int, names: list, tid: int, qid: int, qoff: int, unit) -> str:
    """How message ``i`` differs from the unit (queue ``tid``/``qid``, offset ``qoff``) pointing at it."""
    differ = [f"its topic is {names[a['topic'][i]]}" if a["topic"][i] != tid else "",
              f"its queue is {a['queue_id'][i]}" if a["queue_id"][i] != qid else "",
              f"its queue offset is {a['queue_offset'][i]}" if a["queue_offset"][i] != qoff else "",
              f"its size is {a['size'][i]}" if a["size"][i] != unit["size"] else "",
              f"its tag code is {a['tags'][i]}" if not tags_ok(a, i, int(unit["tags"])) else ""]
    return f"points at entry {a['index'][i]}, but " + ", ".join(d for d in differ if d)


def tags_ok(a: dict, i: int, got: int) -> bool:
    """Does a unit's tag code ``got`` fit message ``i`` (see check._match_units)?"""
    return bool(a["tags"][i] == got or (a["delay"][i] and got >= a["store_ts"][i]))


_EMPTY = {"phy": np.int64, "topic": np.int32, "queue_id": np.int32, "queue_offset": np.int64, "size": np.int64,
          "tags": np.int64, "delay": np.bool_, "store_ts": np.int64, "index": np.int64}
_LACK = ("topic", "queue_id", "queue_offset", "index", "phy")


class _Reach:
    """The commit-log offset a broker restarts dispatch from (check._reput_from), as far as
    the units seen so far tell: ends of units past the log's end so far wait."""

    def __init__(self):
        self.best = 0
        self.waiting: list[np.ndarray] = []

    def add(self, u: np.ndarray, end_pos: int) -> None:
        ends = u["offset"].astype(np.int64) + u["size"]
        ok = ends <= end_pos
        if ok.any():
            self.best = max(self.best, int(ends[ok].max()))
        if not ok.all():
            self.waiting.append(ends[~ok])

    def now(self, c) -> int:
        if self.waiting:
            keep = []
            for w in self.waiting:
                ok = w <= c.end_pos
                if ok.any():
                    self.best = max(self.best, int(w[ok].max()))
                if not ok.all():
                    keep.append(w[~ok])
            self.waiting = keep
        return max(max(c.first_pos, 0), self.best)


def bounded_check(broker, matcher, *, data_file_size=None, index_file_size=None, progress=None,
                  max_findings: int | None = None, in_use: bool = False) -> tuple:
    """check.check_broker, a batch at a time: (findings, summary). ``matcher`` is
    check._match_units. Raises :class:`Unbounded` where the merge's invariants do not hold.
    With ``max_findings``, the first that many findings are kept (summary ``findings``
    counts them all). ``in_use``: a running broker writes the store (stream.missing; units
    past the log's end are in flight too), summary ``in_flight`` counts what was so taken."""
    cap = max_findings
    in_flight = 0
    findings = Capped(cap)
    c = Log()
    has_cq = broker.has_consume_queues
    queues = find_queues(broker.root) if has_cq else []
    fsize = file_size(queues)
    staged = _stage(queues, fsize)
    flagged: list[list] = [[] for _ in staged]
    qo_found, holes, pending, below = Capped(cap), Capped(cap), [], []
    last_qo: dict[int, int] = {}
    file_ends: dict[int, int] = {}
    units = before_log = 0
    first_phy, hi = None, -1
    reach = _Reach()
    table, known = None, -1
    for b, a in walk(broker, findings, c, data_file_size=data_file_size, index_file_size=index_file_size,
                     progress=progress):
        phy = a["phy"]
        if int(phy[0]) <= hi or not (phy[1:] > phy[:-1]).all():
            raise Unbounded("the messages' offsets go back")
        hi = int(phy[-1])
        c.messages += len(phy)
        file_ends[b.start] = max(file_ends.get(b.start, -1), int((phy + a["size"]).max()))
        if first_phy is None:
            first_phy = int(phy[0])
        key = _key(a["topic"], a["queue_id"])
        _queue_order(a, key, last_qo, c, qo_found)
        if not has_cq:
            continue
        covered = np.zeros(len(phy), bool)
        for j, (q, cur) in enumerate(staged):
            runs = cur.upto(hi)
            if not runs:
                continue
            tid = c.topics.get(q.topic, -1) if q.utf8 else -1
            for first, u in runs:
                units += len(u)
                reach.add(u, c.end_pos)
                before, got = matcher(a, u, first, tid, q.queue_id, first_phy, hi, covered)
                before_log += before
                for k, code, i in got:
                    unit = unit_of(u, k)
                    flagged[j].append((code, first + k, unit, mismatch(a, i, c.names, tid, q.queue_id, first + k, unit)
                                       if code == MISMATCH else ""))
                _trim(flagged, j, cap)
        if len(c.topics) != known:
            table, known = span_table(c, queues), len(c.topics)
        disp = a["dispatched"]
        ins = inside(table, key, a["queue_offset"]) & disp
        for i in np.flatnonzero(ins & ~covered).tolist():
            q = table[3][int(key[i])]
            qoff = int(a["queue_offset"][i])
            path, off = q.file_of(qoff)
            holes.append(_finding("cq-hole", path, off, int(a["index"][i]), topic=q.topic, queue_id=q.queue_id,
                                  queue_offset=qoff, detail="no unit points at this message, though its queue goes "
                                                            "past it"))
        lack = np.flatnonzero(disp & ~ins & ~covered)
        if len(lack):
            pending.append({k: a[k][lack] for k in _LACK})
        _flush(pending, below, reach.now(c))
    if _overlaps(c, file_ends):
        raise Unbounded("data files overlap")
    summary = {"node_dir": broker.node_dir, "entries": c.entries, "messages": c.messages,
               "topics": len(c.topics), "consume_queues": None, "units": None, "units_before_log": None,
               "undispatched": None, "no_messages": False}
    total = findings.total + qo_found.total
    out = list(findings) + list(qo_found)
    if not c.messages and not has_cq:
        summary["no_messages"] = bool(c.entries)
        out = [f for f in out if f["finding"] != "not-a-message"]
        total -= findings.not_messages
    findings = Capped(cap)
    if has_cq:
        last_phy = hi if c.messages else -1
        first_phy = first_phy if c.messages else c.end_pos + HEADER_SIZE
        empty = {k: np.empty(0, t) for k, t in _EMPTY.items()}
        for j, (q, cur) in enumerate(staged):
            tid = c.topics.get(q.topic, -1) if q.utf8 else -1
            for first, u in cur.upto(None):
                units += len(u)
                reach.add(u, c.end_pos)
                before, got = matcher(empty, u, first, tid, q.queue_id, first_phy, last_phy, np.zeros(0, bool))
                before_log += before
                flagged[j] += [(code, first + k, unit_of(u, k), "") for k, code, _i in got]
                _trim(flagged, j, cap)
            for path, off, detail in q.damaged:
                findings.append(_finding("cq-damaged", path, off, None, topic=q.topic, queue_id=q.queue_id,
                                         detail=detail))
            if (blank := blanks_only(q, c.end_pos)) is not None:
                findings.append(blank)
            findings.total += getattr(flagged[j], "dropped", 0)
            for code, qoff, unit, detail in sorted(flagged[j], key=lambda f: (f[0], f[1])):
                p = unit["offset"]
                if code == PAST_LOG and in_use:
                    in_flight += 1  # (dispatched after the log's end was read)
                elif code == PAST_LOG:
                    findings.append(unit_finding("cq-past-log-end", q, qoff, unit,
                                                 f"points at {p}, past the log's last message at {last_phy}"))
                elif code == ELSEWHERE:
                    findings.append(unit_finding("cq-elsewhere", q, qoff, unit, f"points at {p}, where no message starts"))
                else:
                    findings.append(unit_finding("cq-mismatch", q, qoff, unit, detail))
        for f in holes:
            findings.append(f)
        findings.total += holes.total - len(holes)
        reput = reach.now(c)
        _flush(pending, below, reput)
        lost = {k: np.concatenate([p[k] for p in below]) if below else np.empty(0, np.int64) for k in _LACK}
        table = span_table(c, queues)
        in_flight += missing(lost["topic"], lost["queue_id"], lost["queue_offset"], lost["index"], c.names, table[3],
                             fsize, reput, findings, batch_queue_keys(broker.root), in_use)
        summary.update(consume_queues=len(queues), units=units, units_before_log=before_log,
                       undispatched=sum(len(p["phy"]) for p in pending))
    summary["findings"] = total + findings.total
    summary["in_flight"], summary["in_use"], summary["last_entry"] = in_flight, in_use, c.last
    return (out + list(findings))[:cap], summary


class _Flagged(list):
    """A queue's unit findings once trimmed (:func:`_trim`): ``dropped`` of them are not kept."""

    dropped = 0


def _trim(flagged: list, j: int, cap: int | None) -> None:
    """Keep a queue's ``cap`` first unit findings (by kind and queue offset, as they are
    reported) once it holds twice as many."""
    f = flagged[j]
    if cap is None or len(f) <= 2 * cap + 64:
        return
    kept = _Flagged(sorted(f, key=lambda x: (x[0], x[1]))[:cap])
    kept.dropped = getattr(f, "dropped", 0) + len(f) - len(kept)
    flagged[j] = kept


def _flush(pending: list, below: list, reach: int) -> None:
    """Move the waiting messages (in log order) that lie below ``reach`` to ``below``."""
    while pending:
        p = pending[0]
        n = int(np.searchsorted(p["phy"], reach, "left"))
        if n == 0:
            return
        if n == len(p["phy"]):
            below.append(pending.pop(0))
        else:
            below.append({k: v[:n] for k, v in p.items()})
            pending[0] = {k: v[n:] for k, v in p.items()}
            return


def _queue_order(a: dict, key: np.ndarray, last: dict, c, found: list) -> None:
    """``queue-offset`` findings of a batch: a dispatched message whose queue offset does not
    follow the one before it in its queue (``last``: each queue's, carried from batch to batch)."""
    d = np.flatnonzero(a["dispatched"])
    if not len(d):
        return
    topic, qid = a["topic"][d], a["queue_id"][d]
    width = int(qid.max()) + 1
    if qid.min() >= 0 and (int(topic.max()) + 1) * width < 1 << 15:  # (a stable sort of int16 is a radix sort)
        order = np.argsort(topic.astype(np.int16) * np.int16(width) + qid.astype(np.int16), kind="stable")
    else:
        order = np.argsort(key[d], kind="stable")
    ks, q = key[d][order], a["queue_offset"][d][order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    prev = np.empty(len(q), np.int64)
    prev[1:] = q[:-1]
    has = np.ones(len(q), bool)
    for s, e, k in zip(starts.tolist(), (np.r_[starts[1:], len(q)] - 1).tolist(), ks[starts].tolist()):
        p = last.get(k)
        if p is None:
            has[s] = False
        else:
            prev[s] = p
        last[k] = int(q[e])
    bad = np.flatnonzero(has & (q != prev + 1))
    for j in sorted(bad.tolist(), key=lambda j: int(order[j])):
        i = int(d[order[j]])
        fstart = int(a["fstart"][i])
        findings_file, off = place(c, fstart, int(a["phy"][i]))
        found.append(_finding("queue-offset", findings_file, off, int(a["index"][i]), topic=c.names[a["topic"][i]],
                              queue_id=int(a["queue_id"][i]), queue_offset=int(q[j]),
                              detail=f"queue offset {int(q[j])} follows {int(prev[j])} in its queue"))
