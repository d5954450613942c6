"""What ``mq topics`` counts and what ``mq check`` finds, over a broker's store.

One walk of the log (scan.py), a batch of messages at a time, reads the columns both need
(stream.py); each consume-queue unit's commit-log offset is looked up among the batch's
messages (a merge: both are in commit-log order), and topic, queue, queue offset, size and
tag code compared. Memory is bounded by the topics and queues, not the messages (a queue
whose units go back is merged as the runs in which they go up: stream.Runs). Where data
files overlap, or queues' units go back more than stream.MAX_RUNS times in all, the merge
does not hold: then the columns of every message are collected (``check_whole``,
``topic_rows_whole``) and the units looked up among them all (``searchsorted``).

Findings (``mq check``), one row each with the file and the byte offset in it:

- ``damage``: a data file's entries cannot be read on from there (store verify says more), or
  data files are missing between two others (a gap: named before what follows from it);
- ``entry-crc``: a DLedger entry's own bodyCrc (dledgerctl records one; DLedger 0.2.7 and
  Java write 0, none) does not match its body: the bytes changed since it was written, in a
  part of the message its BODYCRC may not cover (properties, topic, queue fields);
- ``overlap``: a data file holds messages past where the next file begins (they are left
  out: RocketMQ reads that range from the next file);
- ``not-a-message``: a normal entry whose body is not a RocketMQ message;
- ``body-crc``: a message's body does not match its BODYCRC;
- ``phy-offset``: PHYSICALOFFSET is not the entry's pos + 48 (the leader's append hook
  writes it; a consume queue finds the message there);
- ``queue-id``: a message's QUEUEID is negative (no broker stores one; it is in no queue);
- ``queue-offset``: a message's queue offset does not follow the one before it in its
  topic and queue (transaction halves that are never dispatched are left out);
- ``cq-past-log-end``: a unit points past the log's last message (a follower truncated
  since the broker built it: the broker must rebuild its consume queues);
- ``cq-elsewhere``: a unit points where no message starts;
- ``cq-mismatch``: a unit points at a message of another topic, queue, queue offset, size
  or tag code;
- ``cq-hole``: a message lies inside its queue's range but no unit points at it;
- ``cq-missing``: messages of a queue that no unit points at (its head or tail file is
  missing, or the topic has no queues), below the commit-log offset a broker restarts
  dispatch from (the highest any queue reached: ``DefaultMessageStore.start``), so never
  dispatched; one finding per run of queue offsets, naming the file that should hold them;
- ``cq-damaged``: a consume queue's files do not follow each other;
- ``cq-blanks-only``: a queue of fillPreBlank units only: RocketMQ would take
  Integer.MAX_VALUE as its maxPhysicOffset and resume dispatch there, past the log's end
  (stream.blanks_only).
- ``index-loop``: a hash chain of the broker's ``index/`` files loops (lookup.index_findings:
  a look-up by key stops where it comes back; RocketMQ's walks it up to its result bound).
- on a controller-mode store root, check_replica.py's: the epoch file's errors (``epoch-*``),
  ``index-past-log-end``, ``timer-past-log-end``, ``stale-tail``, ``unconfirmed-tail`` (what
  a slave's truncation, killed half-way, leaves: apache/rocketmq#10666, #10668).
- the configs against the queues (configcheck.py): ``offset-past-end``, ``topic-queues``,
  ``topic-missing``, ``group-topic-missing``.

Units that point before the log's first message are not findings: the log's head files
are deleted before the consume queues' (RocketMQ corrects a queue's minimum offset then).
Messages no unit points at from where dispatch restarts on (not dispatched yet: the
broker dispatches them at its next start) are counted in the summary, not reported. A store
a running broker holds (its ``lock``) is read as it is being written: what its dispatch has
not reached yet is in flight (summary ``in_flight``), not ``cq-missing`` or ``cq-past-log-end``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format import HEADER_SIZE
from .columns import _columns
from ..kinds import CONTROLLER_MODE, detect
from .check_replica import replica_findings
from .configcheck import config_findings
from .commitment import broker_holds
from .consumequeue import UNIT_NATIVE, Queue, file_size, find_queues, read_units
from .layout import BrokerStore, batch_queue_keys
from .logwalk import _finding, _key, place, walk
from .lookup import index_findings
from .stream import (
    ELSEWHERE,
    MISMATCH,
    PAST_LOG,
    Unbounded,
    blanks_only,
    bounded_check,
    bounded_topics,
    missing,
    mismatch,
    queue_rows,
    unit_finding as _unit_finding,
)

_COLUMNS = {"index": np.int64, "phy": np.int64, "size": np.int64, "topic": np.int32, "queue_id": np.int32,
            "queue_offset": np.int64, "store_ts": np.int64, "dispatched": np.bool_, "tags": np.int64,
            "delay": np.bool_, "fstart": np.int64}


@dataclass
class Columns:
    """Per message, in log order: the fields the checks and the counts need."""

    topics: dict[str, int] = field(default_factory=dict)  # topic -> id
    parts: dict[str, list] = field(default_factory=lambda: {k: [] for k in _COLUMNS})
    entries: int = 0  # entries walked (messages or not)
    first_pos: int = -1  # the first entry's pos
    end_pos: int = -1  # just past the last entry
    files: set = field(default_factory=set)  # the first offsets of the data files read
    places: dict = field(default_factory=dict)  # file start -> (its directory, shift): logwalk.place
    last: tuple = (-1, -1)  # the last entry walked: (pos, index)
    _arrays: dict | None = None

    def add(self, **cols) -> None:
        for k, v in cols.items():
            self.parts[k].append(np.asarray(v, _COLUMNS[k]))
        self._arrays = None

    def arrays(self) -> dict[str, np.ndarray]:
        if self._arrays is None:
            self._arrays = {k: np.concatenate(v) if v else np.empty(0, _COLUMNS[k]) for k, v in self.parts.items()}
            self.parts = {k: [a] for k, a in self._arrays.items()}
        return self._arrays

    def keep(self, rows: np.ndarray) -> None:
        """Only the messages ``rows`` (a mask) selects from now on."""
        self._arrays = {k: v[rows] for k, v in self.arrays().items()}
        self.parts = {k: [v] for k, v in self._arrays.items()}

    def topic_id(self, name: str) -> int:
        return self.topics.setdefault(name, len(self.topics))

    def topic_names(self) -> list[str]:
        names = [""] * len(self.topics)
        for t, i in self.topics.items():
            names[i] = t
        return names

    @property
    def messages(self) -> int:
        return sum(len(a) for a in self.parts["index"])


def collect(broker: BrokerStore, findings: list | None, *, data_file_size=None, index_file_size=None,
            progress=None, notes: list | None = None) -> Columns:
    """Walk the log once: columns of every message, and (with ``findings``, a list) what
    ``mq check`` finds in the log itself. Messages are read by the columns' fast path
    (columns.py); the few it leaves (and those found wrong, for the details) by message.decode."""
    c = Columns()
    for _b, cols in walk(broker, findings, c, data_file_size=data_file_size, index_file_size=index_file_size,
                         progress=progress, notes=notes):
        c.add(**cols)
    _overlapped(c, findings)
    if findings is not None:
        _queue_offset_order(c, findings)
    return c


def _overlapped(c: Columns, findings: list | None) -> None:
    """Leave out the messages a data file holds past where the next file begins, or across
    it (a file
    longer than the store's others): RocketMQ reads that range from the next file, which
    is named for it (and DLedger loads no file of another size). One ``overlap`` finding
    per such file."""
    a = c.arrays()
    if len(c.files) < 2 or not len(a["phy"]):
        return
    starts = np.array(sorted(c.files), np.int64)
    nxt = np.searchsorted(starts, a["fstart"], "right")
    over = (nxt < len(starts)) & (a["phy"] + a["size"] > starts[np.minimum(nxt, len(starts) - 1)])
    if not over.any():
        return
    if findings is not None:
        for fstart in np.unique(a["fstart"][over]).tolist():
            rows = np.flatnonzero(over & (a["fstart"] == fstart))
            after = int(starts[np.searchsorted(starts, fstart, "right")])
            first = int(a["phy"][rows[0]]) - HEADER_SIZE
            name, off = place(c, fstart, first + HEADER_SIZE)
            next_name = place(c, after, after)[0]
            findings.append(_finding(
                "overlap", name, off, int(a["index"][rows[0]]),
                detail=f"runs past where {next_name} begins ({after}): its {len(rows)} message"
                       f"{'s' if len(rows) > 1 else ''} from offset {off} on are left out (RocketMQ reads that range "
                       f"from {next_name}; DLedger loads no file of another size)"))
    c.keep(~over)


def _queue_offset_order(c: Columns, findings: list) -> None:
    """A dispatched message whose queue offset does not follow the one before it in its queue."""
    a = c.arrays()
    disp = np.flatnonzero(a["dispatched"])
    if len(disp) < 2:
        return
    key = _small_key(a["topic"], a["queue_id"])
    order = disp[np.argsort(key[disp], kind="stable")]  # per queue, in log order
    k2, q = key[order], a["queue_offset"][order]
    bad = np.flatnonzero((k2[1:] == k2[:-1]) & (q[1:] != q[:-1] + 1)) + 1
    names = c.topic_names()
    for j in sorted(bad.tolist(), key=lambda j: int(order[j])):
        i = int(order[j])
        fstart = int(a["fstart"][i])  # (the file it was read from: files may overlap)
        file, off = place(c, fstart, int(a["phy"][i]))
        findings.append(_finding("queue-offset", file, off, int(a["index"][i]), topic=names[a["topic"][i]],
                                 queue_id=int(a["queue_id"][i]), queue_offset=int(q[j]),
                                 detail=f"queue offset {int(q[j])} follows {int(q[j - 1])} in its queue"))


def check_queues(c: Columns, queues: list[Queue], findings: list, batch_queued: frozenset = frozenset(),
                 in_use: bool = False) -> dict:
    """Every unit of every queue against the messages; returns the summary's counts.
    ``batch_queued``: (topic, queue id) of RocketMQ 5's batch consume queues, whose messages
    are not ``cq-missing`` (their units are in ``batchconsumequeue/``, not read here).
    ``in_use``: a running broker writes the store: its dispatch's tail is in flight
    (stream.missing; units past the log's end), counted as ``in_flight``."""
    a = c.arrays()
    names = c.topic_names()
    phy = a["phy"]
    # the matchers look units up among the messages by commit-log offset: in log order, which
    # is that order, unless data files overlap (then by a sorted copy, the same for both)
    by_phy = None if (phy[1:] > phy[:-1]).all() else np.argsort(phy, kind="stable")
    m = a if by_phy is None else {k: v[by_phy] for k, v in a.items()}
    last_phy = int(m["phy"][-1]) if len(phy) else -1
    first_phy = int(m["phy"][0]) if len(phy) else c.end_pos + HEADER_SIZE
    units = before_log = in_flight = 0
    covered = np.zeros(len(phy), bool)  # (in m's order until the units are matched)
    spans: dict[int, Queue] = {}  # queue key -> queue, for the queues of topics the log holds
    fsize = file_size(queues)
    for q in queues:
        read_units(q, fsize)
        for path, off, detail in q.damaged:
            findings.append(_finding("cq-damaged", path, off, None, topic=q.topic, queue_id=q.queue_id, detail=detail))
        if (blank := blanks_only(q, c.end_pos)) is not None:
            findings.append(blank)
        tid = c.topics.get(q.topic, -1) if q.utf8 else -1
        if tid >= 0:
            spans[_key(tid, q.queue_id)] = q
        flagged = []
        for first, u in q.segments:
            units += len(u)
            before, got = _match_units(m, u, first, tid, q.queue_id, first_phy, last_phy, covered)
            before_log += before
            flagged += [(code, first + k, u[k], i if by_phy is None else int(by_phy[i])) for k, code, i in got]
        for code, qoff, unit, i in sorted(flagged, key=lambda f: (f[0], f[1])):
            p = int(unit["offset"])
            if code == PAST_LOG and in_use:
                in_flight += 1  # (dispatched after the log's end was read)
            elif code == PAST_LOG:
                findings.append(_unit_finding("cq-past-log-end", q, qoff, unit,
                                              f"points at {p}, past the log's last message at {last_phy}"))
            elif code == ELSEWHERE:
                findings.append(_unit_finding("cq-elsewhere", q, qoff, unit, f"points at {p}, where no message starts"))
            else:
                findings.append(_unit_finding("cq-mismatch", q, qoff, unit, mismatch(a, i, names, tid, q.queue_id,
                                                                                      qoff, unit)))
    if by_phy is not None:  # back to log order; a unit points at every message read at its offset
        same = np.flatnonzero(np.r_[True, m["phy"][1:] != m["phy"][:-1]])
        covered = np.repeat(np.maximum.reduceat(covered, same), np.diff(np.r_[same, len(phy)]))
        covered[by_phy] = covered.copy()
    # each message against its queue's segments: inside one, a unit must point at it (a
    # hole if none does)
    qo = a["queue_offset"]
    mkey = _key(a["topic"], a["queue_id"])
    inside = np.zeros(len(phy), bool)
    order = np.argsort(mkey, kind="stable")
    sorted_keys = mkey[order]
    for k, q in spans.items():
        idx = order[np.searchsorted(sorted_keys, k, "left"):np.searchsorted(sorted_keys, k, "right")]
        for first, u in q.segments:
            inside[idx] |= (qo[idx] >= first) & (qo[idx] < first + len(u))
    inside &= a["dispatched"]
    for i in np.flatnonzero(inside & ~covered):
        q = spans[int(mkey[i])]
        path, off = q.file_of(int(qo[i]))
        findings.append(_finding("cq-hole", path, off, int(a["index"][i]), topic=q.topic, queue_id=q.queue_id,
                                 queue_offset=int(qo[i]),
                                 detail="no unit points at this message, though its queue goes past it"))
    # the others no unit points at: below where a broker restarts dispatch, never dispatched
    lacking = a["dispatched"] & ~inside & ~covered
    reput = _reput_from(c, queues)
    below = lacking & (phy < reput)
    in_flight += _missing(c, np.flatnonzero(below), spans, fsize, reput, findings, batch_queued, in_use)
    return {"units": units, "units_before_log": before_log, "undispatched": int((lacking & ~below).sum()),
            "in_flight": in_flight}


def _reput_from(c: Columns, queues: list[Queue]) -> int:
    """The commit-log offset a broker restarts dispatch from: the highest any queue's units
    reached (the end of the message they point at), and at least the log's first
    (``DefaultMessageStore.start``'s ``maxPhysicalPosInLogicQueue``). Units past the log's
    end do not count: the broker's recovery cuts them first (``truncateDirtyLogicFiles``)."""
    reach = max(c.first_pos, 0)
    for q in queues:
        if q.units is not None and len(q.units):
            ends = q.units["offset"].astype(np.int64) + q.units["size"]
            ends = ends[ends <= c.end_pos]
            if len(ends):
                reach = max(reach, int(ends.max()))
    return reach


def _missing(c: Columns, lost: np.ndarray, spans: dict, fsize: int, reput: int, findings: list,
             batch_queued: frozenset, in_use: bool) -> int:
    """``cq-missing`` findings of the messages ``lost`` (stream.missing); how many were in flight."""
    a = c.arrays()
    return missing(a["topic"][lost], a["queue_id"][lost], a["queue_offset"][lost], a["index"][lost],
                   c.topic_names(), spans, fsize, reput, findings, batch_queued, in_use)




def _match_units(a: dict, u: np.ndarray, first: int, tid: int, qid: int, first_phy: int, last_phy: int,
                 covered: np.ndarray) -> tuple[int, list]:
    """One queue's units against the messages: marks the messages they point at in
    ``covered``; returns how many point before the log, and (unit, PAST_LOG | ELSEWHERE |
    MISMATCH, message) for each that is a finding. Compiled (_columns.units) when built."""
    if _columns is not None:
        return _columns.units(a["phy"], a["topic"], a["queue_id"], a["queue_offset"], a["size"], a["tags"],
                              a["delay"], a["store_ts"], np.ascontiguousarray(u, UNIT_NATIVE), first, tid, qid,
                              first_phy, last_phy, covered)
    phy = a["phy"]
    p = u["offset"].astype(np.int64)
    at = np.minimum(np.searchsorted(phy, p), max(len(phy) - 1, 0))
    hit = phy[at] == p if len(phy) else np.zeros(len(p), bool)
    before = ~hit & (p < first_phy)
    past = ~hit & ~before & (p > last_phy)
    idx = at[hit]
    covered[idx] = True
    got_tags = u["tags"][hit].astype(np.int64)
    # (a delay message's unit holds its delivery time: with levels configured otherwise
    # than the default, any time from its store time on)
    tags_ok = (a["tags"][idx] == got_tags) | (a["delay"][idx] & (got_tags >= a["store_ts"][idx]))
    qoffs = np.arange(first, first + len(u), dtype=np.int64)
    bad = np.zeros(len(p), bool)
    bad[hit] = ((a["topic"][idx] != tid) | (a["queue_id"][idx] != qid) | (a["queue_offset"][idx] != qoffs[hit])
                | (a["size"][idx] != u["size"][hit]) | ~tags_ok)
    flagged = [(k, PAST_LOG, int(at[k])) for k in np.flatnonzero(past).tolist()]
    flagged += [(k, ELSEWHERE, int(at[k])) for k in np.flatnonzero(~hit & ~before & ~past).tolist()]
    flagged += [(k, MISMATCH, int(at[k])) for k in np.flatnonzero(bad).tolist()]
    return int(before.sum()), flagged


def _small_key(topic: np.ndarray, queue_id: np.ndarray) -> np.ndarray:
    """One key per (topic, queue): int16 when the pairs fit (a stable sort of int16 is a
    radix sort, a few times faster than of int64), else :func:`_key`'s int64."""
    if len(topic) and queue_id.min() >= 0:
        width = int(queue_id.max()) + 1
        if (int(topic.max()) + 1) * width < 1 << 15:
            return (topic.astype(np.int16) * np.int16(width) + queue_id.astype(np.int16)).astype(np.int16)
    return _key(topic, queue_id)


def check_broker(broker: BrokerStore, *, data_file_size=None, index_file_size=None, progress=None,
                 max_findings: int | None = None) -> tuple[list, dict]:
    """``mq check``: the findings (the first ``max_findings`` when given), and a summary of
    what was read (its ``findings``: how many in all). In memory bounded by the topics and
    queues (stream.py), unless data files overlap or queues' units go back more than
    stream.MAX_RUNS times: then the whole log is read into columns (:func:`check_whole`).

    A store a running broker holds (its root's ``lock``: commitment.broker_holds) is read as
    it is being written: summary ``in_use``, and what its dispatch has not reached yet (a
    queue's tail past its last unit, units past the log's end as read) is in flight, counted
    in ``in_flight``, not a finding."""
    step, rewind = _counted(progress)
    in_use = broker_holds(broker.root)
    try:
        findings, summary = bounded_check(broker, _match_units, data_file_size=data_file_size,
                                          index_file_size=index_file_size, progress=step, max_findings=max_findings,
                                          in_use=in_use)
    except Unbounded:
        rewind()
        findings, summary = check_whole(broker, data_file_size=data_file_size, index_file_size=index_file_size,
                                        progress=progress, in_use=in_use)
        findings = findings[:max_findings]
    if in_use:
        findings = _tail_in_flight(findings, summary)
    if broker.root is not None:  # (the broker's key index: hash chains that loop, lookup.index_findings)
        more = index_findings(broker.root)
        if detect(broker.root).kind == CONTROLLER_MODE:  # (epochs, truncation leftovers: check_replica.py)
            more += replica_findings(broker.root, in_use=in_use)
        more += config_findings(broker)  # (configs against the queues: configcheck.py)
        summary["findings"] += len(more)
        findings += more[:None if max_findings is None else max(0, max_findings - len(findings))]
    return findings, summary


_TAIL_KINDS = ("damage", "not-a-message", "entry-crc", "body-crc", "phy-offset", "queue-id")


def _tail_in_flight(findings: list, summary: dict) -> list:
    """A running broker's last entry may be read while it is being copied in (header first):
    what is found of it, or past it, is in flight (counted in ``in_flight``), not a finding."""
    pos, index = summary["last_entry"]
    kept = []
    for f in findings:
        name = f["file"].rsplit("/", 1)[-1]
        at = int(name) + f["offset"] if f["file"].startswith("data/") and name.isdigit() else None
        if f["finding"] in _TAIL_KINDS and (f["index"] == index or at is not None and at > pos):
            summary["in_flight"] += 1
            summary["findings"] -= 1
        else:
            kept.append(f)
    return kept


def _counted(progress):
    """A progress callback that counts, and a function that takes back what it counted (the
    whole-log path walks the log again)."""
    if progress is None:
        return None, lambda: None
    done = [0]

    def step(n: int) -> None:
        done[0] += n
        progress(n)
    return step, lambda: progress(-done[0])


def check_whole(broker: BrokerStore, *, data_file_size=None, index_file_size=None, progress=None,
                in_use: bool = False) -> tuple[list, dict]:
    """``mq check`` with every message's columns in memory at once (``in_use``: check_broker)."""
    findings: list[dict] = []
    c = collect(broker, findings, data_file_size=data_file_size, index_file_size=index_file_size, progress=progress)
    summary = {"node_dir": broker.node_dir, "entries": c.entries, "messages": c.messages,
               "topics": len(c.topics), "consume_queues": None, "units": None, "units_before_log": None,
               "undispatched": None, "no_messages": False, "in_flight": 0, "in_use": in_use, "last_entry": c.last}
    if not c.messages and not broker.has_consume_queues:
        # not a broker's log (a dledgerctl group's own, say): its entries are not findings
        summary["no_messages"] = bool(c.entries)
        findings = [f for f in findings if f["finding"] != "not-a-message"]
    if broker.has_consume_queues:
        queues = find_queues(broker.root)
        summary["consume_queues"] = len(queues)
        summary.update(check_queues(c, queues, findings, batch_queue_keys(broker.root), in_use))
    summary["findings"] = len(findings)
    return findings, summary


def topic_rows(broker: BrokerStore, *, data_file_size=None, index_file_size=None, progress=None,
               notes: list | None = None) -> list[dict]:
    """``mq topics``: per topic and queue, what the log holds and what the consume queue
    holds (stream.py: a batch at a time; :func:`topic_rows_whole` where data files overlap)."""
    step, rewind = _counted(progress)
    said = len(notes) if notes is not None else 0
    try:
        return bounded_topics(broker, data_file_size=data_file_size, index_file_size=index_file_size,
                              progress=step, notes=notes)
    except Unbounded:
        rewind()
        if notes is not None:
            del notes[said:]  # (the whole-log path walks the log again, and says them again)
        return topic_rows_whole(broker, data_file_size=data_file_size, index_file_size=index_file_size,
                                progress=progress, notes=notes)


def topic_rows_whole(broker: BrokerStore, *, data_file_size=None, index_file_size=None, progress=None,
                     notes: list | None = None) -> list[dict]:
    """``mq topics``: per topic and queue, what the log holds and what the consume queue
    holds; a consume-queue file that is not read, or not as it should be, is a line of
    ``notes`` (``mq check`` says more)."""
    c = collect(broker, None, data_file_size=data_file_size, index_file_size=index_file_size, progress=progress,
                notes=notes)
    a = c.arrays()
    names = c.topic_names()
    rows: dict[tuple[str, int], dict] = {}
    if len(a["topic"]):
        key = _key(a["topic"], a["queue_id"])
        order = np.argsort(key, kind="stable")
        key = key[order]
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
        count = np.diff(np.r_[starts, len(key)])
        cols = {k: a[k][order] for k in ("size", "queue_offset", "store_ts", "queue_id")}
        nbytes = np.add.reduceat(cols["size"], starts)
        qmin, qmax = np.minimum.reduceat(cols["queue_offset"], starts), np.maximum.reduceat(cols["queue_offset"], starts)
        tmin, tmax = np.minimum.reduceat(cols["store_ts"], starts), np.maximum.reduceat(cols["store_ts"], starts)
        for g, (k, qid) in enumerate(zip(key[starts].tolist(), cols["queue_id"][starts].tolist())):
            t = names[k >> 32]
            rows[(t, qid)] = {"topic": t, "queue_id": qid, "messages": int(count[g]), "bytes": int(nbytes[g]),
                              "first_queue_offset": int(qmin[g]), "last_queue_offset": int(qmax[g]),
                              "first_store_time": int(tmin[g]), "last_store_time": int(tmax[g])}
    return queue_rows(broker, rows, notes)
