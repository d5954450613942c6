"""Who can lead a stopped group, and what each choice cuts: DLedger's vote rules applied
offline to the members' files (``dledgerctl store elect``).

Rules (``DLedgerLeaderElector.handleVote``, the same in dledger-0.2.7 and dledger-all-0.3.1.2),
checked by a voter in this order against a candidate's request (term, ledger end term, ledger
end index):

- REJECT_UNKNOWN_LEADER: the candidate is not one of the voter's peers;
- REJECT_EXPIRED_LEDGER_TERM: its ledger end term is below the voter's;
- REJECT_SMALL_LEDGER_END_INDEX: equal ledger end terms, its ledger end index below the voter's;
- REJECT_EXPIRED_VOTE_TERM: the request's term is below the voter's current term;
- REJECT_ALREADY_VOTED: equal terms, and the voter voted for another member in it;
- REJECT_TERM_NOT_READY: a term above the voter's: the voter moves to it and answers next time;
- REJECT_TERM_SMALL_THAN_LEDGER: the request's term is below the voter's ledger end term;
- ACCEPT.

The term answers pass: every answer carries the voter's term (its ledger end term for
REJECT_TERM_SMALL_THAN_LEDGER) and a candidate that learns a higher one moves past it and asks
again. The ledger answers do not: logs do not change until there is a leader. So a member can
win exactly when the members whose ledger it is not behind (itself included) are a majority of
the peers. A candidate's first request uses the term in its ``currterm`` (the elector starts in
WAIT_TO_REVOTE, which does not increase the term); that first answer is shown too.

After an election the leader's EntryDispatcher compares each follower and truncates it to the
leader's log: the follower loses every entry past the last index both hold with the same term
(Raft's log matching: equal terms at an index mean equal logs up to it). An entry is committed
somewhere when a member whose ``checkpoint`` says committedIndex >= its index holds the same
entry (the same term there).

:func:`plan_election` is pure (member states and pairwise agreement in, rows out);
:func:`read_group` reads the files with the store's own readers.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .errors import NotAStoreError, StoreCorruptError, StoreError, StoreUsageError
from .filestore import FileStore
from .format import MAGIC_NORMAL
from .layout import NodeLayout, find_node_dirs, looks_like_node_dir
from .lock import lock_holder
from .metafiles import read_checkpoint, read_currterm
from .rocketmq.message import NotAMessage, decode

ACCEPT = "ACCEPT"
REJECT_UNKNOWN_LEADER = "REJECT_UNKNOWN_LEADER"
REJECT_EXPIRED_LEDGER_TERM = "REJECT_EXPIRED_LEDGER_TERM"
REJECT_SMALL_LEDGER_END_INDEX = "REJECT_SMALL_LEDGER_END_INDEX"
REJECT_EXPIRED_VOTE_TERM = "REJECT_EXPIRED_VOTE_TERM"
REJECT_ALREADY_VOTED = "REJECT_ALREADY_VOTED"
REJECT_TERM_NOT_READY = "REJECT_TERM_NOT_READY"
REJECT_TERM_SMALL_THAN_LEDGER = "REJECT_TERM_SMALL_THAN_LEDGER"
LEDGER_REJECTS = (REJECT_UNKNOWN_LEADER, REJECT_EXPIRED_LEDGER_TERM, REJECT_SMALL_LEDGER_END_INDEX)


@dataclass
class MemberState:
    """One member's offline state. ``problem``: why it cannot take part (its files could not
    be read); such a member neither votes nor runs."""
    id: str
    node_dir: str = ""
    term: int = 0  # currterm: currTerm
    vote_for: str | None = None  # currterm: voteLeader
    end_term: int = 0  # the last entry's term (0 for an empty log, as DLedger's ledgerEndTerm)
    end_index: int = -1  # the last entry's index (-1 for an empty log)
    begin_index: int = -1
    committed_index: int = -1  # checkpoint: committedIndex (-1 when absent)
    recovery_cut: int = 0  # entries its own recovery cuts at start (past end_index)
    problem: str | None = None
    notes: list[str] = field(default_factory=list)


def vote(voter: MemberState, cand: MemberState, term: int, peers: list[str]) -> str:
    """What ``voter`` answers ``cand`` asking for votes in ``term`` (handleVote, in its order)."""
    if cand.id not in peers:
        return REJECT_UNKNOWN_LEADER
    if cand.end_term < voter.end_term:
        return REJECT_EXPIRED_LEDGER_TERM
    if cand.end_term == voter.end_term and cand.end_index < voter.end_index:
        return REJECT_SMALL_LEDGER_END_INDEX
    if term < voter.term:
        return REJECT_EXPIRED_VOTE_TERM
    if term == voter.term:
        if voter.vote_for is not None and voter.vote_for != cand.id:
            return REJECT_ALREADY_VOTED
    else:
        return REJECT_TERM_NOT_READY
    if term < voter.end_term:
        return REJECT_TERM_SMALL_THAN_LEDGER
    return ACCEPT


def final_vote(voter: MemberState, cand: MemberState, peers: list[str]) -> str:
    """The answer once the candidate's term has caught up: only the ledger rules remain."""
    first = vote(voter, cand, max(voter.term, voter.end_term, cand.term) + 1, peers)
    return first if first in LEDGER_REJECTS else ACCEPT


