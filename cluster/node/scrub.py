"""A node's background scrub (:class:`Scrubber`): store/scrub.py's checks, paced on the
node's loop, and what the node does with the damage they find.

The scrub reads the committed log at ``--scrub-rate`` bytes a second (0: off), a step of at
most STEP_MAX bytes at a time, each step followed by the pause its bytes are worth at the
rate; a pass that reaches the commit index starts again at the first entry. Steps run on
the loop (they read the page cache or the disk through the store's mappings and check a few
hundred KiB of CRCs: well under a millisecond at the default step), so nothing else writes
the store while one runs.

What it does with a damaged entry (each finding and each repair is one log line naming the
file, byte, entry and what was wrong):

- an index record that disagrees with its entry is written again from the entry;
- a damaged entry is replaced by another member's copy (the leader's first, then the other
  voters'), asked for over the member's connection to it (a raw GET, answered only with bytes
  that pass the answering member's own CRCs) and checked by store.scrub.Mender before a byte
  is written. A leader repairs the same way, from a follower: handing leadership over first
  made two members that each held a damaged entry hand it back and forth;
- what cannot be repaired (no leader, a copy that does not check, a leader that has it
  damaged too) is tried again a few times, then counted as unrepaired and *held*: the pass
  goes on past it, and later passes skip it without asking anyone, until something that
  could bring a sound copy changes (another leader or term, another set of connected
  members, other voters). So K entries damaged on every member cost a pass nothing, and
  damage elsewhere is not kept waiting. Reads of a held entry keep failing with an error
  naming it (store/logreads.py, and the GET handler's check of :meth:`first_damaged`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time


from store.errors import StoreError
from store.format import crc32
from store.scrub import DIFFERS, INDEX_RECORD_KIND, KINDS, Damage, Mender, Scrub

from ..net import api
from ..net.api_client import decode_raw_answer, is_raw, request_frame
from ..net.frames import Frame, ProtocolError, json_object
from ..net.transport import TransportError
from ..raft.divergence import PROBE_MAX, fingerprints
from ..raft.rpc import Code

log = logging.getLogger("dledgerctl.node")

STEP_MAX = 1 << 20  # bytes one step reads at most
IDLE = 1.0  # seconds between looks at a log with nothing committed to check
RETRY = 0.5  # seconds before a damaged entry's repair is tried again ...
ATTEMPTS = 20  # ... this many times (when a source could not be asked), then it is held
HELD_RETRY = 60.0  # seconds a held entry is skipped when nothing changed, before it is tried once more
REFUSED = "answered: "  # a source's reply that it cannot give a sound copy (its reason follows)
DIGEST_BYTES = 4 << 20  # a DIGESTS answer covers at most about this many bytes of entries (fewer digests then)


class Scrubber:
    """One node's scrub: the store's cursor (store.scrub.Scrub), the pace, and the counts the
    metrics and ``peer watermarks`` show."""

    def __init__(self, node, rate: int) -> None:
        self.node = node
        self.rate = rate
        self.cursor = Scrub()
        self.mender = Mender(node.store)
        self.bytes = 0  # checked since start
        self.entries = 0
        self.passes = 0
        self.last_pass: float | None = None  # wall-clock time the last full pass ended
        self.found = dict.fromkeys(KINDS, 0)
        self.repaired = dict.fromkeys(KINDS, 0)
        self.unrepaired = dict.fromkeys(KINDS, 0)
        self.damaged: dict[int, Damage] = {}  # entries found damaged and not repaired yet
        self._attempts: dict[int, int] = {}
        self._held: dict[int, tuple] = {}  # entries left unrepaired: (the sources' state, _sources_now, when)
        self._why_not = ""
        self._all_refused = False  # the last repair asked every source and each answered it has no sound copy
        self.stopped: str | None = None  # why the scrub stopped (a failure of its own), if it did
        self._suspects: list[int] = []  # entries a read refused, checked before the pass goes on
        self._wake = asyncio.Event()

    @property
    def position(self) -> int:
        """The next entry the scrub checks (-1 before a pass begins)."""
        return self.cursor.next_index

    def row(self) -> dict:
        """What ``peer watermarks`` and ``cluster status`` show of it."""
        return {"rate": self.rate, "position": self.position, "passes": self.passes, "last_pass": self.last_pass,
                "damaged": sorted(self.damaged)[:100], "damaged_count": len(self.damaged), "stopped": self.stopped}

    def counts(self) -> dict:
        """What the metrics show of it (cluster/node/metrics.py)."""
        return {"bytes": self.bytes, "passes": self.passes, "last_pass": self.last_pass, "found": dict(self.found),
                "repaired": dict(self.repaired), "unrepaired": dict(self.unrepaired), "damaged": list(self.damaged)}

    async def run(self) -> None:
        """Scrub until cancelled (the node cancels it when it stops). A failure of the scrub
        itself stops the scrub, said in the log, never the member."""
        try:
            await self._run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - logged: the member serves on without a scrub
            self.stopped = f"{type(exc).__name__}: {exc}"
            log.exception("scrub: stopped: %s", self.stopped)

    async def _run(self) -> None:
        step = max(4096, min(STEP_MAX, self.rate // 10))
        loop = asyncio.get_running_loop()
        while True:
            if self._suspects and await self._check_suspects():
                await asyncio.sleep(RETRY)
                continue
            warm = self._ahead(step)
            if warm is not None:  # (the step then reads the page cache: no disk wait on the loop)
                await loop.run_in_executor(None, _read_ahead, *warm)
            st = self.cursor.step(self.node.store, step)
            self.bytes += st.bytes
            self.entries += st.entries
            if st.pass_done:
                self.passes += 1
                self.last_pass = time.time()
                log.debug("scrub: pass %d done, %d entries checked so far", self.passes, self.entries)
            if self.damaged:
                self._forget_sound(st)
            if st.crc_absent and st.entries:
                await self._compare(st.first, st.first + st.entries - 1)
            if st.damage is not None:
                wait = await self._found(st.damage)
                if wait:
                    await asyncio.sleep(wait)
                    continue
            self._wake.clear()
            try:  # (the pause the bytes are worth, cut short by a suspect)
                await asyncio.wait_for(self._wake.wait(), st.bytes / self.rate if st.bytes else IDLE)
            except asyncio.TimeoutError:
                pass

    def _sources_now(self) -> tuple:
        """What decides whether another member may now have a sound copy to give: the leader and
        term, the voters, and which of them this member is connected to."""
        core = self.node.core
        if core is None:
            return ()
        voters = tuple(sorted(core.members.voters))
        return (core.member.leader_id, core.member.term, voters,
                tuple(p for p in voters if (ch := self.node.channels.get(p)) is not None and ch.connected))

    async def _found(self, d: Damage, from_pass: bool = True) -> float:
        """Act on damage; returns how long to wait before the next step (0: go on)."""
        held = self._held.get(d.index)
        if held is not None:
            sources, since = held
            if sources == self._sources_now() and d.index in self.damaged and time.monotonic() - since < HELD_RETRY:
                return 0.0  # (nothing changed since it was left unrepaired: no one to ask anew)
            self._held.pop(d.index, None)
        first = d.index not in self._attempts and d.index not in self.damaged
        if first:
            self.found[d.kind] += 1
            log.warning("scrub: %s", d.line())
        try:
            how = await self._repair(d)
        except StoreError as exc:
            how = None
            why = str(exc)
        else:
            why = "" if how else self._why_not
        if how:
            self.repaired[d.kind] += 1
            self.damaged.pop(d.index, None)
            self._held.pop(d.index, None)
            self._attempts.pop(d.index, None)  # (made durable by the node's next flush, within milliseconds)
            log.warning("scrub: repaired entry %d (%s in %s) %s", d.index, d.kind, _where(d), how)
            if from_pass:
                self._recheck(d)
            return 0.0
        self.damaged[d.index] = d
        n = self._attempts[d.index] = self._attempts.get(d.index, 0) + 1
        if n < ATTEMPTS and not self._all_refused:  # (every source answered that it has no sound copy: no retry)
            if from_pass:
                self._recheck(d)  # the next step finds it again and tries once more
            else:
                self._suspects.append(d.index)  # (checked again after the pause)
            return RETRY
        self._attempts.pop(d.index, None)
        self.unrepaired[d.kind] += 1
        self._held[d.index] = (self._sources_now(), time.monotonic())
        log.error("scrub: entry %d left damaged for now (%s in %s): %s; held (never served) and tried again "
                  "when the leader, the term or the connected members change, or in a minute", d.index, d.kind, _where(d), why)
        return 0.0

    def _recheck(self, d: Damage) -> None:
        """Move the cursor back to the damaged entry: the next step checks it (again)."""
        c = self.cursor
        c.next_index, c.next_pos, c.prev = d.index, -1, None

    def _forget_sound(self, st) -> None:
        """Stop holding as damaged what the step found sound, and what the log no longer holds
        (cut, or deleted from its head). What comparing copies found is its own to clear."""
        s = self.node.store
        lo, hi = st.first, st.first + st.entries - 1
        gone = [i for i, d in self.damaged.items()
                if not s.begin_index <= i <= s.end_index
                or (lo <= i <= hi and d.kind != DIFFERS and (st.damage is None or st.damage.index != i))]
        for i in gone:
            self.damaged.pop(i, None)
            self._attempts.pop(i, None)
            self._held.pop(i, None)

    def _ahead(self, nbytes: int) -> tuple[int, int, int] | None:
        """(fd, offset, length) of the data the next step reads, for a thread to read first:
        far behind the log's end it is on disk only (drop-behind), and a fault on the loop
        would hold every request for the disk's latency."""
        s, c = self.node.store, self.cursor
        pos = c.next_pos
        if pos < 0:
            i = c.next_index if c.next_index >= 0 else s.begin_index
            if i < 0 or i > s.committed_index:
                return None
            try:
                pos = s.locate(i)[0]
            except StoreError:
                return None
        f = s.data.find(pos)
        if f is None or f.fd < 0:
            return None
        rel = pos - f.start
        n = min(nbytes + (64 << 10), f.actual_size - rel)
        return (f.fd, rel, n) if n > 0 else None

    def suspect(self, index: int) -> None:
        """A read found entry ``index`` damaged (a GET, the state machine): the scrub checks it
        next, not when its pass comes to it (days away, on a big log at the default rate)."""
        if index not in self.damaged and index not in self._suspects and len(self._suspects) < 64:
            self._suspects.append(index)
            self._wake.set()

    async def _check_suspects(self) -> float:
        """Check the suspects (each once); how long to wait before the next step."""
        s, wait = self.node.store, 0.0
        for index in self._suspects[:]:
            self._suspects.remove(index)
            if not s.begin_index <= index <= s.committed_index:
                continue
            probe = Scrub()  # (a cursor of its own: the pass keeps its place)
            probe.next_index = index
            st = probe.step(s, 1)
            if st.damage is not None and st.damage.index == index:
                wait = max(wait, await self._found(st.damage, from_pass=False))
        return wait

    def first_damaged(self, lo: int, hi: int) -> int | None:
        """The first entry of ``lo .. hi`` this member holds damaged (not to be served), or None."""
        if not self.damaged:
            return None
        return min((i for i in self.damaged if lo <= i <= hi), default=None)

    # -- entries without CRCs: compared with the other members' copies ----------------------
    async def _compare(self, first: int, last: int) -> None:
        """:meth:`_compare_run` over ``first .. last``, PROBE_MAX entries at a time."""
        for lo in range(first, last + 1, PROBE_MAX):
            await self._compare_run(lo, min(last, lo + PROBE_MAX - 1))

    async def _compare_run(self, first: int, last: int) -> None:
        """Compare the digests of committed entries ``first .. last`` (written without CRCs,
        some of them) with every other voter's. An entry whose copy here differs from one a
        majority of the voters holds is replaced by that copy; one on which no majority agrees,
        once every voter has answered, is held damaged and reported (nothing is rewritten)."""
        node = self.node
        s, core = node.store, node.core
        last = min(last, s.committed_index)
        if core is None or last < first or first < s.begin_index:
            return
        try:
            f0, _terms, _chains, mine = fingerprints(s, first, last - first + 1)
        except StoreError:
            return  # (an entry here fails its own checks: the step found it)
        voters = sorted(core.members.voters)
        copies: dict[str, dict[int, int]] = {node.cfg.self_id: dict(zip(range(f0, f0 + len(mine)), mine))}
        asked = [p for p in voters if p != node.cfg.self_id and node.channels.get(p) is not None]
        for p, got in zip(asked, await asyncio.gather(*(self._digests_of(p, f0, len(mine)) for p in asked))):
            if got is not None:
                copies[p] = got
        majority = len(voters) // 2 + 1
        for k, ours in enumerate(mine):
            index = f0 + k
            votes = collections.Counter(c[index] for c in copies.values() if index in c)
            if votes[ours] >= majority:
                held = self.damaged.get(index)
                if held is not None and held.kind == DIFFERS:
                    self.damaged.pop(index)  # (the others came to hold what this member holds)
                continue
            best, n = votes.most_common(1)[0]
            d = self._differs(index, votes, copies)
            if n >= majority:
                await self._from_majority(d, best, [p for p, c in copies.items() if c.get(index) == best])
            elif len(copies) == len(voters) and all(index in c for c in copies.values()):
                if index not in self.damaged:
                    self.found[DIFFERS] += 1
                    self.unrepaired[DIFFERS] += 1
                    self.damaged[index] = d
                    log.error("scrub: %s; no majority holds one copy: nothing rewritten", d.line())

    async def _digests_of(self, peer: str, first: int, count: int) -> dict[int, int] | None:
        """``peer``'s digests of its committed entries ``first ..`` (index -> digest), or None
        when it does not answer with them (down, a Java member, an error)."""
        node = self.node
        req = api.Digests(node.cfg.group, peer, first, count)
        try:
            f = await node.channels[peer].request(request_frame(req, peer), node.cfg.max_push_timeout_ms / 1000)
            o = json_object(f.body)
            if o.get("code") != int(Code.SUCCESS):
                return None
            a = api.digests_answer(o)
        except (TransportError, ProtocolError, KeyError):
            return None
        return dict(zip(range(a.first, a.first + len(a.digests)), a.digests))

    def _differs(self, index: int, votes, copies) -> Damage:
        s = self.node.store
        try:
            pos, size = s.locate(index)
            f = s.data.find(pos)
            file, offset = (f.name, pos - f.start) if f is not None else ("data", pos)
        except StoreError:
            pos, size, file, offset = -1, -1, "data", -1
        said = ", ".join(f"{p} {c[index]:08x}" for p, c in sorted(copies.items()) if index in c)
        return Damage(DIFFERS, index, pos, size, file, offset, f"its copies differ (crc32 of each member's: {said})")

    async def _from_majority(self, d: Damage, digest: int, holders: list[str]) -> None:
        """Replace this member's copy of ``d.index`` with the one ``holders`` (a majority) hold."""
        self.found[DIFFERS] += 1
        log.warning("scrub: %s", d.line())
        node = self.node
        for peer in holders:
            ch = node.channels.get(peer)
            if ch is None:
                continue
            req = api.Get(node.cfg.group, peer, d.index, 1, api.SERIALIZABLE, raw=True)
            try:
                f = await ch.request(request_frame(req, peer), node.cfg.max_push_timeout_ms / 1000)
                if not is_raw(f):
                    continue
                size = decode_raw_answer(f)["entries"][0]["size"]
            except (TransportError, ProtocolError, IndexError, KeyError):
                continue
            raw = bytes(f.body[:size])
            if crc32(raw) != digest:
                continue  # (it changed since it answered)
            try:
                self.mender.entry(d, raw)
            except StoreError as exc:
                log.error("scrub: entry %d left as it is: %s", d.index, exc)
                break
            self.repaired[DIFFERS] += 1
            self.damaged.pop(d.index, None)
            log.warning("scrub: repaired entry %d (%s in %s at byte %d) with %s's copy, which a majority holds",
                        d.index, DIFFERS, d.file, d.offset, peer)
            return
        self.unrepaired[DIFFERS] += 1

    async def _repair(self, d: Damage) -> str | None:
        """Repair ``d``; how it was done, or None (self._why_not says why not)."""
        self._why_not = ""
        self._all_refused = False
        if d.kind == INDEX_RECORD_KIND:
            try:
                self.mender.index_record(d)
                return "from its entry"
            except StoreError as exc:  # (its magic or term in doubt: the leader's copy settles it)
                log.warning("scrub: entry %d's index record is not rebuilt from its header: %s", d.index, exc)
        node = self.node
        core = node.core
        if core is None:
            self._why_not = "the node is starting"
            return None
        member = core.member
        me, leader = node.cfg.self_id, member.leader_id
        # the leader's copy first, then every other voter's: each checked by its own CRCs (or,
        # without them, by a majority's digests), so a leader repairs from a follower too
        sources = ([leader] if leader and leader != me else []) + sorted(
            p for p in core.members.voters if p not in (me, leader))
        whys, refused = [], 0
        for peer in sources:
            raw, why = await self._copy_from(peer, d.index)
            refused += why.startswith(REFUSED)
            if raw is not None:
                try:
                    self.mender.entry(d, raw)
                except StoreError as exc:
                    why = str(exc)
                else:
                    return f"with {peer}'s copy"
            whys.append(f"{peer}: {why}")
        self._why_not = "; ".join(whys) or "no other member to ask for a copy"
        self._all_refused = bool(sources) and refused == len(sources)
        return None

    async def _copy_from(self, peer: str, index: int) -> tuple[bytes | None, str]:
        """``peer``'s copy of committed entry ``index`` (raw GET), or None and why not. A copy
        without CRCs is taken only when a majority of the voters hold those very bytes."""
        node, core = self.node, self.node.core
        ch = node.channels.get(peer)
        if ch is None:
            return None, "not connected"
        req = api.Get(node.cfg.group, peer, index, 1, api.SERIALIZABLE, raw=True)
        try:
            f = await ch.request(request_frame(req, peer), node.cfg.max_push_timeout_ms / 1000)
            if not is_raw(f):
                return None, f"{REFUSED}{_remark(f)}"
            answer = decode_raw_answer(f)
        except (TransportError, ProtocolError) as exc:
            return None, str(exc)
        if answer["code"] != Code.SUCCESS or not answer["entries"]:
            return None, f"answered code {answer['code']}"
        s = node.store
        if not s.begin_index <= index <= s.committed_index:
            return None, "the log here no longer holds it"
        e = answer["entries"][0]
        raw = bytes(f.body[:e["size"]])
        if e["bodyCrc"] == 0 and e["chainCrc"] == 0:  # (no CRC to check it by: a majority must hold it)
            others = [p for p in core.members.voters if p != node.cfg.self_id and node.channels.get(p) is not None]
            held = [got.get(index) for got in await asyncio.gather(*(self._digests_of(p, index, 1) for p in others))
                    if got is not None]
            if held.count(crc32(raw)) < len(core.members.voters) // 2 + 1:
                return None, "its copy has no CRC and a majority of the members does not hold it"
        return raw, ""


