"""Local clusters for trying things out: start N node processes, record them, stop exactly those.

The record is ``<base-dir>/cluster.json``: group, peers and, per node, its pid, start time,
address, log file, config file and command line. Each member runs from its own config file,
``<base-dir>/config/<id>.toml`` (memberconf.py: ``node start --config FILE``, as on a
server). Members are stopped and started one by one
(:func:`stop`, :func:`start`) with their recorded command lines, so a restarted member is
the same member on the same store; :func:`up` on a record with members down starts exactly
those. Nothing is ever signalled unless it is alive *and* has the recorded command line,
so a reused pid is never killed. ``down`` stops them all and removes the record.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import tomllib

from ..net.tls import Identity
from ..raft.config import DEFAULT_GROUP, DEFAULT_STORE_BASE_DIR, ConfigError, flag, format_peers, parse_peers
from . import memberconf, pki

RECORD = "cluster.json"
DEFAULT_BASE_DIR = DEFAULT_STORE_BASE_DIR
DEFAULT_PORT_BASE = 20911


class LauncherError(Exception):
    pass


def record_path(base_dir: str) -> str:
    return os.path.join(base_dir, RECORD)


def read_record(base_dir: str) -> dict | None:
    try:
        with open(record_path(base_dir)) as fh:
            rec = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LauncherError(f"{record_path(base_dir)} is unreadable: {exc}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("nodes"), list) or "peers" not in rec:
        raise LauncherError(f"{record_path(base_dir)} is not a cluster record")
    return rec


def _cmdline(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            args = fh.read().split(b"\0")
    except OSError:
        return None
    return [p.decode(errors="replace") for p in (args[:-1] if args and args[-1] == b"" else args)]


def alive(node: dict) -> bool:
    """Is the recorded process still running, with the recorded command line?"""
    pid = node.get("pid")
    return isinstance(pid, int) and _cmdline(pid) == node.get("cmd")


def node_command(group: str, node_id: str, peers: str, base_dir: str, flush: str, extra: list[str],
                 tls_dir: str | None = None, metrics: str | None = None,
                 metrics_tls: bool | None = None, keep_truncated: str | None = None) -> list[str]:
    """The command line of a member; ``metrics``: HOST:PORT of its Prometheus endpoint, over
    HTTPS with its certificate when the group speaks TLS (unless ``metrics_tls`` is False);
    ``keep_truncated``: a directory in which the member keeps what it cuts in ``<id>/`` of
    its own (each member's files and bound apart: one's bound never drops another's file)."""
    if keep_truncated is not None:
        extra = [*extra, flag("keep_truncated"), os.path.join(os.path.abspath(keep_truncated), node_id)]
    if metrics is not None:
        https = tls_dir is not None if metrics_tls is None else metrics_tls
        extra = [*extra, flag("metrics_address"), metrics, *([flag("metrics_tls")] if https else [])]
    tls = [] if tls_dir is None else ["--tls-cert", os.path.join(tls_dir, f"member-{node_id}.pem"),
                                      "--tls-key", os.path.join(tls_dir, f"member-{node_id}.key"),
                                      "--tls-ca", os.path.join(tls_dir, "ca.pem"),
                                      "--tls-crl", os.path.join(tls_dir, "crl.pem")]
    return [sys.executable, "-m", "dledgerctl", "-v", "node", "start", flag("group"), group, flag("self_id"), node_id,
            flag("peers"), peers, flag("store_base_dir"), base_dir, flag("flush"), flush, *extra, *tls]


def tls_record(tls_dir: str) -> dict:
    """The record's TLS part for certificates made by cluster/node/pki.py in ``tls_dir``."""
    pair = lambda stem: {"cert": os.path.join(tls_dir, f"{stem}.pem"), "key": os.path.join(tls_dir, f"{stem}.key")}
    return {"dir": tls_dir, "ca": os.path.join(tls_dir, "ca.pem"), "crl": os.path.join(tls_dir, "crl.pem"),
            "operator": pair("operator-admin"),
            "client": pair("client-app")}


def up(base_dir: str, nodes: int, port_base: int, group: str, flush: str, extra: list[str] | None = None,
       host: str = "127.0.0.1", tls_dir: str | None = None, metrics_port_base: int | None = None,
       keep_truncated: str | None = None) -> tuple[dict, list[subprocess.Popen]]:
    """Start the processes and write the record; returns it and the processes (poll them
    to see one exit: right after the fork the /proc check of :func:`alive` still sees the
    parent's command line). Does not wait for a leader. Refused when a record is there:
    :func:`restart_down` is for that."""
    if not 1 <= nodes <= 9:
        raise LauncherError("--nodes must be between 1 and 9")
    if not 1024 <= port_base <= 65535 - nodes:
        raise LauncherError(f"--port-base {port_base} leaves no room for {nodes} ports")
    if metrics_port_base is not None and not 1024 <= metrics_port_base <= 65535 - nodes:
        raise LauncherError(f"--metrics-port-base {metrics_port_base} leaves no room for {nodes} ports")
    old = read_record(base_dir)
    if old is not None and any(alive(n) for n in old["nodes"]):
        running = ", ".join(f"{n['id']} (pid {n['pid']})" for n in old["nodes"] if alive(n))
        raise LauncherError(f"a cluster started from {base_dir} is still running: {running}; run 'cluster down' first")
    peers = _peers(nodes, port_base, host)
    ports = {port_base + i: f"n{i}" for i in range(nodes)}
    if metrics_port_base is not None:
        ports.update({metrics_port_base + i: f"n{i}'s metrics" for i in range(nodes)})
        if len(ports) < 2 * nodes:
            raise LauncherError("--metrics-port-base overlaps the members' ports (--port-base)")
    check_ports(host, ports)
    os.makedirs(os.path.join(base_dir, "logs"), exist_ok=True)
    rec = {"group": group, "peers": peers, "base_dir": os.path.abspath(base_dir), "started": time.time(), "nodes": []}
    if tls_dir is not None:
        rec["tls"] = tls_record(os.path.abspath(tls_dir))
    commands = planned_commands(base_dir, nodes, port_base, group, flush, extra, host, tls_dir, metrics_port_base,
                                keep_truncated)
    for i in range(nodes):
        nid = f"n{i}"
        settings = memberconf.settings_from_args(commands[i][6:])
        path = memberconf.write(base_dir, nid, settings)
        rec["nodes"].append({"id": nid, "pid": None, "address": f"{host}:{port_base + i}",
                             "log": os.path.join(base_dir, "logs", f"{nid}.log"), "config": path,
                             "settings": settings, "cmd": memberconf.command(path)})
        if metrics_port_base is not None:
            scheme = "http" if tls_dir is None else "https"
            rec["nodes"][-1]["metrics"] = f"{scheme}://{host}:{metrics_port_base + i}/metrics"
    procs = [_spawn(base_dir, n) for n in rec["nodes"]]
    write_record(base_dir, rec)
    return rec, procs


def _peers(nodes: int, port_base: int, host: str) -> str:
    return format_peers(parse_peers(";".join(f"n{i}-{host}:{port_base + i}" for i in range(nodes))))


def planned_commands(base_dir: str, nodes: int, port_base: int, group: str, flush: str, extra: list[str] | None = None,
                     host: str = "127.0.0.1", tls_dir: str | None = None,
                     metrics_port_base: int | None = None, keep_truncated: str | None = None) -> list[list[str]]:
    """The command lines :func:`up` would record for these settings (to compare with a record)."""
    peers = _peers(nodes, port_base, host)
    return [node_command(group, f"n{i}", peers, os.path.abspath(base_dir), flush, extra or [],
                         tls_dir and os.path.abspath(tls_dir),
                         None if metrics_port_base is None else f"{host}:{metrics_port_base + i}",
                         keep_truncated=keep_truncated)
            for i in range(nodes)]


def planned_settings(*args, **kwargs) -> list[dict]:
    """The members' config-file settings :func:`up` would write (the arguments of
    :func:`planned_commands`)."""
    return [memberconf.settings_from_args(c[6:]) for c in planned_commands(*args, **kwargs)]


def settings_of(node: dict) -> dict:
    """A recorded member's settings (a record written before config files: from its command line)."""
    return node.get("settings") or memberconf.settings_from_args(node["cmd"][6:])


def _spawn(base_dir: str, node: dict) -> subprocess.Popen:
    """Start a recorded member with its recorded command line; sets its pid and start time."""
    with open(node["log"], "ab") as out:
        proc = subprocess.Popen(node["cmd"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=base_dir)
    node["pid"], node["started"] = proc.pid, time.time()
    return proc


def write_record(base_dir: str, rec: dict) -> None:
    tmp = record_path(base_dir) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(rec, fh, indent=2)
    os.replace(tmp, record_path(base_dir))


def record_from_configs(base_dir: str) -> dict | None:
    """The record of the members whose config files ``cluster up`` (and ``peer add``) wrote
    in ``<base-dir>/config/``, every one stopped: what ``cluster down`` removed, rebuilt so
    that members can be started one by one again (``cluster start``). None when there is no
    such file. LauncherError when a file is unreadable or names another base directory."""
    directory = os.path.join(os.path.abspath(base_dir), "config")
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(".toml"))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise LauncherError(f"{directory}: {exc.strerror or exc}") from None
    nodes, peers, group, tls_ca = [], {}, None, None
    for name in names:
        path = os.path.join(directory, name)
        try:
            with open(path, "rb") as fh:
                settings = tomllib.load(fh)
            nid, their_peers = settings["id"], parse_peers(settings["peers"])
        except (OSError, ValueError, KeyError, TypeError, ConfigError) as exc:
            raise LauncherError(f"{path}: not a member's config file as 'cluster up' writes them ({exc})") from None
        if os.path.abspath(str(settings.get("store-base-dir", ""))) != os.path.abspath(base_dir):
            raise LauncherError(f"{path}: member {nid} keeps its store in {settings.get('store-base-dir')}, not "
                                f"{base_dir}")
        if nid not in their_peers or name != f"{nid}.toml":
            raise LauncherError(f"{path}: names member {nid}, which is not among its own peers or the file's name")
        peers.update(their_peers)
        group = group or settings.get("group")
        tls_ca = tls_ca or settings.get("tls-ca")
        node = {"id": nid, "pid": None, "address": their_peers[nid].address,
                "log": os.path.join(os.path.abspath(base_dir), "logs", f"{nid}.log"), "config": path,
                "settings": settings, "cmd": memberconf.command(path)}
        if settings.get("metrics-address"):
            scheme = "https" if settings.get("metrics-tls") else "http"
            node["metrics"] = f"{scheme}://{settings['metrics-address']}/metrics"
        nodes.append(node)
    if not nodes:
        return None
    known = {n["id"] for n in nodes}
    rec = {"group": group or DEFAULT_GROUP, "peers": format_peers({k: p for k, p in peers.items() if k in known}),
           "base_dir": os.path.abspath(base_dir), "started": time.time(), "nodes": nodes, "rebuilt": True}
    if tls_ca:
        rec["tls"] = tls_record(os.path.dirname(str(tls_ca)))
    return rec


def ensure_record(base_dir: str) -> bool:
    """Write the record :func:`record_from_configs` rebuilds when ``base_dir`` has none (after
    ``cluster down``); True when it did. LauncherError when there is neither."""
    if read_record(base_dir) is not None:
        return False
    rec = record_from_configs(base_dir)
    if rec is None:
        raise LauncherError(f"no cluster record in {base_dir} and no member's config file in "
                            f"{os.path.join(base_dir, 'config')} (nothing was started there by 'cluster up')")
    os.makedirs(os.path.join(base_dir, "logs"), exist_ok=True)
    write_record(base_dir, rec)
    return True


def _recorded(base_dir: str) -> dict:
    rec = read_record(base_dir)
    if rec is None:
        raise LauncherError(f"no cluster record in {base_dir} (nothing was started there by 'cluster up')")
    return rec


def _members(rec: dict, ids: list[str] | None) -> list[dict]:
    """The recorded members named by ``ids`` (all when None), in the order asked."""
    by_id = {n["id"]: n for n in rec["nodes"]}
    if ids is None:
        return list(rec["nodes"])
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise LauncherError(f"no member {', '.join(unknown)} in the cluster recorded in {rec.get('base_dir')} "
                            f"(members: {', '.join(by_id)})")
    return [by_id[i] for i in dict.fromkeys(ids)]


def start(base_dir: str, ids: list[str] | None = None) -> tuple[list[dict], list[tuple[dict, subprocess.Popen]]]:
    """Start the named recorded members (all when None) that are not running, each with its
    recorded command line; one row per member named ("started" with the new pid, or
    "already running"), and (member, process) for each started one. Does not wait."""
    rec = _recorded(base_dir)
    rows, started = [], []
    for n in _members(rec, ids):
        if alive(n):
            rows.append({"id": n["id"], "pid": n["pid"], "result": "already running"})
            continue
        proc = _spawn(base_dir, n)
        started.append((n, proc))
        rows.append({"id": n["id"], "pid": proc.pid, "result": "started"})
    if started:
        write_record(base_dir, rec)
    return rows, started


def stop(base_dir: str, ids: list[str] | None = None, *, kill: bool = False, timeout: float = 10.0) -> list[dict]:
    """Stop the named recorded members (all when None): SIGTERM and wait up to ``timeout``
    for each to exit, then SIGKILL; SIGKILL at once with ``kill``. The record stays, so
    :func:`start` can start them again. One row per member: stopped, killed or not running."""
    rec = _recorded(base_dir)
    members = _members(rec, ids)
    rows = []
    for n in members:
        row = {"id": n["id"], "pid": n.get("pid"), "result": "not running"}
        if alive(n):
            try:
                os.kill(n["pid"], signal.SIGKILL if kill else signal.SIGTERM)
                row["result"] = "killed" if kill else "stopping"
            except ProcessLookupError:
                pass
        rows.append(row)
    deadline = time.monotonic() + timeout
    for row, n in zip(rows, members):
        if row["result"] not in ("stopping", "killed"):
            continue
        while alive(n) and time.monotonic() < deadline:
            time.sleep(0.02)
        if alive(n):
            os.kill(n["pid"], signal.SIGKILL)
            row["result"] = "killed"
        elif row["result"] == "stopping":
            row["result"] = "stopped"
    return rows


def add_member(base_dir: str, node_id: str, address: str, members: dict[str, str]) -> tuple[dict, subprocess.Popen]:
    """Start a new member of the recorded cluster as a learner (``node start --learner``),
    with the recorded members' settings, ``--peers`` the group's ``members`` (id -> address)
    and itself; record it. Under TLS it gets a member certificate from the record's CA."""
    rec = _recorded(base_dir)
    if any(n["id"] == node_id for n in rec["nodes"]):
        raise LauncherError(f"{node_id} is recorded in {base_dir} already")
    try:
        peers = format_peers(parse_peers(";".join(f"{k}-{v}" for k, v in {**members, node_id: address}.items())))
    except ConfigError as exc:
        raise LauncherError(str(exc)) from None
    template = rec["nodes"][0]
    settings = {**settings_of(template), "id": node_id, "peers": peers, "learner": True}
    settings.pop("metrics-address", None)  # (the template's port is taken)
    settings.pop("metrics-tls", None)
    if isinstance(settings.get("keep-truncated"), str):  # (cluster up --keep-truncated: DIR/<id>, a member's own)
        settings["keep-truncated"] = os.path.join(os.path.dirname(settings["keep-truncated"]), node_id)
    tls = rec.get("tls")
    if tls is not None:
        settings["tls-cert"], settings["tls-key"] = pki.issue(tls["dir"], Identity(rec["group"], "member", node_id))
    path = memberconf.write(base_dir, node_id, settings)
    node = {"id": node_id, "pid": None, "address": address,
            "log": os.path.join(os.path.dirname(template["log"]), f"{node_id}.log"), "config": path,
            "settings": settings, "cmd": memberconf.command(path)}
    proc = _spawn(base_dir, node)
    rec["nodes"].append(node)
    rec["peers"] = peers
    write_record(base_dir, rec)
    return node, proc


def forget_member(base_dir: str, node_id: str) -> list[dict]:
    """Stop a member removed from the group (if recorded and running) and drop it from the
    record; the rows of :func:`stop`."""
    rec = _recorded(base_dir)
    if not any(n["id"] == node_id for n in rec["nodes"]):
        return []
    rows = stop(base_dir, [node_id])
    rec = _recorded(base_dir)
    rec["nodes"] = [n for n in rec["nodes"] if n["id"] != node_id]
    peers = {k: p for k, p in parse_peers(rec["peers"]).items() if k != node_id}
    rec["peers"] = format_peers(peers) if peers else ""
    write_record(base_dir, rec)
    return rows


def exit_reason(node: dict) -> str:
    """Why a member exited at start, from its log: its last ``Error:`` line (what ``node
    start`` says when it refuses to run), else the log's last line; '' without a log."""
    tail = _log_lines(node, 40)
    errors = [line for line in tail if line.startswith("Error: ")]
    if errors:
        return errors[-1][len("Error: "):]
    return tail[-1] if tail else ""


def check_ports(host: str, ports: dict[int, str]) -> None:
    """LauncherError naming the first of ``ports`` (port -> what it is for) that cannot be
    bound on ``host`` now (another process listens there, say): checked before anything
    is started or written, so a taken port leaves nothing behind."""
    import socket

    for port, what in ports.items():
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as the nodes bind)
            sock.bind((host, port))
        except socket.gaierror as exc:  # (its errno is getaddrinfo's, which os.strerror does not know)
            raise LauncherError(f"{host}:{port} ({what}) cannot be used: host {host!r} does not resolve "
                                f"({exc.strerror})") from None
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise LauncherError(f"{host}:{port} ({what}) cannot be used: {why}") from None
        finally:
            sock.close()