def committed_upto(f: MemberState, members: list[MemberState], agree: dict) -> int:
    """The last of ``f``'s entries that some member holds identically and has committed."""
    best = -1
    for m in members:
        if m.problem is not None:
            continue
        same = f.end_index if m.id == f.id else agree.get((f.id, m.id), -1)
        best = max(best, min(m.committed_index, m.end_index, same))
    return min(best, f.end_index)


def plan_election(members: list[MemberState], peers: list[str], agree: dict) -> dict:
    """For every member as candidate: the first and final answer of each voter, whether it
    can win (a majority of ``peers``), and what each other member loses if it leads.
    ``agree[(a, b)]``: the last index where a and b hold an entry of the same term (-1: none).

    Returns ``{"candidates": [...], "losses": [...], "verdict": {...}}``."""
    majority = len(peers) // 2 + 1
    live = [m for m in members if m.problem is None]
    cands, losses = [], []
    for c in members:
        row = {"candidate": c.id, "electable": False, "votes_from": [], "rejected_by": {}, "first_round": {},
               "majority": majority, "entries_cut": 0, "indexes_cut": 0, "committed_cut": 0, "members_losing": [],
               "problem": c.problem}
        cands.append(row)
        if c.problem is not None:
            continue
        for v in live:
            first = vote(v, c, c.term, peers)
            final = final_vote(v, c, peers)
            row["first_round"][v.id] = first
            if final == ACCEPT:
                row["votes_from"].append(v.id)
            else:
                row["rejected_by"][v.id] = final
        row["electable"] = c.id in peers and len(row["votes_from"]) >= majority
        # What a member's checkpoint says was committed is committed, even past the end its
        # recovery leaves it (an entry damaged past repair there): a leader without it loses it.
        # (only as far as its log reached before that cut: a checkpoint past anything the log
        # held is a note on that member, not a loss)
        claimed = max((min(m.committed_index, m.end_index + m.recovery_cut) for m in live), default=-1)
        row["committed_cut"] = max(0, claimed - c.end_index)
        cut_ranges: list[tuple[int, int]] = []
        for f in live:
            if f.id == c.id:
                continue
            common = agree.get((c.id, f.id), -1)
            cut = max(0, f.end_index - common)
            committed = max(0, committed_upto(f, live, agree) - common)
            loss = {"leader": c.id, "member": f.id, "last_common_index": common,
                    "cut_from": common + 1 if cut else None, "cut_to": f.end_index if cut else None,
                    "entries_cut": cut, "committed_cut": committed}
            losses.append(loss)
            row["entries_cut"] += cut
            row["committed_cut"] = max(row["committed_cut"], committed)
            if cut:
                row["members_losing"].append(f.id)
                cut_ranges.append((common + 1, f.end_index))
        row["indexes_cut"] = _covered(cut_ranges)  # distinct log indexes cut on any member
    return {"candidates": cands, "losses": losses, "verdict": verdict(cands, peers)}


def _covered(ranges: list[tuple[int, int]]) -> int:
    """How many integers the inclusive ranges cover together."""
    total, upto = 0, None
    for lo, hi in sorted(ranges):
        if upto is not None and lo <= upto:
            lo = upto + 1
        if hi >= lo:
            total += hi - lo + 1
        upto = hi if upto is None else max(upto, hi)
    return total


