"""A small real filesystem for full-disk tests: a size-limited tmpfs, or an ext4 image on a
loop device, mounted for the test and unmounted after it (the test is skipped, with the
reason, where mounting is not permitted: it needs root), and a filler that takes its free
space. Test helper; not a test itself.

tmpfs allocates a page for any fault on a hole of a shared mapping, reads included, so a
sparse file read through a mapping on a full tmpfs is SIGBUS too; ext4 maps the zero page
for a read of a hole. A test of what writing needs, with sparse files on a full disk, takes
ext4."""

from __future__ import annotations

import errno
import os
import subprocess
from contextlib import contextmanager
from typing import Iterator

import pytest


@contextmanager
def small_tmpfs(path: str, size: str) -> Iterator[str]:
    """``path`` (made if missing) with a tmpfs of ``size`` (mount's syntax: ``14m``) on it
    while the block runs; unmounted in any case after it, everything on it gone."""
    os.makedirs(path, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path], capture_output=True, text=True,
                       timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a {size} tmpfs at {path} ({(r.stderr or r.stdout).strip() or r.returncode}): "
                    f"the full-disk test needs a real small filesystem (root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=True, timeout=30)


@contextmanager
def small_ext4(path: str, image: str, size: str) -> Iterator[str]:
    """``path`` (made if missing) with an ext4 filesystem of ``size`` (truncate's syntax: ``8M``)
    made in the file ``image`` and mounted through a loop device while the block runs."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["truncate", "-s", size, image], check=True, timeout=30)
    made = subprocess.run(["mkfs.ext4", "-q", "-F", "-O", "^has_journal", "-m", "0", image], capture_output=True,
                          text=True, timeout=60)
    if made.returncode != 0:
        pytest.skip(f"cannot make an ext4 image ({(made.stderr or made.stdout).strip() or made.returncode})")
    r = subprocess.run(["mount", "-o", "loop", image, path], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"cannot mount an ext4 image at {path} ({(r.stderr or r.stdout).strip() or r.returncode}): "
                    f"the full-disk test needs a real small filesystem (root, a loop device)")
    try:
        yield path
    finally:
        subprocess.run(["umount", path], check=True, timeout=30)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill(path: str, leave: int = 0) -> str:
    """A file ``filler`` in ``path`` taking all but about ``leave`` bytes of its filesystem's
    free space (all of it when ``leave`` is 0); its path."""
    filler = os.path.join(path, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        want = free_bytes(path) - leave
        if want > 0:
            os.posix_fallocate(fd, 0, want)
        if not leave:
            chunk = bytes(4096)
            os.lseek(fd, 0, os.SEEK_END)
            while True:
                try:
                    os.write(fd, chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC
                    break
    finally:
        os.close(fd)
    return filler


def used_files(path: str) -> list[str]:
    """Every file and directory under ``path``, relative to it, sorted."""
    out = []
    for d, dirs, files in os.walk(path):
        out += [os.path.relpath(os.path.join(d, n), path) for n in dirs + files]
    return sorted(out)
