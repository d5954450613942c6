"""A local group of real node processes driven through ``cluster up|status|start|down``
(the record ``cluster up`` keeps in ``<base>/cluster.json``), and waiting on them.

:class:`Groups` is what every test that starts a group uses, through the ``group`` fixture
(one test) or ``module_group`` (a module's tests together), both in tests/conftest.py."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from cluster.net.answers import AppendAnswer
from cluster.net.client import Client
from cluster.raft.config import parse_peers
from tests.support.commands import cli, invoke
from tests.support.ports import free_port_base


def file_sizes(data: str, index: str) -> tuple[str, ...]:
    """The options of a member's data and index file sizes."""
    return ("--data-file-size", data, "--index-file-size", index)


SMALL = file_sizes("8MiB", "1MiB")  # several files, little disk


def wait_for(cond, deadline_s: float, what: str):
    """``cond()``'s first true value, polled every 0.1 s; AssertionError after ``deadline_s``."""
    end = time.monotonic() + deadline_s
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def status(base):
    """``cluster status`` rows. Run in this process (the command's own code, against the real
    members): tests poll it every 0.1 s, and a process a poll cost 0.2 s of CPU each."""
    r = invoke("cluster", "status", "--base-dir", base, "--format", "json", "--timeout", "1")
    return json.loads(r.stdout) if r.stdout.strip() else []


def up(base, nodes=3, *extra, sizes=SMALL, port_base=None, timeout: float = 60):
    """``cluster up`` of ``nodes`` members on free ports, waiting up to 40 s (the command
    itself up to ``timeout``); its rows."""
    port_base = free_port_base(nodes) if port_base is None else port_base
    r = cli("cluster", "up", "--base-dir", base, "--nodes", str(nodes), "--port-base", str(port_base),
            "--format", "json", "--wait", "40", *sizes, *extra, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def recorded(base) -> dict:
    """What ``cluster up`` recorded: peers, and each node's id, pid, log, ... (and tls)."""
    with open(os.path.join(base, "cluster.json")) as fh:
        return json.load(fh)


def up_recorded(base, *extra, sizes=SMALL, port_base=None) -> dict:
    """:func:`up` of three members, then their :func:`recorded`."""
    up(base, 3, *extra, sizes=sizes, port_base=port_base)
    return recorded(base)


def down(base):
    """Stop what 'cluster up' recorded; check nothing recorded survives."""
    if not os.path.exists(os.path.join(base, "cluster.json")):
        return
    rec = recorded(base)
    d = cli("cluster", "down", "--base-dir", base, "--format", "json")
    assert d.returncode == 0, d.stderr
    for n in rec["nodes"]:
        assert not os.path.exists(f"/proc/{n['pid']}") or open(f"/proc/{n['pid']}/cmdline", "rb").read() == b""


def pid_of(base, node_id):
    return next(n["pid"] for n in recorded(base)["nodes"] if n["id"] == node_id)


def restart(base, node_id):
    """Start a recorded node again with its recorded command, through 'cluster start'."""
    r = cli("cluster", "start", "--base-dir", base, node_id, "--wait", "30", "--format", "json")
    assert r.returncode == 0, r.stderr
    row, = json.loads(r.stdout)
    assert row["id"] == node_id and row["result"] == "started" and row["state"] == "up", row


def leader_of(base):
    return wait_for(lambda: next((x["id"] for x in status(base) if x.get("role") == "leader"), None), 30, "a leader")


def bodies_of(base, node_id):
    """Every entry body in a node's store, read offline (the store may be live: read-only)."""
    r = cli("store", "inspect-data", os.path.join(base, f"dledger-{node_id}"), "--body", "utf8", "--format", "json")
    assert r.returncode == 0, r.stderr
    return [(e["index"], e["term"], e.get("body")) for e in json.loads(r.stdout)]


def append_lines(base, lines: list[str], batch: int = 100) -> list[dict]:
    r = cli("append", "--base-dir", base, "--file", "-", "--lines", "--batch", str(batch), "--format", "json",
            "--timeout", "30", input="".join(x + "\n" for x in lines), timeout=180)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def level(base) -> list[dict] | None:
    """Status rows once every member is up with the same end and commit index."""
    rows = status(base)
    ok = (rows and all(x["state"] == "up" for x in rows)
          and len({(x["end_index"], x["committed_index"]) for x in rows}) == 1)
    return rows if ok else None


def append_bodies(base, bodies: list[bytes]) -> AppendAnswer:
    """Append ``bodies`` in one client request to the recorded group; the answer (its
    ``entries`` hold each body's index)."""
    rec = recorded(base)

    async def put():
        c = Client(parse_peers(rec["peers"]), rec["group"], timeout=10)
        try:
            return await c.append(bodies)
        finally:
            await c.close()
    return asyncio.run(put())


class Groups:
    """The local groups one test (or one module's tests) starts: ``groups(nodes, *options)``
    runs ``cluster up`` in a new base directory under ``root`` (or in ``base``, which may hold
    members' stores already: :meth:`base` makes one), waits until every member is up and
    exactly one leads, and returns the base directory. :meth:`close` stops every group
    started (``cluster down``, checking no process survives), a start that failed half-way
    too; the fixtures call it at the end, whether the test passed or not."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.bases: list[str] = []  # every base directory made, in order (stopped at the end)

    def base(self) -> str:
        """A new base directory (not made): ``c``, then ``c1``, ``c2``, ... under ``root``."""
        path = str(self.root / ("c" if not self.bases else f"c{len(self.bases)}"))
        self.bases.append(path)
        return path

    def __call__(self, nodes: int = 3, *options: str, base: str | None = None, sizes=SMALL,
                 port_base: int | None = None, timeout: float = 60) -> str:
        """Start a group of ``nodes`` members with ``cluster up`` ``options`` (and ``sizes``,
        ``port_base``, ``timeout``: as :func:`up`); its base directory once it serves. A
        group with ``--tls`` among its options has its certificates in the record
        (:meth:`recorded`, its ``tls``), as ``cluster up --tls`` writes them."""
        if base is None:
            base = self.base()
        elif base not in self.bases:
            self.bases.append(base)
        rows = up(base, nodes, *options, sizes=sizes, port_base=port_base, timeout=timeout)
        assert len(rows) == nodes and all(x["state"] == "up" for x in rows), rows
        assert sum(x["role"] == "leader" for x in rows) == 1, rows
        if "--tls" in options:
            assert recorded(base).get("tls"), "cluster up --tls recorded no certificates"
        return base

    def recorded(self, nodes: int = 3, *options: str, **how) -> tuple[str, dict]:
        """:meth:`__call__`, and what ``cluster up`` recorded for the group (:func:`recorded`:
        its peers, each member's id, pid, log, ..., and its ``tls`` with ``--tls``)."""
        base = self(nodes, *options, **how)
        return base, recorded(base)

    def close(self) -> None:
        """Stop every group started; the first failure to stop one is raised after all were tried."""
        failed = None
        for base in self.bases:
            try:
                down(base)
            except Exception as exc:  # noqa: BLE001 - stop the others first
                failed = failed or exc
        if failed is not None:
            raise failed