def verdict(cands: list[dict], peers: list[str]) -> dict:
    """Who must lead to lose nothing (else to cut the fewest entries, none of them committed),
    or what every possible choice loses. ``ok`` is False
    when no member can win or every member that can would cut committed entries."""
    able = [c for c in cands if c["electable"]]
    if not able:
        return {"ok": False, "leaders": [], "text": f"no member given can win a majority of the {len(peers)} peers "
                "(start the members whose files are missing, or check --peers)"}
    clean = [c["candidate"] for c in able if c["entries_cut"] == 0 and c["committed_cut"] == 0]
    if clean:
        return {"ok": True, "leaders": clean, "text": f"{_names(clean)} must lead: nothing is cut"
                + _others(able, clean)}
    safe = [c for c in able if c["committed_cut"] == 0]
    if safe:
        least = min(c["entries_cut"] for c in safe)
        best = [c["candidate"] for c in safe if c["entries_cut"] == least]
        return {"ok": True, "leaders": best, "text": f"{_names(best)} must lead to cut least: {least} uncommitted "
                f"{'entry' if least == 1 else 'entries'}" + _others(able, best)}
    each = "; ".join(f"{c['candidate']} cuts {c['committed_cut']} committed" for c in able)
    return {"ok": False, "leaders": [], "text": f"every member that can win cuts committed entries: {each}"}


def _names(ids: list[str]) -> str:
    return ids[0] if len(ids) == 1 else "one of " + ", ".join(ids)


def _others(able: list[dict], chosen: list[str]) -> str:
    rest = [f"{c['candidate']} would cut {c['entries_cut']} ({c['committed_cut']} committed)"
            for c in able if c["candidate"] not in chosen]
    return "; " + ", ".join(rest) if rest else ""


# -- reading the files -------------------------------------------------------------------------

def member_dirs(paths: list[str]) -> list[str]:
    """Node directories from the arguments: each a node directory, or a base directory
    holding several. NotAStoreError naming one that is neither."""
    out: list[str] = []
    for p in paths:
        if not os.path.isdir(p):
            raise NotAStoreError(f"{p}: no such directory")
        if looks_like_node_dir(p):
            out.append(p)
            continue
        found = find_node_dirs(p)
        if not found:
            raise NotAStoreError(f"{p}: not a member's node directory (no data/ or index/) and holds no "
                                 f"dledger-<id> directory")
        out.extend(found)
    ids = [NodeLayout(d).node_id for d in out]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise StoreUsageError(f"member id {dup[0]} given twice ({', '.join(d for d in out if NodeLayout(d).node_id == dup[0])}): "
                              "members of different groups?")
    return out


def parse_peer_ids(text: str) -> list[str]:
    """Member ids from DLedger's peers ('n0-host:port;n1-host:port') or a list of ids."""
    ids = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip()
        if part:
            ids.append(part.split("-", 1)[0] if ":" in part else part)
    if not ids or len(set(ids)) != len(ids):
        raise StoreUsageError(f"peers {text!r}: give each member id once ('n0-host:port;n1-host:port' or 'n0,n1')")
    return ids


