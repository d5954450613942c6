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
- a damaged entry on a follower is replaced by the leader's copy, asked for over the
  member's connection to it (a raw GET, which the leader answers only with bytes that pass
  its own CRCs) and checked by store.scrub.Mender before a byte is written;
- on the leader, leadership is handed first to a member that has every entry; the member
  then repairs the entry as a follower;
- what cannot be repaired (no leader, a copy that does not check, a leader that has it
  damaged too) is tried again a few times, then counted as unrepaired and left for the next
  pass. Reads of it keep failing with an error naming it meanwhile (store/logreads.py).
"""

from __future__ import annotations

import asyncio
import logging
import time

from store.errors import StoreError
from store.scrub import INDEX_RECORD_KIND, KINDS, Damage, Mender, Scrub

from ..net import api
from ..net.api_client import decode_raw_answer, is_raw, request_frame
from ..net.frames import ProtocolError
from ..net.transport import TransportError
from ..raft.rpc import Code

log = logging.getLogger("dledgerctl.node")

STEP_MAX = 1 << 20  # bytes one step reads at most
IDLE = 1.0  # seconds between looks at a log with nothing committed to check
RETRY = 0.5  # seconds before a damaged entry's repair is tried again ...
ATTEMPTS = 20  # ... this many times, then it waits for the next pass


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
        self._why_not = ""
        self.stopped: str | None = None  # why the scrub stopped (a failure of its own), if it did

    @property
    def position(self) -> int:
        """The next entry the scrub checks (-1 before a pass begins)."""
        return self.cursor.next_index

    def row(self) -> dict:
        """What ``peer watermarks`` and ``cluster status`` show of it."""
        return {"rate": self.rate, "position": self.position, "passes": self.passes,
                "last_pass": self.last_pass, "damaged": sorted(self.damaged), "stopped": self.stopped}

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
        while True:
            st = self.cursor.step(self.node.store, step)
            self.bytes += st.bytes
            self.entries += st.entries
            if st.pass_done:
                self.passes += 1
                self.last_pass = time.time()
                log.debug("scrub: pass %d done, %d entries checked so far", self.passes, self.entries)
            if st.damage is not None:
                wait = await self._found(st.damage)
                if wait:
                    await asyncio.sleep(wait)
                    continue
            await asyncio.sleep(st.bytes / self.rate if st.bytes else IDLE)

    async def _found(self, d: Damage) -> float:
        """Act on damage; returns how long to wait before the next step (0: go on)."""
        first = d.index not in self._attempts
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
            self._attempts.pop(d.index, None)  # (made durable by the node's next flush, within milliseconds)
            log.warning("scrub: repaired entry %d (%s in %s at byte %d) %s", d.index, d.kind, d.file, d.offset, how)
            self._recheck(d)
            return 0.0
        self.damaged[d.index] = d
        n = self._attempts[d.index] = self._attempts.get(d.index, 0) + 1
        if n < ATTEMPTS:
            self._recheck(d)  # the next step finds it again and tries once more
            return RETRY
        self._attempts.pop(d.index, None)
        self.unrepaired[d.kind] += 1
        log.error("scrub: entry %d left damaged for now (%s): %s", d.index, d.kind, why)
        return 0.0

    def _recheck(self, d: Damage) -> None:
        """Move the cursor back to the damaged entry: the next step checks it (again)."""
        c = self.cursor
        c.next_index, c.next_pos, c.prev = d.index, -1, None

    async def _repair(self, d: Damage) -> str | None:
        """Repair ``d``; how it was done, or None (self._why_not says why not)."""
        self._why_not = ""
        if d.kind == INDEX_RECORD_KIND:
            self.mender.index_record(d)
            return "from its entry"
        node = self.node
        core = node.core
        if core is None:
            self._why_not = "the node is starting"
            return None
        member = core.member
        if member.leader_id == node.cfg.self_id:
            target = core.leader.handover_target(node.now()) if core.leader is not None else None
            if target is None:
                self._why_not = "this member leads and no other member has every entry to take over"
            elif core.transfer is None:
                core.start_transfer(target, node.now())
                node.process()
                log.warning("scrub: this member leads and holds a damaged entry: handing leadership to %s to "
                            "repair it from there", target)
                self._why_not = f"handing leadership to {target} first"
            else:
                self._why_not = f"handing leadership to {core.transfer.target} first"
            return None
        leader = member.leader_id
        ch = node.channels.get(leader) if leader else None
        if ch is None:
            self._why_not = "no leader to ask for a copy"
            return None
        req = api.Get(node.cfg.group, leader, d.index, 1, api.SERIALIZABLE, raw=True)
        try:
            f = await ch.request(request_frame(req, leader), node.cfg.max_push_timeout_ms / 1000)
        except (TransportError, ProtocolError) as exc:
            self._why_not = f"{leader} did not answer: {exc}"
            return None
        if not is_raw(f):
            self._why_not = f"{leader} answered: {f.remark or f.ext.get('remark') or 'no entry'}"
            return None
        try:
            answer = decode_raw_answer(f)
        except ProtocolError as exc:
            self._why_not = f"{leader}'s answer: {exc}"
            return None
        if answer["code"] != Code.SUCCESS or not answer["entries"]:
            self._why_not = f"{leader} answered code {answer['code']}"
            return None
        s = node.store
        if not s.begin_index <= d.index <= s.committed_index:
            self._why_not = "the log no longer holds it"
            return None
        self.mender.entry(d, bytes(f.body[:answer["entries"][0]["size"]]))
        return f"with {leader}'s copy"
