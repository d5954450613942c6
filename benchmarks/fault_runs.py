"""Long fault runs: seeded runs of the fault harness (tests/support/faults.py) on real node processes.

    python benchmarks/fault_runs.py --nodes 5 --minutes 20 --seeds 10      # 10 runs of 2 minutes
    python benchmarks/fault_runs.py --nodes 3 --profile mixed --seconds 60 --seed 17   # replay one

``--minutes`` is shared out among the seeds (each run's fault time is minutes / seeds);
``--profile all`` (the default) cycles through the profiles of tests/support/faults.py: kills,
partitions, mixed, members, and hostile (frames an attacker or a buggy peer sends,
tests/support/hostile.py, to every member, alone and beside kills and partitions). Runs go one at
a time (the machine's cores are shared with the nodes). Prints one summary per run, a
table at the end and the replay command of every failing seed; exit 1 if any failed.
A failing run's directory (node logs, events.log, problems.log, the stores) is kept.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

# the project's root: its packages, and tests.support (the fault harness; not installed)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.faults import PROFILES, run_seed  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--minutes", type=float, help="total fault time, shared out among the seeds")
    ap.add_argument("--seconds", type=float, help="fault time of each run (instead of --minutes)")
    ap.add_argument("--seeds", type=int, default=1, help="how many seeds (from --first-seed on)")
    ap.add_argument("--seed", type=int, help="run exactly this seed (a replay)")
    ap.add_argument("--first-seed", type=int, default=None, help="default: from the clock")
    ap.add_argument("--profile", choices=[*PROFILES, "all"], default="all")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--readers", type=int, default=0, help="clients that also put and get keys of the kv state "
                    "machine; their history is checked for linearizability")
    ap.add_argument("--consistency", choices=["linearizable", "serializable"], default="linearizable",
                    help="what the readers' gets ask for (serializable runs show the checker failing)")
    ap.add_argument("--tls", action="store_true", help="mutual TLS on every connection")
    ap.add_argument("--flush", choices=["async", "sync"], help="default: sync for odd seeds of mixed, else async")
    ap.add_argument("--workdir", default=None, help="where run directories go (default: a temporary directory)")
    ap.add_argument("--keep", action="store_true", help="keep the directories of passing runs too")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each fault as it is injected")
    args = ap.parse_args(argv)
    if args.seed is not None:
        seeds = [args.seed]
    else:
        first = args.first_seed if args.first_seed is not None else int(time.time()) % 100000
        seeds = list(range(first, first + args.seeds))
    if args.seconds is None:
        args.seconds = (args.minutes or 1.0) * 60 / len(seeds)
    profiles = list(PROFILES) if args.profile == "all" else [args.profile]
    root = args.workdir or tempfile.mkdtemp(prefix="fault-runs-")
    os.makedirs(root, exist_ok=True)
    print(f"{len(seeds)} run(s) of {args.seconds:g} s of faults on {args.nodes} nodes; directories in {root}",
          flush=True)
    results = []
    t0 = time.monotonic()
    for k, seed in enumerate(seeds):
        profile = profiles[k % len(profiles)] if args.seed is None else profiles[0]
        workdir = os.path.join(root, f"{profile}-{seed}")
        r = run_seed(seed, profile, args.seconds, workdir, keep=args.keep, nodes=args.nodes, clients=args.clients,
                     flush=args.flush, verbose=args.verbose, tls=args.tls, readers=args.readers,
                     consistency=args.consistency)
        print(r.summary(), flush=True)
        if not r.ok:
            print(f"  kept: {workdir}", flush=True)
        results.append(r)
    print()
    head = (f"{'seed':>6} {'profile':<10} {'nodes':>5} {'faults s':>8} {'ok':>7} {'failed':>6} {'unknown':>7} "
            f"{'faults':>6} {'no leader s':>11} {'heal s':>6}  result")
    print(head)
    for r in results:
        print(f"{r.seed:>6} {r.profile:<10} {r.nodes:>5} {r.seconds:>8.0f} {r.counts['ok']:>7} {r.counts['failed']:>6} "
              f"{r.counts['unknown']:>7} {sum(r.faults.values()):>6} {r.max_leaderless:>11.1f} "
              f"{r.slowest_heal:>6.1f}  {'pass' if r.ok else 'FAIL'}")
    failed = [r for r in results if not r.ok]
    total = sum(r.counts["ok"] for r in results)
    print(f"\n{len(results)} runs in {(time.monotonic() - t0) / 60:.1f} min, {total} acknowledged appends checked, "
          f"{sum(sum(r.faults.values()) for r in results)} faults; {len(failed)} failed")
    for r in failed:
        print(f"  replay: {r.replay}" + (f" --flush {args.flush}" if args.flush else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
