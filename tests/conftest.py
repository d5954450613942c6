"""Shared test helpers: where the DLedger 0.2.7 reference stores are, and writable copies."""

from __future__ import annotations

import os
import shutil
import stat

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "fixtures", "dledger-0.2.7")


def copy_fixture(tmp_path, name="leader", node="dledger-n0"):
    """A writable copy of a reference node directory (the originals are read-only)."""
    dst = tmp_path / name / node
    shutil.copytree(os.path.join(FIXTURES, name, node), dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return dst
