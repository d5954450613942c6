"""Start-up of the ``dledgerctl`` command: how long a call takes before and around its work,
as a ratio to ``python -c pass`` measured in the same run (issue 50).

Not a test: it measures and prints a table (``--json`` for the numbers).

Cases, each the median of ``--repeat`` runs of the installed console script (the one a user
types; its interpreter's own start is in every figure), taken in rounds of one run of each
case so that the machine's changing load weighs on all alike; the project's modules are
byte-compiled first, as an install does (compile_modules):

- ``python -c pass``: the interpreter alone, the yardstick;
- ``dledgerctl --version`` and ``dledgerctl --help``;
- ``dledgerctl cluster status`` and ``dledgerctl append -d x`` against a local 3-member group
  that this script starts (``cluster up``) and stops;
- 100 ``dledgerctl append -d x`` calls in a shell loop against the same group, and 100
  ``etcdctl put k v`` calls against a one-member etcd (Debian's ``etcd-server`` and
  ``etcd-client``; ``--install`` runs apt-get; without them that row is left out).

Targets (issue 50): ``--version`` and ``--help`` at most 5x ``python -c pass``; ``cluster
status`` and ``append -d x`` at most 8x.

Usage: python benchmarks/bench_cli.py [--repeat 15] [--no-etcd] [--install] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BIN = os.path.dirname(sys.executable)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def exe() -> str:
    """The installed console script beside this interpreter (else ``python -m dledgerctl``)."""
    path = os.path.join(BIN, "dledgerctl")
    return path if os.path.exists(path) else ""


def cmd(*args: str) -> list[str]:
    return [exe(), *args] if exe() else [sys.executable, "-m", "dledgerctl", *args]


def once(argv: list[str]) -> float:
    """Wall time of one run of ``argv`` (which must exit 0)."""
    t = time.perf_counter()
    r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.decode(errors='replace')[-400:]}")
    return took


def timed(cases: dict[str, list[str]], repeat: int) -> dict[str, float]:
    """The median wall time of ``repeat`` runs of each case, taken in rounds (each case once a
    round, in turn): the machine's load moves while the script runs, and so it weighs on
    every case alike, the yardstick included, instead of on whichever case ran then."""
    times: dict[str, list[float]] = {case: [] for case in cases}
    for _ in range(repeat):
        for case, argv in cases.items():
            times[case].append(once(argv))
    return {case: statistics.median(t) for case, t in times.items()}


def shell_loop(line: str, n: int = 100) -> float:
    """Wall time of ``n`` runs of the shell command ``line`` in one bash loop."""
    t = time.perf_counter()
    r = subprocess.run(["bash", "-c", f"for i in $(seq {n}); do {line} >/dev/null || exit 1; done"],
                       stderr=subprocess.PIPE, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"{line}: {r.stderr.decode(errors='replace')[-400:]}")
    return time.perf_counter() - t


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port_base(n: int) -> int:
    """A port p with p .. p+n-1 all free on 127.0.0.1 (for cluster up's --port-base)."""
    for _ in range(100):
        base = free_port()
        if base + n < 65535 and all(_free(base + k) for k in range(n)):
            return base
    raise RuntimeError("no run of free ports")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def compile_modules() -> list[str]:
    """Byte-compile the project's packages where the timed command imports them from, as
    installing does. With PYTHONDONTWRITEBYTECODE set (as on some machines), an editable
    install never writes its .pyc files, and every call would compile each module it imports
    from source (about 0.1 s for a client command here): a cost no installed copy pays. (-P: the
    modules the console script finds, not the current directory's.)"""
    out = subprocess.run([sys.executable, "-P", "-c", "import os, cluster, dledgerctl, store; "
                          "print('\\n'.join(os.path.dirname(m.__file__) for m in (cluster, dledgerctl, store)))"],
                         capture_output=True, text=True, check=True).stdout.split()
    subprocess.run([sys.executable, "-m", "compileall", "-q", *out], stdout=subprocess.DEVNULL, check=True)
    return out


def commit(where: str) -> str:
    """The commit of the checkout ``where`` (the timed command's modules), ``?`` outside one."""
    r = subprocess.run(["git", "-C", where, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def start_etcd(tmp: str):
    """A one-member etcd on loopback ports; (process, endpoint) or None when not installed."""
    if not shutil.which("etcd") or not shutil.which("etcdctl"):
        log("etcd/etcdctl not installed (apt-get install etcd-server etcd-client, or --install): row left out")
        return None
    client, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{client}"
    proc = subprocess.Popen(["etcd", "--data-dir", os.path.join(tmp, "etcd"), "--listen-client-urls", url,
                             "--advertise-client-urls", url, "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                             "--initial-cluster", f"default=http://127.0.0.1:{peer}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    env = dict(os.environ, ETCDCTL_API="3")
    while time.monotonic() < deadline:
        if subprocess.run(["etcdctl", "--endpoints", url, "put", "warm", "up"], env=env,
                          capture_output=True).returncode == 0:
            return proc, url
        time.sleep(0.2)
    proc.terminate()
    raise RuntimeError("etcd did not come up in 30 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--no-etcd", action="store_true")
    ap.add_argument("--install", action="store_true", help="apt-get install etcd-server etcd-client when missing")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.install and not shutil.which("etcdctl"):
        subprocess.run(["apt-get", "install", "-y", "-q", "etcd-server", "etcd-client"], check=True)
    tmp = tempfile.mkdtemp(prefix="bench-cli-")
    base = os.path.join(tmp, "c")
    res: dict[str, float] = {}
    etcd = None
    modules = compile_modules()
    log(f"byte-compiled {', '.join(modules)}")
    load = [os.getloadavg()[0]]
    try:
        log("a local 3-member group (cluster up)")
        r = subprocess.run(cmd("cluster", "up", "--base-dir", base, "--nodes", "3", "--port-base",
                               str(free_port_base(3)), "--wait", "60", "--format", "json"),
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"cluster up: {r.stderr[-400:]}")
        log(f"python -c pass, --version, --help, cluster status, append -d x: {args.repeat} rounds")
        res.update(timed({"python -c pass": [sys.executable, "-c", "pass"], "--version": cmd("--version"),
                          "--help": cmd("--help"), "cluster status": cmd("cluster", "status", "--base-dir", base),
                          "append -d x": cmd("append", "--base-dir", base, "-d", "x")}, args.repeat))
        log("100 appends in a shell loop")
        res["100 x append -d x"] = shell_loop(" ".join(cmd("append", "--base-dir", base, "-d", "x")))
        if not args.no_etcd:
            etcd = start_etcd(tmp)
            if etcd is not None:
                log("100 etcdctl puts in a shell loop")
                os.environ["ETCDCTL_API"] = "3"
                res["100 x etcdctl put"] = shell_loop(f"etcdctl --endpoints {etcd[1]} put k v")
    finally:
        load.append(os.getloadavg()[0])
        subprocess.run(cmd("cluster", "down", "--base-dir", base), capture_output=True, timeout=120)
        if etcd is not None:
            etcd[0].terminate()
            etcd[0].wait(30)
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps({**res, "commit": commit(modules[0]), "load average": load}))
        return 0
    unit = res["python -c pass"]
    targets = {"--version": 5, "--help": 5, "cluster status": 8, "append -d x": 8}
    print(f"\nat {commit(modules[0])}, load average {load[0]:.1f} at the start, {load[1]:.1f} at the end; median of "
          f"{args.repeat} runs each, in rounds; ratio to python -c pass ({unit * 1000:.0f} ms)\n")
    print(f"{'case':<22} {'ms':>8} {'ratio':>7} {'target':>7}")
    for case, t in res.items():
        if case.startswith("100 x"):
            continue
        target = f"<= {targets[case]}" if case in targets else ""
        print(f"{case:<22} {t * 1000:>8.0f} {t / unit:>7.1f} {target:>7}")
    if "100 x append -d x" in res:
        print(f"\n100 calls in a shell loop: dledgerctl append {res['100 x append -d x']:.2f} s", end="")
        if "100 x etcdctl put" in res:
            e = res["100 x etcdctl put"]
            print(f", etcdctl put {e:.2f} s (ratio {res['100 x append -d x'] / e:.1f})", end="")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
