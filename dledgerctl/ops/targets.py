"""Where a request goes: a group's members and name, the TLS its clients present, how long a
request may take; and running work with a client that is closed after it.

A target is found from a peers string (``n0-127.0.0.1:20911;n1-...``) or, without one, from
the record ``cluster up`` keeps in its base directory (its peers, its group and, for a
``--tls`` cluster, the operator certificate it made)."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, TypeVar

import msgspec

from cluster.net.client import Client
from cluster.net.tls import Tls, TlsFiles
from cluster.node.launcher import DEFAULT_BASE_DIR, LauncherError, read_record
from cluster.raft.config import DEFAULT_GROUP, ConfigError, Peer, parse_peers

T = TypeVar("T")


class OpsError(Exception):
    """What was asked cannot be done; the message says why in one line. ``usage``: the request
    itself is wrong (a malformed peers string, say), not the state found."""

    def __init__(self, message: str, usage: bool = False) -> None:
        super().__init__(message)
        self.usage = usage


class Target(msgspec.Struct, frozen=True):
    """A group to send requests to. ``record``: the local cluster record it was found through
    (``cluster up``'s), or None for peers given."""

    peers: dict[str, Peer]
    group: str = DEFAULT_GROUP
    timeout: float = 3.0
    tls: Tls | None = None
    record: dict | None = None

    def client(self) -> Client:
        """A client of this target (close it with ``await client.close()``)."""
        return Client(self.peers, self.group, timeout=self.timeout, tls=self.tls)


def find_target(peers: str | None = None, *, base_dir: str = DEFAULT_BASE_DIR, group: str | None = None,
                timeout: float = 3.0, tls: Tls | None = None) -> Target:
    """The target named by ``peers``, else by the cluster record in ``base_dir``. ``group``
    wins over the record's, which wins over the default; a ``--tls`` cluster's record gives
    its operator certificate when ``tls`` is None."""
    try:
        if peers:
            return Target(parse_peers(peers), group or DEFAULT_GROUP, timeout, tls)
        rec = read_record(base_dir)
    except ConfigError as exc:
        raise OpsError(str(exc), usage=True) from None
    except LauncherError as exc:
        raise OpsError(str(exc)) from None
    if rec is None:
        raise OpsError(f"no --peers given and no cluster recorded in {base_dir} (start one with 'dledgerctl cluster "
                       "up')", usage=True)
    try:
        parsed = parse_peers(rec["peers"])
    except ConfigError as exc:
        raise OpsError(f"the cluster record in {base_dir}: {exc}") from None
    return Target(parsed, group or rec.get("group") or DEFAULT_GROUP, timeout, tls or record_tls(rec), rec)


def record_files(rec: dict | None) -> TlsFiles | None:
    """The operator certificate a ``cluster up --tls`` record names, or None."""
    if not rec or not rec.get("tls"):
        return None
    op = rec["tls"]["operator"]
    return TlsFiles(op["cert"], op["key"], rec["tls"]["ca"])


def record_tls(rec: dict | None) -> Tls | None:
    files = record_files(rec)
    return None if files is None else Tls(files)


def run(target: Target, work: Callable[[Client], Awaitable[T]]) -> T:
    """``await work(client)`` with a client of ``target``, closed afterwards (in a new event
    loop: for callers that have none; inside one, use :meth:`Target.client`)."""

    async def go() -> T:
        c = target.client()
        try:
            return await work(c)
        finally:
            await c.close()

    return asyncio.run(go())


def row(result: Any) -> Any:
    """A result as the plain data ``--format json`` shows: fields left unset are left out."""
    return msgspec.to_builtins(result)
