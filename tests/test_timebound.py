"""tests/support/timebound.py: in a parallel run the timebound tests go first in one xdist
group, and a worker runs them at its own priority and everything after them niced."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import timebound
from tests.support.paths import ROOT


class Item:
    def __init__(self, name: str, bound: bool) -> None:
        self.nodeid = name
        self.marks = [pytest.mark.timebound.mark] if bound else []

    def get_closest_marker(self, name: str):
        return next((m for m in self.marks if m.name == name), None)

    def add_marker(self, mark) -> None:
        self.marks.append(mark.mark)


def test_the_timebound_tests_go_first_in_one_group():
    items = [Item("a", False), Item("f1", True), Item("b", False), Item("f2", True), Item("c", False)]
    timebound.order(items)
    assert [i.nodeid for i in items] == ["f1", "f2", "a", "b", "c"]
    groups = [[m.args[0] for m in i.marks if m.name == "xdist_group"] for i in items]
    assert groups == [["timebound"], ["timebound"], [], [], []]


PRIORITY = """
import os, pytest, sys
sys.path.insert(0, sys.argv[1])
from tests.support import timebound
from tests.test_timebound import Item
p = timebound.Priority()
start = os.nice(0)
seen = []
for name, bound in (("f1", True), ("f2", True), ("a", False), ("b", False)):
    p.before(Item(name, bound))
    seen.append(os.nice(0) - start)
try:
    p.before(Item("late", True))
    seen.append("no error")
except RuntimeError as exc:
    seen.append(str(exc))
print(seen)
"""


def test_a_worker_runs_niced_from_its_first_test_without_the_mark():
    """(In a child process: niceness cannot be taken back.)"""
    r = subprocess.run([sys.executable, "-c", PRIORITY, ROOT], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert r.returncode == 0, r.stderr
    more = min(os.nice(0) + timebound.NICE, 19) - os.nice(0)  # (19 at most: this run may be niced already)
    assert more > 0
    assert r.stdout.strip() == str([0, 0, more, more, "late is timebound but its worker already runs niced"])


GROUPED = '''
import os, time
import pytest

def _note(tmp_path_factory, name):
    out = tmp_path_factory.getbasetemp().parent.parent / "workers"
    out.mkdir(exist_ok=True)
    (out / name).write_text(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("k", range(6))
@pytest.mark.xdist_group("g")
def test_grouped(k, tmp_path_factory):
    time.sleep(0.2)
    _note(tmp_path_factory, f"grouped-{k}")

@pytest.mark.parametrize("k", range(6))
def test_loose(k, tmp_path_factory):
    time.sleep(0.2)
    _note(tmp_path_factory, f"loose-{k}")
'''


def test_xdist_sends_a_group_to_one_worker(tmp_path):
    """What the Spark and timebound groups rest on: with this pytest and pytest-xdist,
    ``--dist loadgroup`` runs every test of an xdist_group on one worker (pytest 9.2 broke
    it: pyproject.toml)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_groups.py").write_text(GROUPED)
    (tmp_path / "base").mkdir()
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                        "--basetemp", str(tmp_path / "base" / "run"), str(tmp_path / "test_groups.py")],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ran = {p.name: p.read_text() for p in (tmp_path / "base" / "workers").iterdir()}
    assert len(ran) == 12
    assert len({ran[f"grouped-{k}"] for k in range(6)}) == 1, ran
