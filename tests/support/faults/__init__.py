"""A fault harness for real node processes on 127.0.0.1: the Jepsen promise on one machine.

The promise (DLedger's, checked with Jepsen's set checker): every acknowledged append is
read back. Here, harsher: every acknowledged append is present, once, at the index it was
acknowledged with, with the same body and term, in every node's committed log; no append
the leader refused appears anywhere; committed logs are identical (``store diff``); every
store passes ``store verify``; and a leader is elected within a bound after each heal.

Pieces, each usable alone, one module each (callers import this package: ``faults.run_seed``,
``faults.check``, ... are all here):

- ``network``: :class:`LinkProxy` / :class:`Network`, one loopback TCP proxy per directed
  link (from -> to). A node reaches a peer only through its own link to it; a link passes,
  delays, drops or black-holes its traffic. Clients and the monitor reach the nodes directly.
- ``processes``: :class:`NodeProc`, a node process that can be killed (-9), paused
  (SIGSTOP/SIGCONT), restarted and stopped cleanly, and :class:`Cluster`, the group's
  processes behind the network with their monitor and the bounds a run checks.
- ``damage``: :func:`tear` damages the tail of a killed node's last data file the way a
  crash mid-write does; :func:`flip_committed` and :func:`flip_tail` flip bytes as a
  failing disk does.
- ``clients``: :class:`Appender`, concurrent clients, each appending 1-3 unique bodies per
  request and recording every :class:`Request` as ok / failed / unknown
  (``AppendError.outcome``: a timeout or a lost answer is unknown, never failed).
- ``monitor``: :class:`Monitor`, METADATA of every node several times a second. The cluster
  "has a leader" when a node leads and a quorum of nodes (itself included) follows it in its
  term (:func:`quorum_leader`).
- ``schedule``: :func:`make_schedule`, the faults of a run drawn from its seed.
- ``nemesis`` (with ``course``, ``nemesis_disk``, ``nemesis_members``): :class:`Nemesis`
  injects them on the schedule; after each fault is undone and the cluster is whole again,
  the time until it has a leader is measured.
- ``metrics``: :class:`MetricsWatch`, the nodes' Prometheus endpoints while a run goes.
- ``checks``: :func:`check` reads every node's store offline up to its committed index and
  checks the promise, then runs ``dledgerctl store verify`` and ``store diff``.
- ``runs``: :func:`run` puts them together: start, load and faults, heal, wait for one leader
  and for every node to reach its committed index, stop the nodes, check. The schedule is a
  function of the seed; what the faults hit (which node leads at that moment) depends on
  timing, so a replay repeats the faults, not the exact interleaving.

Torn writes stay inside the failure model (Raft survives losing one node's disk state
only while the others hold every committed entry): the victim is paused first and torn
only once every other node holds everything a leader other than it has, and no further
fault is injected until it has caught up again.
"""

from tests.support.faults.checks import check, cli, read_committed
from tests.support.faults.clients import Appender, Request
from tests.support.faults.damage import flip_committed, flip_tail, tear
from tests.support.faults.metrics import MetricsWatch
from tests.support.faults.monitor import Monitor, converged, quorum_leader
from tests.support.faults.nemesis import Nemesis
from tests.support.faults.network import BLACKHOLE, DROP, GROUP, HOST, PASS, LinkProxy, Network
from tests.support.faults.processes import SMALL_FILES, Cluster, NodeProc
from tests.support.faults.runs import Result, replay_command, run, run_seed
from tests.support.faults.schedule import (BITROT_FAULTS, HOSTILE_FAULTS, KILL_FAULTS, MEMBER_FAULTS, MIXED_FAULTS,
                                           PARTITION_FAULTS, PROFILES, ROTTAIL_FAULTS, SPARES, Step, make_schedule)
from tests.support.ports import free_ports  # (tests take it from here too)

__all__ = [
    "BITROT_FAULTS", "BLACKHOLE", "DROP", "GROUP", "HOST", "HOSTILE_FAULTS", "KILL_FAULTS", "MEMBER_FAULTS",
    "MIXED_FAULTS", "PARTITION_FAULTS", "PASS", "PROFILES", "ROTTAIL_FAULTS", "SMALL_FILES", "SPARES",
    "Appender", "Cluster", "LinkProxy", "MetricsWatch", "Monitor", "Nemesis", "Network", "NodeProc", "Request",
    "Result", "Step", "check", "cli", "converged", "flip_committed", "flip_tail", "free_ports", "make_schedule",
    "quorum_leader", "read_committed", "replay_command", "run", "run_seed", "tear",
]
