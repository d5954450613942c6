"""What a node process learns of the service manager that started it (systemd), before it
opens its store.

- Where the store goes by default: systemd gives a unit with ``StateDirectory=`` the
  directory it made in ``$STATE_DIRECTORY`` (the first, when there are several). The
  shipped unit (share/systemd/dledgerctl@.service) has ``StateDirectory=dledgerctl/%i``, so
  a member whose config file has no ``store-base-dir`` keeps its store in
  ``/var/lib/dledgerctl/<instance>``, not in DLedger's default ``/tmp/dledgerstore``.
- A store systemd would throw away (:func:`lost_store_problem`). Under ``PrivateTmp=``
  (which the shipped unit sets, as hardening guides advise) the service's ``/tmp`` and
  ``/var/tmp`` are directories of its own that systemd removes when the service stops; a
  member whose store sat there would come back with no log, no term and no vote: it could
  vote twice in a term and lose entries it acknowledged. A tmpfs ``/tmp`` is emptied when
  the machine restarts, with the same result. So a member started by systemd refuses a
  store there, saying why.

How "started by systemd" and "private" are told (systemd.exec(5)): systemd sets
``INVOCATION_ID`` for every process of a unit (since v232). ``PrivateTmp=yes`` bind-mounts
``/tmp/systemd-private-<boot>-<unit>-<random>/tmp`` on ``/tmp`` (and the same for
``/var/tmp``) in the service's own mount namespace, so ``/proc/self/mountinfo`` shows a
mount at ``/tmp`` whose root (the bound directory) names ``systemd-private-``; with
``PrivateTmp=disconnected`` (v256) it is a tmpfs. The initial mount namespace cannot be
compared with ours (``/proc/1/ns/mnt`` is unreadable without privileges), so the mount
table is what is read. Pure functions over (path, environment, mount table); the caller
passes the real ones.
"""

from __future__ import annotations

import os
import re

from ..raft.config import DEFAULT_STORE_BASE_DIR

TEMPORARY = ("/tmp", "/var/tmp")  # the directories PrivateTmp= replaces
_OCTAL = re.compile(r"\\([0-7]{3})")


def default_store_base_dir(environ=None) -> str:
    """``$STATE_DIRECTORY`` (its first directory) when systemd gave one, else DLedger's default."""
    environ = os.environ if environ is None else environ
    state = (environ.get("STATE_DIRECTORY") or "").split(":")[0]
    return state if os.path.isabs(state) else DEFAULT_STORE_BASE_DIR


def started_by_systemd(environ=None) -> bool:
    environ = os.environ if environ is None else environ
    return bool(environ.get("INVOCATION_ID"))


def the_units_own_process(environ=None, pid: int | None = None) -> bool:
    """Whether this process is the one systemd started for its unit, not a process that
    inherited the unit's environment (a job of a CI runner installed as a service, a shell in
    a terminal multiplexer run as a user service). systemd 248 and later set
    ``SYSTEMD_EXEC_PID`` to the pid it started; without it (older systemd) every process
    with ``INVOCATION_ID`` counts."""
    environ = os.environ if environ is None else environ
    if not started_by_systemd(environ):
        return False
    started = environ.get("SYSTEMD_EXEC_PID")
    return not started or started == str(os.getpid() if pid is None else pid)


def read_mountinfo() -> str:
    """This process's mount table, '' where there is none (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read()
    except OSError:
        return ""


def parse_mountinfo(text: str) -> list[tuple[str, str, str]]:
    """(mount point, root within its file system, file system type) per line of
    /proc/self/mountinfo (proc(5)); names are unescaped (``\\040`` is a space)."""
    out = []
    for line in text.splitlines():
        fields = line.split(" ")
        try:
            dash = fields.index("-", 6)
            root, point, fstype = fields[3], fields[4], fields[dash + 1]
        except (ValueError, IndexError):
            continue  # (not a line of the format: skipped, not trusted)
        out.append((_unescape(point), _unescape(root), fstype))
    return out


def _unescape(name: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), name)


def _within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def _resolved(path: str) -> str:
    """``path`` absolute, with the symbolic links of the part that exists resolved."""
    path = os.path.abspath(path)
    head, tail = path, []
    while not os.path.exists(head) and os.path.dirname(head) != head:
        head, name = os.path.split(head)
        tail.append(name)
    return os.path.join(os.path.realpath(head), *reversed(tail))


def lost_store_problem(store_base_dir: str, environ=None, mountinfo: str | None = None,
                       pid: int | None = None) -> str | None:
    """Why a store in ``store_base_dir`` would be lost under the systemd unit running this
    process, or None (not started by systemd, or a lasting place). A private /tmp exists only
    inside a unit, so it is refused for any process of one; a tmpfs /tmp only for the process
    the unit started (:func:`the_units_own_process`): others may be a service's children
    trying a store out, as on any host with a tmpfs /tmp."""
    if not started_by_systemd(environ):
        return None
    path = _resolved(store_base_dir)
    mounts = parse_mountinfo(read_mountinfo() if mountinfo is None else mountinfo)
    holder = max((m for m in mounts if _within(path, m[0])), key=lambda m: len(m[0]), default=None)
    if holder is None:
        return None
    point, root, fstype = holder
    if not any(_within(point, top) for top in TEMPORARY):
        return None
    if "systemd-private-" in root:
        why = (f"{point} is private to this service (systemd's PrivateTmp=), and systemd removes it when the "
               "service stops")
    elif fstype == "tmpfs" and point in TEMPORARY and the_units_own_process(environ, pid):
        # (not a directory bound below /tmp from a lasting disk)
        why = f"{point} is a tmpfs here, emptied when the service stops (PrivateTmp=) or the machine restarts"
    else:
        return None
    return (f"store-base-dir {store_base_dir}: {why}, taking the member's log, term and vote with it; give "
            "store-base-dir a lasting directory (the shipped unit's default is its StateDirectory=, "
            "/var/lib/dledgerctl/<instance>)")
