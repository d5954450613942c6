"""A local group of node processes (``cluster up`` and ``cluster start``): started through
cluster/node/launcher.py, then waited on until every member serves (and one leads), a fresh
start leaving nothing behind when it fails."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Callable

import msgspec

from cluster.net.tls import ANY_GROUP, Identity
from cluster.node import launcher, pki
from cluster.node.launcher import LauncherError
from cluster.raft.config import DEFAULT_GROUP, SETTINGS, parse_peers

from .status import MemberStatus, status
from .targets import OpsError, Target, record_tls


class StartFailed(OpsError):
    """A member that was started exited, refuses the client, or no leader came in time."""


class UpResult(msgspec.Struct):
    """``record``: the cluster record; ``rows``: each member's status once it served;
    ``actions``: per member, started or what the launcher did with it (running already, say)."""

    record: dict
    rows: list[MemberStatus]
    actions: dict[str, str]


# a member's config key (node start's option) -> the cluster up parameter that sets it: a setting's
# own field (SETTINGS), else one of these
KEY_PARAMS = {"peers": "port_base", "tls-ca": "tls", "tls-cert": "tls", "tls-key": "tls",
              "metrics-address": "metrics_port_base", "metrics-tls": "metrics_port_base",
              **{s.key: s.field for s in SETTINGS if s.up}}


def record_target(rec: dict, timeout: float = 1.0) -> Target:
    """The target of a cluster record (its operator certificate with ``--tls``)."""
    return Target(parse_peers(rec["peers"]), rec.get("group", DEFAULT_GROUP), timeout, record_tls(rec), rec)


def wait_until_serving(rec: dict, started: list, wait: float, need_leader: bool,
                       ids: list[str] | None = None) -> list[MemberStatus]:
    """Status rows once every member (of ``ids``, when given) answers (and, with
    ``need_leader``, one leads), polled under the ``wait`` deadline; ``started``: (member,
    process) pairs; one that exits ends the wait with its log's tail, a member refusing
    this client (its certificate revoked, say) with why."""
    target = record_target(rec)
    deadline = time.monotonic() + wait
    while True:
        dead = [n for n, proc in started if proc.poll() is not None]
        if dead:
            n = dead[0]
            raise StartFailed(f"node {n['id']} exited at start: {launcher.exit_reason(n) or 'see ' + n['log']}")
        rows = status(target)
        refused = [r for r in rows if r.state == "refused"]
        if refused:  # (waiting will not change it)
            named = [r.id for r in refused if r.error == refused[0].error]
            raise StartFailed(f"{', '.join(named)} {'refuses' if len(named) == 1 else 'refuse'} this command's "
                              f"certificate or mode: {refused[0].error}")
        if all(r.state == "up" for r in rows if ids is None or r.id in ids) and \
                (not need_leader or any(r.role == "leader" for r in rows)):
            return rows
        if time.monotonic() >= deadline:
            return rows
        time.sleep(0.1)


def up(base_dir: str, nodes: int, port_base: int, group: str, flush: str, extra: list[str], *, tls: bool,
       metrics_port_base: int | None, keep_truncated: str | None, wait: float,
       given: dict[str, str] | None = None, say: Callable[[str], None] | None = None) -> UpResult:
    """Start a group of ``nodes`` in ``base_dir`` and wait until one leads. On a base directory
    whose cluster is recorded, start exactly its members that are down, with their recorded
    settings: ``given`` (parameter -> its option name, for the options a caller set) must then
    match them (OpsError, usage, naming the first that differ). ``say`` gets a note before a
    fresh start whose members' stores hold logs already (old_logs). A fresh start that fails
    (Ctrl-C included) stops what it started and removes what it made."""
    rec = launcher.read_record(base_dir)
    tls_dir = os.path.join(base_dir, "tls") if tls else None
    made: list[str] = []  # what a fresh start made, removed again if it fails
    started: list = []
    try:
        if rec is None:
            members = [f"n{i}" for i in range(nodes)]
            made = launcher.new_paths(base_dir, members)
            note = old_logs_note(base_dir, nodes)
            if say is not None and note is not None:
                say(note)
            if tls_dir is not None:
                make_certs(tls_dir, group, members, ["admin"], ["app"])
            rec, procs = launcher.up(base_dir, nodes, port_base, group, flush, extra, tls_dir=tls_dir,
                                     metrics_port_base=metrics_port_base, keep_truncated=keep_truncated)
            started, actions = list(zip(rec["nodes"], procs)), {n["id"]: "started" for n in rec["nodes"]}
        else:
            if given:
                want = launcher.planned_settings(base_dir, nodes, port_base, group, flush, extra, tls_dir=tls_dir,
                                                 metrics_port_base=metrics_port_base, keep_truncated=keep_truncated)
                differ = differences([launcher.settings_of(n) for n in rec["nodes"]], want, given)
                if differ is not None:
                    raise OpsError(f"the cluster recorded in {base_dir} was started with other settings: {differ}; "
                                   "'cluster up' there only starts its members that are down (run 'cluster down' "
                                   "first to start another)", usage=True)
            done, started = launcher.start(base_dir, None)
            rec = launcher.read_record(base_dir)  # with the new pids
            actions = {r["id"]: r["result"] for r in done}
        rows = wait_until_serving(rec, started, wait, need_leader=True)
        result = UpResult(rec, rows, actions)
        if not (any(r.role == "leader" for r in rows) and all(r.state == "up" for r in rows)):
            odd = [f"{r.id}: {r.error}" for r in rows if r.state != "up" and r.error]
            raise NoLeader(f"no leader elected within {wait:g} s" + (f" ({'; '.join(odd)})" if odd else "") +
                           ("" if made else f"; logs are in {os.path.join(base_dir, 'logs')}"),
                           None if made else result)
    except (LauncherError, OSError, StartFailed, KeyboardInterrupt):
        if made:  # a fresh start: leave nothing of it behind (Ctrl-C while it waits too)
            end([proc for _n, proc in started])
            launcher.discard(made)
        raise
    return result


class Started(msgspec.Struct):
    """``rows``: per member asked for, what the launcher did (its row) with its state, role
    and term once it answered (state None when it did not within the wait)."""

    rows: list[dict]
    late: list[str]


def start(base_dir: str, ids: list[str], wait: float, say: Callable[[str], None] | None = None) -> Started:
    """Start recorded members again, each with its recorded command line and store, and wait
    until they answer; members running already are left alone. Without a record (after
    'cluster down'), the members are read from their config files (``say`` gets a note)."""
    if launcher.ensure_record(base_dir) and say is not None:
        say(f"Note: no cluster record in {base_dir} ('cluster down' removes it): the members are read from their "
            f"config files in {os.path.join(base_dir, 'config')}")
    rows, started = launcher.start(base_dir, ids)
    rec = launcher.read_record(base_dir)
    served = wait_until_serving(rec, started, wait, need_leader=False, ids=[r["id"] for r in rows])
    answered = {r.id: r for r in served}
    for r in rows:
        st = answered.get(r["id"])
        r.update(state=st and st.state, role=st and st.role, term=st and st.term)
    return Started(rows, [r["id"] for r in rows if r["state"] != "up"])


class NoLeader(StartFailed):
    """No leader in time; ``result``: how the members stood then (None after a fresh start,
    which was undone)."""

    def __init__(self, message: str, result: UpResult | None) -> None:
        super().__init__(message)
        self.result = result


def old_logs(base_dir: str, nodes: int) -> list[str]:
    """The members of a fresh ``nodes``-member group in ``base_dir`` whose stores hold a log
    already (a group stopped with 'cluster down'): started together, whichever wins first
    cuts the others to its log."""
    return [f"n{i}" for i in range(nodes) if _has_data(os.path.join(base_dir, f"dledger-n{i}", "data"))]


def old_logs_note(base_dir: str, nodes: int) -> str | None:
    """What to say before a fresh start whose members' stores hold logs (old_logs), if more
    than one does."""
    logs = old_logs(base_dir, nodes)
    if len(logs) < 2:
        return None
    at = "" if base_dir == launcher.DEFAULT_BASE_DIR else f" --base-dir {base_dir}"
    return (f"Note: {', '.join(logs)} hold logs from before; started together, the first elected cuts the others "
            f"back to its own: 'dledgerctl store elect {base_dir}' names who must lead, and 'dledgerctl cluster "
            f"start{at} ID ...' starts members one by one after 'cluster down' (docs/operations.md)")


def _has_data(path: str) -> bool:
    try:
        return any(True for _ in os.scandir(path))
    except OSError:
        return False


def end(procs: list, timeout: float = 5.0) -> None:
    """Stop processes (SIGTERM, SIGKILL after ``timeout``) and reap them."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def differences(have: list[dict], want: list[dict], given: dict[str, str]) -> str | None:
    """The ``given`` options (parameter -> option name) whose settings differ from the recorded
    ones (``have``, one dict per member; ``want``: what they would be): ``--heartbeat-interval
    (recorded 500, given 300)``; None when every given option matches the record."""
    if len(have) != len(want) and "nodes" in given:
        return f"--nodes (recorded {len(have)}, given {len(want)})"
    out: dict[str, str] = {}
    for h, w in zip(have, want):
        for key in sorted(set(h) | set(w)):
            param = KEY_PARAMS.get(key, key.replace("-", "_"))
            if h.get(key) != w.get(key) and param in given:
                was, now = (h.get(key, "default"), w.get(key, "default")) if param != "tls" else (
                    "on" if h.get(key) else "off", "on" if w.get(key) else "off")
                out.setdefault(param, f"{given[param]} (recorded {was}, given {now})")
    return ", ".join(out.values()) or None


def make_certs(directory: str, group: str, members: list[str], operators: list[str], clients: list[str],
               any_group: bool = False) -> list[dict]:
    """Certificates (cluster/node/pki.py) for these identities in ``directory``: one row each
    (and pki's empty crl.pem beside the CA)."""
    rows = []
    for role, names in (("member", members), ("operator", operators), ("client", clients)):
        for name in names:
            ident = Identity(ANY_GROUP if any_group and role != "member" else group, role, name)
            cert, key = pki.issue(directory, ident)
            rows.append({"identity": ident.uri, "role": role, "name": name, "cert": cert, "key": key})
    return rows
