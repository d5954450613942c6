"""The client commands' side of ops/targets.py: the target their options name (with the TLS
``tls_options`` took, or the cluster record's), and running work on it, each failure as the
one ``Error:`` line (exit 2 for a usage error)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Awaitable, Callable, Iterator, TypeVar

from cluster.net.client import Client, ClientError
from cluster.net.tls import TlsError
from cluster.node.launcher import DEFAULT_BASE_DIR, LauncherError

from .common import client_tls, fail
from .ops import targets
from .ops.targets import OpsError, Target

T = TypeVar("T")


def target(peers: str | None, base_dir: str = DEFAULT_BASE_DIR, group: str | None = None,
           timeout: float = 3.0) -> Target:
    """The group ``--peers`` names, else the one recorded in ``--base-dir``; its clients use
    the command's TLS, else (a ``--tls`` cluster found through its record) the record's."""
    try:
        found = targets.find_target(peers, base_dir=base_dir, group=group, timeout=timeout, tls=client_tls())
    except OpsError as exc:
        raise ops_error(exc) from None
    except TlsError as exc:  # (the record's certificate files)
        raise fail(str(exc)) from None
    return found


def run(target: Target, work: Callable[[Client], Awaitable[T]]) -> T:
    """``await work(client)`` on ``target``; a ClientError is the one-line error, exit 1."""
    try:
        return targets.run(target, work)
    except ClientError as exc:
        raise fail(str(exc)) from None


def ops_error(exc: OpsError):
    """The exit of an OpsError: its line, exit 2 when the request was wrong."""
    return fail(str(exc), 2 if exc.usage else 1)


@contextmanager
def failures() -> Iterator[None]:
    """The library's errors as the one ``Error:`` line: an OpsError (exit 2 when the request was
    wrong), a client's, a launcher's or a certificate's (exit 1)."""
    try:
        yield
    except OpsError as exc:
        raise ops_error(exc) from None
    except (ClientError, LauncherError, TlsError) as exc:
        raise fail(str(exc)) from None
