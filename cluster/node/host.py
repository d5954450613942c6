"""What a node reads of the machine it runs on: its own version, the open-files limit it
raises for its connections, and its store's disk usage. Functions of the host only; the
node (process.py) calls them."""

from __future__ import annotations

import functools
import logging
import os

log = logging.getLogger("dledgerctl.node")


@functools.cache
def version() -> str:
    try:
        from importlib.metadata import version as installed
        return installed("dledgerctl")
    except Exception:  # noqa: BLE001 - run from a checkout that was never installed
        return "unknown"


def allow_descriptors(want: int) -> None:
    """Raise the soft limit on open files towards ``want`` (within the hard limit): with the
    common soft limit of 1024, accepting connections would fail before --max-connections."""
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and soft < want:
            new = want if hard == resource.RLIM_INFINITY else min(want, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
            if new < want:
                log.warning("open files limited to %d (hard limit): --max-connections may not be reached", new)
    except (ImportError, ValueError, OSError) as exc:
        log.warning("cannot raise the open files limit: %s", exc)


def disk_usage(path: str) -> float | None:
    """The usage of the file system holding ``path`` as a ratio, as ``df`` shows it: used /
    (used + available to us). DLedger (DLedgerUtils.getDiskPartitionSpaceUsedPercent) divides
    by the whole size, which on a file system with reserved or quota'd space says there is
    room where writes already fail. None when it cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    room = used + st.f_bavail * st.f_frsize
    return None if room <= 0 else used / room
