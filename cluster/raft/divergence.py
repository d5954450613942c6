"""Where a follower's log stops being the leader's: the search behind ``peer compare``.

No I/O: the node sends the follower the PROBE requests :meth:`DivergenceSearch.next_probe`
asks for and feeds the answers to :meth:`DivergenceSearch.feed`; the leader's own side
comes from its store. The search reads nothing but fingerprints and changes nothing.

Two modes:

- ``terms`` (what DLedger's compare looks at): the highest index where both logs hold an
  entry of the same term. Raft's log matching property makes everything up to there
  equal, so a binary search over the common range finds it with one-entry probes.
- ``deep``: every entry of the common range compared byte for byte (crc32 of the whole
  encoded entry, header and body), ``PROBE_MAX`` entries a probe, from the first common
  index on; the first difference wins. It finds what terms cannot show: bodies changed
  under the same terms (silent corruption, a store restored from the wrong backup), and
  it does not rely on the chain checksums, which DLedger-written entries lack and which
  an offline edit may leave untouched.

The result says what the repair is: the follower keeps everything up to ``match_index``
and is cut from ``truncate_from`` (the first difference, or the leader's end + 1 when the
follower only holds extra entries), after which the leader re-fills it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from store.format import ENTRY_HEADER, crc32

from .rpc import ProbeResponse

PROBE_MAX = 4096  # fingerprints per probe (about 100 KB of JSON)


def fingerprints(store, first: int, count: int, max_bytes: int | None = None) -> tuple[int, list[int], list[int], list[int]]:
    """(first index, terms, chainCrcs, digests) of the entries ``first .. first + count - 1``
    that ``store`` holds; digest = crc32 of the entry's encoded bytes. ``max_bytes``: stop
    once the entries read reach it (at least one is read)."""
    terms: list[int] = []
    chains: list[int] = []
    digests: list[int] = []
    if store.begin_index < 0 or count <= 0:
        return max(first, 0), terms, chains, digests
    first = max(first, store.begin_index)
    last = min(first + count - 1, store.end_index)
    i = first
    unpack = ENTRY_HEADER.unpack_from
    budget = max_bytes
    while i <= last and (budget is None or budget > 0):
        raw, n = store.read_entries(i, last - i + 1, 4 << 20 if budget is None else min(4 << 20, budget),
                                    as_stored=True)  # (damage shows, not refuses)
        if budget is not None:
            budget -= len(raw)
        view = memoryview(raw)
        off = 0
        for _ in range(n):
            _magic, size, _index, term, _pos, _ch, chain, _bcrc, _bsize = unpack(raw, off)
            terms.append(term)
            chains.append(chain)
            digests.append(crc32(view[off:off + size]))
            off += size
        view.release()
        i += n
    return first, terms, chains, digests


@dataclass
class Divergence:
    peer: str
    mode: str
    leader_begin: int
    leader_end: int
    follower_begin: int
    follower_end: int
    follower_committed: int
    match_index: int  # both logs are equal up to here (-1: nothing in common)
    first_diff: int | None = None  # the lowest index where they differ, within the common range
    truncate_from: int | None = None  # where the follower must be cut (None: nothing to cut)
    to_cut: int = 0  # entries the cut drops
    leader_term: int | None = None  # at first_diff
    follower_term: int | None = None
    leader_digest: int | None = None
    follower_digest: int | None = None
    probes: int = 0
    compared: int = 0  # entries whose fingerprints were compared

    def as_row(self) -> dict:
        return asdict(self)


class DivergenceSearch:
    def __init__(self, store, peer: str, *, deep: bool, start: int = 0) -> None:
        """``start``: compare from this index on (entries before it are known to be equal)."""
        self.store, self.peer, self.deep, self.start = store, peer, deep, start
        self.result: Divergence | None = None
        self._bounds: ProbeResponse | None = None
        self._lo = self._hi = 0  # binary search (terms): lo is equal (or before the start), hi differs
        self._cursor = 0  # deep: the next index to compare
        self._top = -1  # the last index of the common range
        self._probes = 0
        self._compared = 0
        self._seen: dict[int, tuple[int, int]] = {}  # the follower's (term, digest) at probed indexes
        self._leader_end = store.end_index
        self._leader_begin = store.begin_index

    @property
    def done(self) -> bool:
        return self.result is not None

    def next_probe(self) -> tuple[int, int] | None:
        """(first, count) to ask the follower for, or None when the search is over."""
        if self.done:
            return None
        if self._bounds is None:
            return (max(self._leader_end, 0), 1)  # its bounds, and the entry at our end
        if self.deep:
            return (self._cursor, min(PROBE_MAX, self._top - self._cursor + 1))
        if self._hi > self._top:
            return (self._top, 1)
        return ((self._lo + self._hi) // 2, 1)

    def feed(self, resp: ProbeResponse) -> None:
        self._probes += 1
        for k, index in enumerate(range(resp.first, resp.first + len(resp.terms))):
            if not self.deep or k == 0:
                self._seen[index] = (resp.terms[k], resp.digests[k])
        if self._bounds is None:
            self._bounds = resp
            self._start(resp)
        elif self.deep:
            self._deep_step(resp)
        else:
            self._terms_step(resp)

    # -- the modes ----------------------------------------------------------------------
    def _start(self, b: ProbeResponse) -> None:
        lo = max(self._leader_begin, b.begin_index, self.start, 0)
        top = min(self._leader_end, b.end_index)
        if self._leader_begin < 0 or b.begin_index < 0 or b.end_index < b.begin_index or top < lo:
            self._finish(min(lo, b.end_index + 1, self._leader_end + 1) - 1, None)
            return
        self._top = top
        if self.deep:
            self._cursor = lo
            return
        # terms: is the last common entry the same? (the first probe brought it when the
        # follower's log reaches our end; otherwise it is asked for next)
        self._lo, self._hi = lo - 1, top + 1
        if top in self._seen:
            self._top_checked(top)

    def _top_checked(self, top: int) -> None:
        if self._same_term(top):
            self._finish(top, None)
        else:
            self._hi = top
            self._narrow()

    def _same_term(self, index: int) -> bool:
        seen = self._seen.get(index)
        if seen is None:
            return False  # the follower no longer holds it
        self._compared += 1
        return seen[0] == fingerprints(self.store, index, 1)[1][0]

    def _terms_step(self, resp: ProbeResponse) -> None:
        if self._hi > self._top:
            self._top_checked(self._top)
            return
        mid = (self._lo + self._hi) // 2
        if self._same_term(mid):
            self._lo = mid
        else:
            self._hi = mid
        self._narrow()

    def _narrow(self) -> None:
        """Binary search: lo equal (or the virtual index before the range), hi different."""
        if self._hi - self._lo <= 1:
            self._finish(self._lo, self._hi)

    def _deep_step(self, resp: ProbeResponse) -> None:
        first, terms, _chains, digests = fingerprints(self.store, resp.first, len(resp.terms))
        if resp.first != self._cursor or not resp.digests or first != resp.first:
            self._finish(self._cursor - 1, self._cursor)  # a log shrank under us
            return
        n = min(len(resp.digests), len(digests))
        for k in range(n):
            if resp.digests[k] != digests[k] or resp.terms[k] != terms[k]:
                self._compared += k + 1
                self._seen[first + k] = (resp.terms[k], resp.digests[k])
                self._finish(first + k - 1, first + k)
                return
        self._compared += n
        self._cursor += n
        if n == 0 or self._cursor > self._top:
            self._finish(self._top, None)

    def _finish(self, match: int, first_diff: int | None) -> None:
        b = self._bounds
        d = Divergence(self.peer, "deep" if self.deep else "terms", self._leader_begin, self._leader_end,
                       b.begin_index, b.end_index, b.committed_index, match, first_diff,
                       probes=self._probes, compared=self._compared)
        if first_diff is not None:
            d.follower_term, d.follower_digest = self._seen.get(first_diff, (None, None))
            _first, terms, _chains, digests = fingerprints(self.store, first_diff, 1)
            if terms and _first == first_diff:
                d.leader_term, d.leader_digest = terms[0], digests[0]
            d.truncate_from = first_diff if first_diff <= b.end_index else None
        elif b.end_index > self._leader_end:
            d.truncate_from = self._leader_end + 1  # the follower holds entries past our end
        if d.truncate_from is not None:
            d.to_cut = b.end_index - d.truncate_from + 1
        self.result = d
