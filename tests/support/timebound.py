"""Tests with wall-clock bounds in what they check (``@pytest.mark.timebound``), in a parallel run.

The seeded fault runs (tests/node/test_faults.py) check, besides safety, that a leader comes
back within a bound after each heal. That bound is about the nodes, not about the machine:
beside three other pytest-xdist workers on two cores, a starved member missed it. So in a
parallel run (tests/conftest.py):

- the timebound tests go first, all in one xdist group, so one worker runs them one after
  the other at the priority it started with;
- every other test runs niced (:data:`NICE` more): a worker lowers its own priority before
  its first other test, and the node processes, commands and JVMs that test starts inherit
  it. The kernel's scheduler then gives the timebound tests' processes the CPU whenever they
  want it, and the other workers the rest, so the cores stay busy without starving them.

Nothing changes in a serial run. Lowering one's priority needs no privilege; raising it
back would, which is why the timebound tests go first.
"""

from __future__ import annotations

import os

import pytest

MARK = "timebound"
NICE = 10


def parallel(config) -> bool:
    """Whether this process is a pytest-xdist worker."""
    return hasattr(config, "workerinput")


def order(items: list[pytest.Item]) -> None:
    """The timebound tests first, in one xdist group (in place)."""
    first = [item for item in items if item.get_closest_marker(MARK)]
    for item in first:
        item.add_marker(pytest.mark.xdist_group(MARK))
    items[:] = first + [item for item in items if not item.get_closest_marker(MARK)]


class Priority:
    """This worker's priority: as it started until its first test without the mark, niced
    from then on (a worker that met a timebound test after that would say so)."""

    def __init__(self) -> None:
        self.niced = False

    def before(self, item: pytest.Item) -> None:
        if item.get_closest_marker(MARK) is None:
            if not self.niced:
                os.nice(NICE)
                self.niced = True
        elif self.niced:  # (order() puts them all first: only a worker's own reordering gets here)
            raise RuntimeError(f"{item.nodeid} is timebound but its worker already runs niced")
