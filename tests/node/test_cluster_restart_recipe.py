"""docs/operations.md's "Restart a stopped group without losing entries", with real node
processes on 127.0.0.1 (issue 58 item 14): after ``cluster down``, ``store elect`` names the
member that must lead, ``cluster start`` starts it with a bare majority (it said "no cluster
record" after ``cluster down``), then the rest; ``cluster up --keep-truncated DIR`` makes each
member keep what it cuts in ``DIR/<id>``.

The members' files are written over the ones ``cluster up`` made, diverged as store elect's
own tests diverge them: n0 is ahead in term, n1 and n2 hold longer logs of an older term.
Both n0 and n1 can win; the verdict names n1, which cuts least (n0's two uncommitted entries
of term 2, where n0 would cut five of n1's). Started with n2 (which n1 refuses: the partner
the docs say to pick), n1 leads, and nothing but what the verdict predicted is cut, every
entry of it in n0's kept file.
"""

from __future__ import annotations

import json
import os
import shutil

from dledgerctl.ops.localgroup import old_logs_note
from store.filestore import FileStore
from store.kept import iter_kept
from store.metafiles import write_currterm
from tests.support.commands import cli
from tests.support.group import down, file_sizes, status, wait_for

SIZES = {"data_file_size": 65536, "index_file_size": 32 * 1024}
# member: (the term of each entry, committed index, currterm)
DIVERGED = {"n0": ([1] * 5 + [2, 2], 4, 2), "n1": ([1] * 10, 4, 1), "n2": ([1] * 8, 4, 1)}


def _write_member(base: str, nid: str, terms: list[int], committed: int, term: int) -> str:
    d = os.path.join(base, f"dledger-{nid}")
    shutil.rmtree(d, ignore_errors=True)
    with FileStore.open(d, **SIZES) as s:
        for i, t in enumerate(terms):
            s.append_leader([b"e%d-t%d" % (i, t)], t)
        s.set_committed(committed)
    write_currterm(d, term, None)
    return d


def _entries(node_dir: str) -> dict:
    with FileStore.open(node_dir, read_only=True, **SIZES) as s:
        return {i: (s.get(i).term, s.get(i).body) for i in range(max(s.begin_index, 0), s.end_index + 1)}


def _converged(base: str, ids: list[str]):
    rows = {r["id"]: r for r in status(base) if r["id"] in ids}
    leaders = [r for r in rows.values() if r.get("role") == "leader"]
    if len(rows) != len(ids) or len(leaders) != 1:
        return None
    end = leaders[0].get("end_index")
    if all(r.get("state") == "up" and r.get("end_index") == end and r.get("committed_index") == end
           for r in rows.values()):
        return leaders[0]["id"]
    return None


def test_the_restart_recipe_with_cluster_commands(group, tmp_path):
    kept = str(tmp_path / "kept")
    base = group(3, "--keep-truncated", kept, "--heartbeat-interval", "300", timeout=90,
                 sizes=file_sizes(str(SIZES["data_file_size"]), str(SIZES["index_file_size"])))
    for nid in DIVERGED:
        with open(os.path.join(base, "config", f"{nid}.toml")) as fh:
            assert f'keep-truncated = "{os.path.join(kept, nid)}"' in fh.read()
    r = cli("cluster", "down", "--base-dir", base)
    assert r.returncode == 0, r.stderr
    for nid, (terms, committed, term) in DIVERGED.items():
        _write_member(base, nid, terms, committed, term)
    before = {nid: _entries(os.path.join(base, f"dledger-{nid}")) for nid in DIVERGED}

    r = cli("store", "elect", base, "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    (verdict,) = [x for x in rows if x["row"] == "verdict"]
    assert verdict["leaders"] == ["n1"]
    named = verdict["leaders"][0]
    cuts = {x["member"]: (x["cut_from"], x["cut_to"]) for x in rows if x["row"] == "loss" and x["leader"] == named}
    assert cuts == {"n0": (5, 6)}
    partner = next(x["member"] for x in rows if x["row"] == "candidate" and named in (x["rejected_by"] or {}))
    rest = next(n for n in DIVERGED if n not in (named, partner))

    r = cli("cluster", "start", named, partner, "--base-dir", base, "--format", "json")
    assert r.returncode == 0, r.stderr
    assert "Note: no cluster record" in r.stderr
    assert sorted(x["id"] for x in json.loads(r.stdout)) == sorted([named, partner])
    assert wait_for(lambda: _converged(base, [named, partner]), 60, "the named member and its partner") == named
    assert next(x for x in status(base) if x["id"] == rest)["state"] == "down"  # (started only when asked)

    r = cli("cluster", "start", rest, "--base-dir", base)
    assert r.returncode == 0, r.stderr
    # (once all three run, a later election may go either way: the logs are one by then)
    wait_for(lambda: _converged(base, list(DIVERGED)), 60, "every member following one leader")
    down(base)
    after = {nid: _entries(os.path.join(base, f"dledger-{nid}")) for nid in DIVERGED}
    assert all(after[named].get(i) == e for i, e in before[named].items())  # (the named member lost nothing)
    for nid in DIVERGED:
        first, last = cuts.get(nid, (None, None))
        lost = {i for i, e in before[nid].items() if after[nid].get(i) != e}
        assert lost == (set(range(first, last + 1)) if first is not None else set()), nid
        directory = os.path.join(kept, nid)
        kept_entries = {h.index: (h.term, body) for p in sorted(os.listdir(directory)) if p.endswith(".entries")
                        for _off, h, body in iter_kept(os.path.join(directory, p))} if os.path.isdir(directory) else {}
        assert kept_entries == {i: before[nid][i] for i in lost}, nid  # (what it cut, and only that: kept)


def test_cluster_start_after_down_needs_config_files(tmp_path):
    empty = str(tmp_path / "none")
    os.makedirs(empty)
    r = cli("cluster", "start", "n0", "--base-dir", empty)
    assert r.returncode == 1
    assert "no cluster record" in r.stderr and "config file" in r.stderr
    assert not os.path.exists(os.path.join(empty, "cluster.json"))
    r = cli("cluster", "up", "--base-dir", empty, "--keep-truncated-bytes", "1MiB")
    assert r.returncode == 2 and "--keep-truncated-bytes needs --keep-truncated" in r.stderr


def test_cluster_up_on_old_logs_says_the_first_elected_cuts_the_others(tmp_path):
    base = str(tmp_path)
    assert old_logs_note(base, 3) is None  # (fresh: nothing to say)
    for nid, (terms, committed, term) in DIVERGED.items():
        _write_member(base, nid, terms, committed, term)
    err = old_logs_note(base, 3)
    assert "n0, n1, n2 hold logs from before" in err and f"store elect {base}" in err and "cluster start" in err
