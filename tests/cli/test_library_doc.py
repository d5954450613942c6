"""docs/library.md's Python, run as a reader runs it: each ```python block in a fresh
interpreter, against a real local group (the README's cluster, in the test's own base
directory, found through $DLEDGER_STORE as the page says). The second block defines a
coroutine: the test awaits it on the same group, and it names a member."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.support.paths import ROOT

PAGE = os.path.join(ROOT, "docs", "library.md")


def python_blocks() -> list[str]:
    with open(PAGE, encoding="utf-8") as fh:
        return [m[1] for m in re.finditer(r"^```python\n(.*?)^```$", fh.read(), re.S | re.M)]


def run(code: str, base: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, DLEDGER_STORE=base)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=60)


def test_the_pages_python_runs_against_a_local_group(group):
    base = group(3)
    first, second = python_blocks()
    r = run(first, base)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("leader n") and " term " in lines[0], r.stdout
    assert re.fullmatch(r"appended at \[\d+, \d+\]", lines[1]), r.stdout
    assert lines[2].startswith("followers' lag {"), r.stdout
    assert "'state': 'up'" in lines[3], r.stdout

    r = run("import os\n" + second + "\nprint(asyncio.run(leader_of(find_target(base_dir=os.environ['DLEDGER_STORE']))))\n",
            base)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() in ("n0", "n1", "n2"), r.stdout  # (the leader then: it may have moved since)
