"""The README's tour and the recipes of docs/, run literally, line by line, in order, as a
newcomer runs them, each page on a fresh local cluster (started as the README's first
command starts it: scripts/cluster.sh's ``cluster up`` line). A line that exits non-zero
fails the test, naming the page, the line and what it printed.

What is changed, and only this: the default store directory ``/tmp/dledgerstore`` is the
test's own (the commands read ``DLEDGER_STORE``, and the paths the text spells out are
rewritten), other ``/tmp/`` files the text writes go to the test's directory, the cluster's
ports are free ones (``DLEDGERCTL_PORT_BASE``), and a command that runs until Ctrl-C
(``--follow``, ``--watch``) gets SIGINT after two seconds. A line whose comment says it
``exits N`` may exit N (or 0). Blocks a page marks
``<!-- tour: skip, REASON -->`` (another machine, root) are skipped with the reason, and
those marked ``<!-- tour: needs TOOL -->`` when TOOL is not installed; blocks of another
language (```toml) are not commands.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys

import pytest

from tests.support.paths import ROOT
from tests.support.ports import free_port_base

BIN = os.path.dirname(sys.executable)
DEFAULT_STORE = "/tmp/dledgerstore"
UNTIL_INTERRUPTED = ("--follow", "--watch")
PAGES = ["README.md"] + sorted(os.path.join("docs", n) for n in os.listdir(os.path.join(ROOT, "docs"))
                               if n.endswith(".md"))


def blocks(page: str) -> list[tuple[str | None, list[str]]]:
    """The page's shell blocks in order: (why skipped or None, its command lines, with
    continuation lines joined and comment-only lines dropped)."""
    with open(os.path.join(ROOT, page), encoding="utf-8") as fh:
        text = fh.read()
    out = []
    for m in re.finditer(r"(?:^[ \t]*<!-- tour: (?:skip, (?P<why>.*?)|needs (?P<tool>[\w-]+)) -->\n)?"
                         r"^(?P<indent>[ \t]*)```(?P<info>[^\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
                         text, re.S | re.M):
        if m["info"].strip() not in ("", "sh", "bash", "shell"):
            continue
        body = re.sub(r"\\\n\s*", " ", m["body"])
        lines = [ln.strip() for ln in body.split("\n") if ln.strip() and not ln.strip().startswith("#")]
        why = m["why"]
        if m["tool"] and shutil.which(m["tool"]) is None:
            why = f"{m['tool']} is not installed"
        out.append((why, lines))
    return out


def cluster_up_line() -> str:
    """The line of scripts/cluster.sh that starts the cluster (the README's first command)."""
    with open(os.path.join(ROOT, "scripts", "cluster.sh")) as fh:
        line = next(ln for ln in fh.read().split("\n") if " cluster up " in ln)
    return line.replace(".venv/bin/dledgerctl", "dledgerctl").replace('"$BASE"', '"$DLEDGER_STORE"')


def run_line(line: str, env: dict, cwd: str, timeout: float = 180) -> tuple[int, str]:
    interrupted = any(opt in line.split() for opt in UNTIL_INTERRUPTED)
    proc = subprocess.Popen(["bash", "-c", f"set -o pipefail; {line}"], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=2.0 if interrupted else timeout)
    except subprocess.TimeoutExpired:
        if not interrupted:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return -1, out.decode(errors="replace") + f"\n(still running after {timeout:g} s)"
        os.killpg(proc.pid, signal.SIGINT)  # (what Ctrl-C sends)
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # (Ctrl-C did not end it: nothing of it may outlive the test)
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return -1, out.decode(errors="replace") + "\n(still running 30 s after Ctrl-C)"
        return (0 if proc.returncode in (0, 130, -signal.SIGINT) else proc.returncode), out.decode(errors="replace")
    return proc.returncode, out.decode(errors="replace")


def rewrite(line: str, store: str, scratch: str) -> str:
    line = line.replace(DEFAULT_STORE, store)
    return re.sub(r"(?<![\w.])/tmp/(?!pytest)", scratch + "/", line)


@pytest.mark.parametrize("page", PAGES)
def test_the_page_runs_as_written(page, tmp_path):
    todo = blocks(page)
    runnable = [lines for why, lines in todo if why is None]
    if not runnable:
        pytest.skip("; ".join(sorted({why for why, _ in todo if why})) or "no shell blocks")
    store, scratch = str(tmp_path / "dledgerstore"), str(tmp_path / "scratch")
    os.makedirs(scratch)
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "DLEDGER_STORE": store,
           "DLEDGERCTL_PORT_BASE": str(free_port_base(3)), "COLUMNS": "200", "PYTHONPATH": ROOT}
    ran = []
    try:
        code, out = run_line(cluster_up_line(), env, ROOT)
        assert code == 0, f"{page}: starting the cluster failed:\n{out}"
        for lines in runnable:
            for line in lines:
                code, out = run_line(rewrite(line, store, scratch), env, ROOT)
                ran.append(line)
                said = re.search(r"#.*\bexits (\d+)\b", line)  # (the text says to expect it)
                want = (0, int(said[1])) if said else (0,)
                assert code in want, f"{page}: `{line}` exited {code} (after {len(ran) - 1} lines ran):\n{out[-3000:]}"
    finally:
        subprocess.run(["dledgerctl", "cluster", "down", "--base-dir", store], env=env, capture_output=True,
                       timeout=60)
    assert ran


def test_the_pages_mark_what_they_skip_and_run_the_rest():
    skipped = {page: [why for why, _ in blocks(page) if why] for page in PAGES}
    assert all(why.strip() for whys in skipped.values() for why in whys)
    readme = blocks("README.md")
    assert any("dledgerctl peer transfer-leader --to n0" in ln for why, lines in readme if why is None for ln in lines)


def test_transfer_right_after_a_restart_passes_20_times_in_a_row(group):
    """The tour's sequence: a member killed, an append, the member started, leadership handed
    to it at once. The leader has not heard from it for a while and it lacks the append:
    transfer-leader waits for both, within its timeout, instead of failing."""
    from tests.support.commands import cli
    from tests.support.group import file_sizes, leader_of

    base = group(3, sizes=file_sizes("1MiB", "64KiB"))
    for k in range(20):
        leader = leader_of(base)
        target = ("n0", "n1", "n2")[(("n0", "n1", "n2").index(leader) + 1) % 3]
        assert cli("cluster", "stop", "--base-dir", base, target, "--kill").returncode == 0
        r = cli("append", "--base-dir", base, "-d", f"while {target} is down ({k})")
        assert r.returncode == 0, r.stderr
        assert cli("cluster", "start", "--base-dir", base, target).returncode == 0
        r = cli("peer", "transfer-leader", "--base-dir", base, "--to", target, "--format", "json")
        assert r.returncode == 0, f"round {k}: {r.stderr}"
        assert leader_of(base) == target, k
