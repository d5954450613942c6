"""The final check, on the stopped group's stores: :func:`check` reads every node's store
offline up to its committed index and checks the promise (every acknowledged append present
once, at its index, with its body and term; nothing refused or never sent; committed logs the
same), then runs ``dledgerctl store verify`` and ``store diff``.
"""

from __future__ import annotations

import collections
import subprocess

from store.filestore import FileStore
from store.format import MAGIC_CONFIG, MAGIC_NOOP
from tests.support import commands
from tests.support.faults.clients import Request


def _entry_counts(requests: list[Request], unknown_committed: int) -> dict:
    out = collections.Counter()
    for r in requests:
        out[r.outcome] += len(r.bodies)
    out["unknown_committed"] = unknown_committed
    return {k: out.get(k, 0) for k in ("ok", "failed", "unknown", "unknown_committed")}


def read_committed(node_dir: str) -> tuple[int, list]:
    """(committed index, entries from the log's beginning up to it), read offline."""
    with FileStore.open(node_dir, read_only=True) as s:
        committed = s.committed_index
        if s.begin_index < 0:
            return committed, []
        return committed, [s.get(i) for i in range(s.begin_index, committed + 1)]


def cli(*args, timeout: float = 120) -> subprocess.CompletedProcess:
    return commands.cli(*args, timeout=timeout)


def check(dirs: dict[str, str], requests: list[Request], *, verify: bool = True, others: set = frozenset(),
          refused: set = frozenset(), cleaned: set = frozenset()) -> tuple[list[str], int]:
    """The promise, on the stopped cluster's stores: one line per problem found, and how
    many entries of appends with an unknown outcome are in the committed log. ``others``:
    bodies other clients sent (the key-value clients: their history is checked apart), of
    which ``refused`` were refused, so must be nowhere. ``cleaned``: members whose own
    retention deleted the front of their log (a disk above the force ratio), whose entries
    before their first are not asked of them."""
    problems: list[str] = []
    logs: dict[str, dict[int, object]] = {}
    where: dict[str, dict[bytes, list[int]]] = {}
    ids = list(dirs)
    for i in ids:
        try:
            committed, entries = read_committed(dirs[i])
        except Exception as exc:  # noqa: BLE001 - a store that does not open is a finding
            problems.append(f"{i}: store does not open read-only: {exc}")
            continue
        logs[i] = {e.index: e for e in entries}
        index_of = collections.defaultdict(list)
        for e in entries:
            if e.magic == MAGIC_NOOP:
                if e.body:
                    problems.append(f"{i}: no-op entry {e.index} has a body")
            elif e.magic == MAGIC_CONFIG:
                continue  # a membership change (cluster/raft/membership.py), not a client's
            else:
                index_of[e.body].append(e.index)
        where[i] = index_of
    sent = {b: r for r in requests for b in r.bodies}
    unknown_committed = 0
    for i, index_of in where.items():
        for body, at in index_of.items():
            r = sent.get(body)
            if r is None and body in others:
                if body in refused:
                    problems.append(f"{i}: entry {at[0]} holds {body[:60]!r}, a key-value put that was refused")
                elif len(at) > 1:
                    problems.append(f"{i}: the key-value put {body[:40]!r} is in the log {len(at)} times, at {at}")
            elif r is None:
                problems.append(f"{i}: entry {at[0]} holds a body no client sent: {body[:60]!r}")
            elif len(at) > 1:
                problems.append(f"{i}: {body[:40]!r} ({r.outcome}) is in the log {len(at)} times, at {at}")
    for r in requests:
        for i, index_of in where.items():
            got = [index_of.get(b, []) for b in r.bodies]
            if r.outcome == "ok":
                if len(r.entries) != len(r.bodies):
                    problems.append(f"request c{r.client}/r{r.seq}: {len(r.bodies)} bodies acknowledged with "
                                    f"{len(r.entries)} entries")
                for b, (index, term, _pos, _size) in zip(r.bodies, r.entries):
                    e = logs[i].get(index)
                    if e is None and i in cleaned and index < min(logs[i], default=index + 1):
                        continue
                    if e is None:
                        problems.append(f"{i}: acknowledged entry {index} ({b[:40]!r}) is not in the committed log")
                    elif e.body != b or e.term != term:
                        problems.append(f"{i}: entry {index} is {e.body[:40]!r} of term {e.term}, acknowledged as "
                                        f"{b[:40]!r} of term {term}")
            elif r.outcome == "failed":
                if any(got):
                    problems.append(f"{i}: a failed append is in the log at {got} ({r.error})")
            else:
                present = [g[0] for g in got if g]
                if present and (len(present) != len(r.bodies) or present != list(range(present[0], present[0]
                                                                                         + len(present)))):
                    problems.append(f"{i}: a batch of {len(r.bodies)} with an unknown outcome is in the log only in "
                                    f"part, or out of order: {got}")
                elif present and i == ids[0]:
                    unknown_committed += len(present)
    ends = {i: max(log, default=-1) for i, log in logs.items()}
    if len(set(ends.values())) > 1:
        problems.append(f"committed indexes differ: {ends}")
    if not verify:
        return problems, unknown_committed
    for i in ids:
        r = cli("store", "verify", dirs[i], "--format", "json")
        if r.returncode != 0:
            problems.append(f"{i}: store verify exit {r.returncode}: {(r.stdout + r.stderr).strip()[:400]}")
    for i in ids[1:]:
        r = cli("store", "diff", dirs[ids[0]], dirs[i], "--format", "json")
        if r.returncode != 0:
            problems.append(f"store diff {ids[0]} {i} exit {r.returncode}: {(r.stdout + r.stderr).strip()[:400]}")
    return problems, unknown_committed