class Group:
    """The members' stores, open read-only, and their states. Close it (or use ``with``)."""

    def __init__(self, dirs: list[str], *, data_file_size=None, index_file_size=None) -> None:
        self.members: list[MemberState] = []
        self.stores: dict[str, FileStore] = {}
        try:
            for d in dirs:
                self.members.append(self._read(d, data_file_size, index_file_size))
        except BaseException:
            self.close()
            raise

    def _read(self, d: str, data_file_size, index_file_size) -> MemberState:
        m = MemberState(NodeLayout(d).node_id, d)
        try:
            s = FileStore.open(d, read_only=True, data_file_size=data_file_size, index_file_size=index_file_size)
        except StoreError as exc:
            m.problem = f"log unreadable: {exc}"
            return m
        self.stores[m.id] = s
        m.begin_index, m.end_index, m.end_term = s.begin_index, s.end_index, s.end_term
        m.recovery_cut = s.recovery_dropped()[0]
        for warn in (s.recovery_warning(), s.recovery_held_warning()):
            if warn:
                m.notes.append(warn.replace("recovery kept", "recovery would keep", 1))
        try:
            ts = read_currterm(d)
            m.term, m.vote_for = ts.term, ts.vote_for
            if ts.problem:
                m.notes.append(f"currterm: {ts.problem}")
        except (StoreCorruptError, OSError) as exc:
            m.problem = f"currterm unreadable: {exc}"
        try:
            cp = read_checkpoint(d)
            if cp.committed_index is not None:
                m.committed_index = cp.committed_index
        except (StoreCorruptError, OSError) as exc:
            m.notes.append(f"checkpoint unreadable: {exc} (committed index taken as -1)")
        if m.committed_index > m.end_index:
            m.notes.append(f"committedIndex {m.committed_index} is past the ledger end {m.end_index}")
        return m

    def agreement(self) -> dict:
        """``{(a, b): last index both hold with the same term}`` for every pair of readable
        members. StoreUsageError when two members hold different entries of one term at one
        index: they are not of one group (or a log is damaged)."""
        agree: dict = {}
        ids = list(self.stores)
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                agree[(a, b)] = agree[(b, a)] = self._common(a, b)
        return agree

    def _common(self, a: str, b: str) -> int:
        sa, sb = self.stores[a], self.stores[b]
        lo, hi = max(sa.begin_index, sb.begin_index, 0), min(sa.end_index, sb.end_index)
        if hi < lo:  # an empty log, or one that ends before the other begins (heads deleted)
            return min(sa.end_index, sb.end_index)
        if sa.get(lo).term != sb.get(lo).term:
            return lo - 1
        # Equal terms at an index mean equal logs up to it, so "same term at i" only turns
        # false once: binary search for the last i where it holds.
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sa.get(mid).term == sb.get(mid).term:
                lo = mid
            else:
                hi = mid - 1
        ea, eb = sa.get(lo), sb.get(lo)
        if ea.body != eb.body or ea.pos != eb.pos:
            raise StoreUsageError(f"{a} and {b} both hold entry {lo} of term {ea.term} but with different "
                                  f"{'bodies' if ea.body != eb.body else 'positions'}: members of different "
                                  "groups, or a damaged log")
        return lo

    def messages(self, member: str, first: int, last: int) -> dict | None:
        """The RocketMQ messages in entries first..last of a member's log: topics with counts,
        first and last store time (ms). None when the entries are not a broker's messages."""
        s = self.stores[member]
        topics: dict[str, int] = {}
        count, times, seen_normal = 0, [], False
        for i in range(first, last + 1):
            e = s.get(i)
            if e.magic != MAGIC_NORMAL:
                continue
            seen_normal = True
            try:
                m = decode(e.body, 0, len(e.body))
            except NotAMessage:
                continue
            count += 1
            topics[m.topic] = topics.get(m.topic, 0) + 1
            times.append(m.store_timestamp)
        if not seen_normal or not count:
            return None
        return {"messages": count, "topics": topics, "first_store_time": min(times), "last_store_time": max(times)}

    def close(self) -> None:
        for s in self.stores.values():
            s.close()
        self.stores.clear()

    def __enter__(self) -> "Group":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def elect(paths: list[str], peers: str | None = None, *, data_file_size=None, index_file_size=None) -> dict:
    """Read the members' files under ``paths`` and plan the election (see :func:`plan_election`);
    adds ``members`` (their states) and, on each loss with entries cut from a broker's store,
    ``messages``."""
    dirs = member_dirs(paths)
    running = [(NodeLayout(d).node_id, who) for d in dirs if (who := lock_holder(NodeLayout(d))) is not None]
    if running:
        raise StoreUsageError(
            "; ".join(f"{i} is running ({who} holds its lock)" for i, who in running)
            + ": store elect reads stopped members' files (a running member's log and committed index move "
              "under it, and its checkpoint lags); stop it first, or read a copy taken while it was stopped")
    with Group(dirs, data_file_size=data_file_size, index_file_size=index_file_size) as g:
        ids = parse_peer_ids(peers) if peers else [m.id for m in g.members]
        strangers = [m.id for m in g.members if m.id not in ids]
        if peers and strangers:
            raise StoreUsageError(f"{', '.join(strangers)} not among the peers {','.join(ids)}: members of another group?")
        agree = g.agreement()
        plan = plan_election(g.members, ids, agree)
        for loss in plan["losses"]:
            loss["messages"] = (g.messages(loss["member"], loss["cut_from"], loss["cut_to"])
                                if loss["entries_cut"] else None)
        plan["members"] = g.members
        plan["peers"] = ids
        unread = [i for i in ids if i not in {m.id for m in g.members}]
        plan["not_read"] = unread
        if unread:
            v = plan["verdict"]
            v["text"] += (f" (from the files given only: {', '.join(unread)} not read; what "
                          f"{'it holds' if len(unread) == 1 else 'they hold'} is not counted)")
        return plan
