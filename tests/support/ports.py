"""Ports for test nodes, chosen below the kernel's ephemeral range.

A port taken from the ephemeral range (what binding port 0 hands out) can be taken again, while
its node is stopped, as the source port of some other connection — a peer's reconnect attempts
included — and the node's restart then fails with "address already in use". Ports below the
range are never handed out that way, so a stopped node gets its port back.
"""
from __future__ import annotations

import os
import random
import socket

HOST = "127.0.0.1"
_LOWEST = 10000
_handed: set[int] = set()  # never the same port twice in one test run
_rng = random.Random()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _all_free(base: int, n: int) -> bool:
    socks = []
    try:
        for k in range(n):
            s = socket.socket()
            socks.append(s)
            s.bind((HOST, base + k))
        return True
    except OSError:
        return False
    finally:
        for s in socks:
            s.close()


def _share(low: int, high: int) -> tuple[int, int]:
    """This test process's part of ``low..high``: all of it, or, in a parallel run (pytest-xdist
    worker ``gwK`` of N), the K-th of N equal parts, so that two workers never hand out the same
    port (a port is free from when it is handed out until its node binds it)."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit()):
        return low, high
    k, n = int(worker[2:]), int(count)
    if not 0 <= k < n:
        return low, high
    part = (high - low) // n
    return low + k * part, low + (k + 1) * part


def free_port_base(n: int) -> int:
    """A base port with ``n`` consecutive ports free now, outside the ephemeral range."""
    low, top = _share(_LOWEST, _ephemeral_low())
    top -= n
    if top <= low:
        raise RuntimeError(f"no room for {n} ports below the ephemeral range")
    for _ in range(5000):
        base = _rng.randrange(low, top)
        span = set(range(base, base + n))
        if span & _handed or not _all_free(base, n):
            continue
        _handed.update(span)
        return base
    raise RuntimeError(f"no {n} consecutive free ports found below {top + n}")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free now, outside the ephemeral range."""
    base = free_port_base(n)
    return list(range(base, base + n))