def new_paths(base_dir: str, ids: list[str]) -> list[str]:
    """What starting members ``ids`` from ``base_dir`` would create that is not there yet:
    the base directory itself when it is missing, else its parts (the record, the logs,
    config and tls directories or the members' files in them, the members' stores), so a
    start that fails half-way can remove exactly what it made (:func:`discard`)."""
    if not os.path.exists(base_dir):
        return [base_dir]
    parts = [record_path(base_dir), record_path(base_dir) + ".tmp", os.path.join(base_dir, "tls")]
    for sub, names in (("logs", [f"{i}.log" for i in ids]), ("config", [f"{i}.toml" for i in ids])):
        d = os.path.join(base_dir, sub)
        parts += [d] if not os.path.exists(d) else [os.path.join(d, n) for n in names]
    parts += [os.path.join(base_dir, f"dledger-{i}") for i in ids]
    return [p for p in parts if not os.path.lexists(p)]


def discard(paths: list[str]) -> None:
    """Remove what :func:`new_paths` listed (those of them that now exist)."""
    import shutil

    for p in paths:
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def _log_lines(node: dict, lines: int) -> list[str]:
    """The last ``lines`` lines of a member's log (of its last 4 KiB); none without a log."""
    try:
        with open(node["log"], "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode(errors="replace")
    except OSError:
        return []
    return text.strip().splitlines()[-lines:]


def down(base_dir: str, timeout: float = 10.0) -> list[dict]:
    """Stop every recorded member (SIGTERM, SIGKILL what is left after ``timeout``) and
    remove the record; one row each."""
    rows = stop(base_dir, None, timeout=timeout)
    os.unlink(record_path(base_dir))
    return rows


def uptime(node: dict, now: float | None = None) -> float | None:
    """Seconds since a running member was started, None when it is not running."""
    if not alive(node) or not isinstance(node.get("started"), (int, float)):
        return None
    return max(0.0, (now or time.time()) - node["started"])