def _remark(f: Frame) -> str:
    """Why a member refused a raw GET, as it said (the answer's JSON body carries the remark)."""
    said = f.remark or f.ext.get("remark")
    if not said:
        try:
            said = json_object(f.body).get("remark")
        except ProtocolError:
            said = None
    return str(said)[:300] if said else "no entry, and no reason given"


def _where(d: Damage) -> str:
    """Where the damage lies: the data file (or index/ for a record) and the byte in it."""
    return f"{'index' if d.kind == INDEX_RECORD_KIND else 'data'}/{d.file} at byte {d.offset}"


def _read_ahead(fd: int, offset: int, length: int) -> None:
    """Read a range into the page cache (in a pool thread; the bytes are dropped). The file
    may have been closed meanwhile (retention): then nothing is read, or another file's
    bytes are, harmlessly."""
    try:
        os.pread(fd, length, offset)
    except OSError:
        pass


def digests_frame(node, req: api.Digests, f: Frame) -> Frame:
    """The answer to DIGESTS: this member's digests of its committed entries from
    ``req.first`` (at most PROBE_MAX), or an error saying why none."""
    s = node.store
    group, leader = node.cfg.group, node.core.member.leader_id
    last = min(req.first + min(req.count, PROBE_MAX) - 1, s.committed_index)
    if s.begin_index < 0 or req.first < s.begin_index or last < req.first:
        return api.answer_frame(api.DigestsAnswer(req.first, [], s.begin_index, s.committed_index), f.opaque)
    try:
        first, _terms, _chains, digests = fingerprints(s, req.first, last - req.first + 1, DIGEST_BYTES)
    except StoreError as exc:
        return api.answer_frame(api.Misdirected(Code.DISK_ERROR, group, leader, str(exc)), f.opaque)
    return api.answer_frame(api.DigestsAnswer(first, digests, s.begin_index, s.committed_index), f.opaque)
