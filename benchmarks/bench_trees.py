#!/usr/bin/env python3
"""One commit against another in one run: bench_cluster.py's dledgerctl cases, alternating.

Each commit is checked out in a ``git worktree`` of its own (in a temporary directory,
removed at the end), its compiled twins (``*.so``, which git ignores) built from its own C
sources, and ``benchmarks/bench_cluster.py`` of *that* tree run with ``PYTHONPATH`` set to
it, so the nodes it starts run that tree's code too. Rounds alternate (and which commit
goes first in a round alternates with them), so a slow minute of the shared machine falls
on both alike. Each run is ``bench_cluster.py --seconds S --json --no-etcd --no-pysyncobj
--no-java`` (``--no-tls`` unless ``--tls``): dledgerctl flush=async and flush=sync, the
four cases each. It prints every round's entries/s, the median per commit and the ratio
new / old of the medians, and the same for the leader's CPU time per acknowledged entry
(us, from /proc), which the machine's load moves far less than throughput.

Usage: python benchmarks/bench_trees.py OLD [NEW] [--rounds 4] [--seconds 3] [--tls]
(NEW defaults to HEAD; both are anything ``git rev-parse`` takes.)
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ("1x1", "16x1", "64x1", "16x64", "16x256")  # (a tree whose bench_cluster lacks a case: not shown)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", ROOT, *args], check=True, capture_output=True, text=True).stdout.strip()


def worktree(rev: str, where: str) -> str:
    """A worktree of ``rev`` at ``where`` with its own compiled twins, built from its own C
    sources (``setup.py build_ext --inplace``: a change to them is part of what is compared);
    this checkout's are copied when that build fails (no compiler)."""
    git("worktree", "add", "--detach", where, rev)
    built = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace", "--force"], cwd=where,
                           capture_output=True, text=True)
    if built.returncode == 0 and glob.glob(os.path.join(where, "store", "_lanes*.so")):
        shutil.rmtree(os.path.join(where, "build"), ignore_errors=True)
        return where
    print(f"{rev}: its C twins did not build; this checkout's are used", file=sys.stderr)
    for so in glob.glob(os.path.join(ROOT, "**", "*.so"), recursive=True):
        rel = os.path.relpath(so, ROOT)
        if rel.startswith(".venv"):
            continue
        os.makedirs(os.path.dirname(os.path.join(where, rel)), exist_ok=True)
        shutil.copy2(so, os.path.join(where, rel))
    return where


def run_tree(tree: str, seconds: float, tls: bool) -> dict:
    cmd = [sys.executable, os.path.join(tree, "benchmarks", "bench_cluster.py"), "--seconds", str(seconds), "--json",
           "--no-etcd", "--no-pysyncobj", "--no-java"] + ([] if tls else ["--no-tls"])
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True)
    results = json.loads(out.stdout)
    return {name: {case: (r[case]["entries_per_s"], _leader_cpu(r[case])) for case in CASES if case in r}
            for name, r in results.items() if name.startswith("dledgerctl")}


def _leader_cpu(run: dict) -> float:
    """The leader's CPU time per acknowledged entry, us (bench_cluster's cpu_us): far less
    moved by the machine's load than throughput is."""
    return next((v for k, v in run.get("cpu_us", {}).items() if k.startswith("leader")), float("nan"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default="HEAD")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--tls", action="store_true", help="the mutual-TLS cases too")
    args = ap.parse_args()
    revs = {"old": git("rev-parse", "--short", args.old), "new": git("rev-parse", "--short", args.new)}
    runs: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory(prefix="bench_trees.") as tmp:
        trees = {k: os.path.join(tmp, k) for k in revs}
        try:
            for k, rev in revs.items():
                worktree(rev, trees[k])
            for rnd in range(args.rounds):
                order = ("old", "new") if rnd % 2 == 0 else ("new", "old")
                for k in order:
                    r = run_tree(trees[k], args.seconds, args.tls)
                    runs[k].append(r)
                    print(f"round {rnd + 1} {k} {revs[k]}: " + "; ".join(
                        f"{name[len('dledgerctl '):]} " + " ".join(f"{v[0]:,.0f}" for v in cases.values())
                        for name, cases in r.items()), file=sys.stderr, flush=True)
        finally:
            for where in trees.values():
                if os.path.isdir(where):
                    git("worktree", "remove", "--force", where)
    names = list(runs["old"][0])
    print(f"{args.rounds} alternating rounds of {args.seconds:g} s per case; entries/s, median of the rounds; "
          f"old {revs['old']}, new {revs['new']}")
    print(f"{'case':<20}{'old':>10}{'new':>10}{'new/old':>8}{'cpu old':>9}{'cpu new':>9}{'new/old':>8}"
          "   entries/s of every round (old | new)")
    for name in names:
        for case in (c for c in CASES if all(c in r[name] for r in runs["old"] + runs["new"])):
            old = [r[name][case] for r in runs["old"]]
            new = [r[name][case] for r in runs["new"]]
            mo, mn = statistics.median(v[0] for v in old), statistics.median(v[0] for v in new)
            co, cn = statistics.median(v[1] for v in old), statistics.median(v[1] for v in new)
            print(f"{name[len('dledgerctl '):] + ' ' + case:<20}{mo:>10,.0f}{mn:>10,.0f}{mn / mo:>8.2f}"
                  f"{co:>9.1f}{cn:>9.1f}{cn / co:>8.2f}   "
                  + " ".join(f"{v[0]:,.0f}" for v in old) + " | " + " ".join(f"{v[0]:,.0f}" for v in new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
