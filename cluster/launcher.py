"""Local clusters for trying things out: start N node processes, record them, stop exactly those.

The record is ``<base-dir>/cluster.json``: group, peers and, per node, its pid, address, log
file and command line. ``down`` signals only processes that are still alive *and* whose
command line is the one recorded, so a reused pid is never killed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from .config import format_peers, parse_peers

RECORD = "cluster.json"
DEFAULT_BASE_DIR = "/tmp/dledgerstore"  # DLedgerConfig.storeBaseDir
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
            return [p.decode(errors="replace") for p in fh.read().split(b"\0") if p]
    except OSError:
        return None


def alive(node: dict) -> bool:
    """Is the recorded process still running, with the recorded command line?"""
    pid = node.get("pid")
    return isinstance(pid, int) and _cmdline(pid) == node.get("cmd")


def node_command(group: str, node_id: str, peers: str, base_dir: str, flush: str, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "dledgerctl", "-v", "node", "start", "--group", group, "--id", node_id,
            "--peers", peers, "--store-base-dir", base_dir, "--flush", flush, *extra]


def up(base_dir: str, nodes: int, port_base: int, group: str, flush: str, extra: list[str] | None = None,
       host: str = "127.0.0.1") -> tuple[dict, list[subprocess.Popen]]:
    """Start the processes and write the record; returns it and the processes (poll them
    to see one exit: right after the fork the /proc check of :func:`alive` still sees the
    parent's command line). Does not wait for a leader."""
    if not 1 <= nodes <= 9:
        raise LauncherError("--nodes must be between 1 and 9")
    if not 1024 <= port_base <= 65535 - nodes:
        raise LauncherError(f"--port-base {port_base} leaves no room for {nodes} ports")
    old = read_record(base_dir)
    if old is not None and any(alive(n) for n in old["nodes"]):
        running = ", ".join(f"{n['id']} (pid {n['pid']})" for n in old["nodes"] if alive(n))
        raise LauncherError(f"a cluster started from {base_dir} is still running: {running}; run 'cluster down' first")
    peers = format_peers(parse_peers(";".join(f"n{i}-{host}:{port_base + i}" for i in range(nodes))))
    logs = os.path.join(base_dir, "logs")
    os.makedirs(logs, exist_ok=True)
    rec = {"group": group, "peers": peers, "base_dir": os.path.abspath(base_dir), "started": time.time(), "nodes": []}
    procs = []
    for i in range(nodes):
        nid = f"n{i}"
        cmd = node_command(group, nid, peers, os.path.abspath(base_dir), flush, extra or [])
        log_path = os.path.join(logs, f"{nid}.log")
        with open(log_path, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=base_dir)
        procs.append(proc)
        rec["nodes"].append({"id": nid, "pid": proc.pid, "address": f"{host}:{port_base + i}", "log": log_path,
                             "cmd": cmd})
    tmp = record_path(base_dir) + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(rec, fh, indent=2)
    os.replace(tmp, record_path(base_dir))
    return rec, procs


def log_tail(node: dict, lines: int = 5) -> str:
    try:
        with open(node["log"], "rb") as fh:
            fh.seek(0, 2)
            fh.seek(max(0, fh.tell() - 4096))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return " | ".join(text.strip().splitlines()[-lines:])


def down(base_dir: str, timeout: float = 10.0) -> list[dict]:
    """SIGTERM every recorded live node, SIGKILL what is left after ``timeout``; one row each."""
    rec = read_record(base_dir)
    if rec is None:
        raise LauncherError(f"no cluster record in {base_dir} (nothing was started there by 'cluster up')")
    rows = []
    for n in rec["nodes"]:
        if alive(n):
            try:
                os.kill(n["pid"], signal.SIGTERM)
                rows.append({"id": n["id"], "pid": n["pid"], "result": "stopping"})
            except ProcessLookupError:
                rows.append({"id": n["id"], "pid": n["pid"], "result": "not running"})
        else:
            rows.append({"id": n["id"], "pid": n["pid"], "result": "not running"})
    deadline = time.monotonic() + timeout
    for row, n in zip(rows, rec["nodes"]):
        if row["result"] != "stopping":
            continue
        while alive(n) and time.monotonic() < deadline:
            time.sleep(0.05)
        if alive(n):
            os.kill(n["pid"], signal.SIGKILL)
            row["result"] = "killed"
        else:
            row["result"] = "stopped"
    os.unlink(record_path(base_dir))
    return rows
