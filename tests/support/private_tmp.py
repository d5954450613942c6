"""Run a command with a /tmp and /var/tmp of its own, as systemd's ``PrivateTmp=`` gives a
service: ``unshare -m --propagation private python private_tmp.py MODE DIR KEEP... -- ARGV``.

MODE ``bind`` mounts ``DIR/systemd-private-<id>-dledgerctl@n0.service-<rand>/tmp`` (and a
``var-tmp`` twin) on /tmp (and /var/tmp), which is what ``PrivateTmp=yes`` does; ``tmpfs``
mounts a fresh tmpfs on each (``PrivateTmp=disconnected``). Then each KEEP (a path under /tmp
the command needs: the test's directory, a checkout or venv there) is bound back at its own
path, so only the rest of /tmp is hidden. Needs root (in the new mount namespace only: the
caller's mounts are untouched). Test helper; not a test itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    mode, base, keeps, command = argv[0], argv[1], argv[2:split], argv[split + 1:]
    unit = f"systemd-private-{uuid.uuid4().hex}-dledgerctl@n0.service-{uuid.uuid4().hex[:6]}"
    keeps = [os.path.realpath(k) for k in keeps]
    staged = []
    for top, name in (("/tmp", "tmp"), ("/var/tmp", "var-tmp")):
        private = os.path.join(base, unit, name, "tmp")  # (all made before any mount hides base)
        os.makedirs(private, mode=0o1777)
        if mode == "tmpfs":
            _mount("-t", "tmpfs", "tmpfs", private)
        for keep in keeps:  # (bound inside first: the recursive bind below carries them to top)
            if keep.startswith(top + "/"):
                inside = os.path.join(private, os.path.relpath(keep, top))
                os.makedirs(inside, exist_ok=True)
                _mount("--bind", keep, inside)
        staged.append((private, top))
    for private, top in reversed(staged):  # (/var/tmp first: its directory is reached through /tmp)
        _mount("--rbind", private, top)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
