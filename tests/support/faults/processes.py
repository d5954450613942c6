"""The harness's node processes: :class:`NodeProc`, one node process
(``cluster.node.launcher.node_command``) that can be killed (-9), paused (SIGSTOP/SIGCONT),
restarted and stopped cleanly, and :class:`Cluster`, the group's processes behind a proxied
:class:`~tests.support.faults.network.Network`, its :class:`~tests.support.faults.monitor.Monitor`,
the spares a membership change may add, and the bounds a run checks.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import time

from cluster.net.tls import Identity, Tls, TlsFiles
from cluster.node import pki
from cluster.node.launcher import node_command
from cluster.raft.config import Peer
from tests.support.faults.monitor import Monitor, converged
from tests.support.faults.network import GROUP, HOST, Network
from tests.support.paths import ROOT
from tests.support.ports import free_ports

SMALL_FILES = ["--data-file-size", "1MiB", "--index-file-size", "256KiB"]  # many files, little disk


def _die_with_the_harness() -> None:
    """In a node process before it runs: have the kernel SIGKILL it when the process that
    started it dies, however that dies (Linux's PR_SET_PDEATHSIG). The nodes run in
    sessions of their own, so without this a harness killed mid-run left them running,
    holding elections for nobody."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: stop() and kill() still clean up a harness that ends normally


class NodeProc:
    """One node process; its store lives in ``<base_dir>/dledger-<id>``."""

    def __init__(self, node_id: str, port: int, peers: str, base_dir: str, flush: str, extra: list[str],
                 log_dir: str, tls_dir: str | None = None, metrics_port: int | None = None) -> None:
        self.id, self.port = node_id, port
        self.base_dir = base_dir
        self.dir = os.path.join(base_dir, f"dledger-{node_id}")
        self.log = os.path.join(log_dir, f"{node_id}.log")
        self.metrics = None if metrics_port is None else f"http://{HOST}:{metrics_port}/metrics"
        # (the metrics stay plain HTTP under TLS too: MetricsWatch scrapes without a certificate)
        self.cmd = node_command(GROUP, node_id, peers, base_dir, flush, extra, tls_dir,
                                None if metrics_port is None else f"{HOST}:{metrics_port}", metrics_tls=False)
        self.proc: subprocess.Popen | None = None
        self.state = "down"  # up | paused | down
        self.starts = 0

    def start(self) -> None:
        os.makedirs(self.base_dir, exist_ok=True)
        with open(self.log, "ab") as out:
            out.write(f"--- start {self.starts} at {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.base_dir,
                                         env=dict(os.environ, PYTHONPATH=ROOT), preexec_fn=_die_with_the_harness)
        self.starts += 1
        self.state = "up"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.state = "down"

    def pause(self) -> None:
        if self.state == "up":
            self.proc.send_signal(signal.SIGSTOP)
            self.state = "paused"

    def resume(self) -> None:
        if self.state == "paused":
            self.proc.send_signal(signal.SIGCONT)
            self.state = "up"

    def exited(self) -> bool:
        return self.proc is None or self.proc.poll() is not None

    async def stop(self, timeout: float = 20.0) -> bool:
        """SIGTERM and wait; True when it exited on its own (False: killed after ``timeout``)."""
        if self.proc is None or self.proc.poll() is not None:
            self.state = "down"
            return True
        self.resume()
        self.proc.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < end:
            await asyncio.sleep(0.05)
        clean = self.proc.poll() is not None
        if not clean:
            self.kill()
        self.state = "down"
        return clean

    def log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log, "rb") as fh:
                fh.seek(0, 2)
                fh.seek(max(0, fh.tell() - 16384))
                return "\n".join(fh.read().decode(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Cluster:
    """Node processes behind a proxied network, a monitor, and the bounds a run checks."""

    def __init__(self, workdir: str, nodes: int, seed: int, flush: str = "async", extra: list[str] | None = None,
                 base_dirs: dict[str, str] | None = None, heal_bound: float = 15.0,
                 catch_up_bound: float = 30.0, tls: bool = False, spares: int = 0) -> None:
        self.workdir = workdir
        self.ids = [f"n{i}" for i in range(nodes)]  # the group's members now
        # ids that may join later (membership changes), each with a port and links from the start
        self.spares = [f"n{i}" for i in range(nodes, nodes + spares)]
        self.all_ids = self.ids + self.spares
        self.gone: list[str] = []  # removed from the group and stopped for good
        self.retired: dict[str, NodeProc] = {}
        self.with_spares = spares > 0
        self.ports = dict(zip(self.all_ids, free_ports(len(self.all_ids))))
        self.metrics_ports = dict(zip(self.all_ids, free_ports(len(self.all_ids))))
        self.seed, self.flush = seed, flush
        self.extra = SMALL_FILES + (extra or [])
        self.base_dirs = base_dirs or {i: os.path.join(workdir, "store") for i in self.all_ids}
        self.log_dir = os.path.join(workdir, "logs")
        self.net = Network(self.all_ids, self.ports, seed)
        self.direct = {i: Peer(i, HOST, self.ports[i]) for i in self.all_ids}
        self.nodes: dict[str, NodeProc] = {}
        # with TLS: a certificate per member and one for the harness (an operator), end to end
        # through the proxies (they forward bytes)
        self.tls_dir, self.tls = None, None
        if tls:
            self.tls_dir = os.path.join(workdir, "tls")
            for i in self.all_ids:
                pki.issue(self.tls_dir, Identity(GROUP, "member", i))
            cert, key = pki.issue(self.tls_dir, Identity(GROUP, "operator", "harness"))
            self.tls = Tls(TlsFiles(cert, key, os.path.join(self.tls_dir, pki.CA_CERT)))
        self.monitor = Monitor(self.direct, tls=self.tls)
        self.monitor.set_members(self.ids, nodes)
        self.quorum = nodes // 2 + 1
        self.heal_bound, self.catch_up_bound = heal_bound, catch_up_bound
        self._monitor_task: asyncio.Task | None = None

    async def start(self) -> None:
        os.makedirs(self.log_dir, exist_ok=True)
        await self.net.start()
        for i in self.ids:
            self.nodes[i] = self._proc(i, self.ids)
            self.nodes[i].start()
        self._monitor_task = asyncio.ensure_future(self.monitor.run())

    def _proc(self, i: str, members: list[str], learner: bool = False) -> "NodeProc":
        """A node whose --peers are ``members`` (and itself) behind its links, and which
        reaches every other id, a spare's too, through its own link to it."""
        extra = list(self.extra) + (["--learner"] if learner else [])
        if self.with_spares:
            for p in self.all_ids:
                if p != i:
                    extra += ["--peer-address", f"{p}={HOST}:{self.net.links[(i, p)].port}"]
        return NodeProc(i, self.ports[i], self.net.peers_for(i, sorted(set(members) | {i})), self.base_dirs[i],
                        self.flush, extra, self.log_dir, self.tls_dir, self.metrics_ports[i])

    def start_spare(self) -> str | None:
        """Start the next spare id as a learner knowing the current members; its id."""
        if not self.spares:
            return None
        i = self.spares.pop(0)
        self.nodes[i] = self._proc(i, self.ids, learner=True)
        self.nodes[i].start()
        return i

    def set_members(self, members: list[str], voters: int) -> list[str]:
        """The group's members are now ``members``: started nodes that are not are stopped
        for good (removed, or added but never made members); their ids."""
        for i in members:  # a member stopped on an older view of the group: started again
            if i not in self.nodes and i in self.retired:
                self.nodes[i] = self.retired.pop(i)
                self.nodes[i].start()
                self.gone.remove(i)
        self.ids = [i for i in self.all_ids if i in members and i in self.nodes]
        self.quorum = voters // 2 + 1
        self.monitor.set_members(self.ids, voters)
        out = [i for i in self.nodes if i not in members]
        for i in out:
            self.retired[i] = self.nodes.pop(i)
            self.retired[i].kill()
            self.gone.append(i)
        return out

    async def time_to_leader(self, bound: float) -> float | None:
        """Seconds until the monitor sees a leader (0 when it already does), None past ``bound``."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await self.monitor.sample()
        if await self.monitor.wait(lambda m: m.leader is not None, bound):
            return loop.time() - t0
        return None

    def tracebacks(self) -> list[str]:
        """A node that logged a traceback hit a bug (a peer's bad message included): a finding."""
        out = []
        for n in list(self.nodes.values()) + list(self.retired.values()):
            try:
                with open(n.log, errors="replace") as fh:
                    text = fh.read()
            except OSError:
                continue
            if "Traceback (most recent call last)" in text:
                at = text.index("Traceback (most recent call last)")
                out.append(f"{n.id} logged a traceback: " + " | ".join(text[at:at + 2000].splitlines()[-4:]))
        return out

    def died(self) -> list[str]:
        """Nodes that exited without being killed or stopped (a crash: a finding), marked down."""
        out = []
        for n in self.nodes.values():
            if n.state != "down" and n.exited():
                out.append(f"{n.id} exited by itself (code {n.proc.returncode}): "
                           + " | ".join(n.log_tail(3).splitlines()))
                n.state = "down"
        return out

    def heal_all(self) -> list[str]:
        """Every link passes, paused nodes resume, killed (or crashed) nodes restart."""
        self.net.heal()
        crashed = self.died()
        for n in self.nodes.values():
            if n.state == "paused":
                n.resume()
            elif n.state == "down":
                n.start()
        return crashed

    async def converge(self, timeout: float) -> bool:
        """Converged, as seen by a sample taken wholly after this call (an older one may
        predate the last appends: a follower learns the final commit index a few ms after
        the leader, from the next push or an idle COMMIT)."""
        fresh = self.monitor.samples + 2
        return await self.monitor.wait(lambda m: m.samples >= fresh and converged(m.last, self.quorum), timeout)

    async def stop(self) -> list[str]:
        """Stop every node (SIGTERM), the monitor and the proxies; problems found doing so."""
        problems = []
        for n in self.nodes.values():
            if n.state == "down" and n.exited():
                continue
            if not await n.stop():
                problems.append(f"{n.id} did not stop within 20 s of SIGTERM (killed)")
            elif n.proc.returncode not in (0, -signal.SIGTERM):
                problems.append(f"{n.id} exited with code {n.proc.returncode}")
        self.monitor.stopping.set()
        if self._monitor_task is not None:
            await asyncio.gather(self._monitor_task, return_exceptions=True)
        await self.net.close()
        return problems

    def kill_all(self) -> None:
        for n in self.nodes.values():
            n.resume()
            n.kill()
