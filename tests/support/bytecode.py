"""The project's modules byte-compiled once a run, before any test starts a process.

The tests start a few thousand processes of this checkout (nodes, commands, helper scripts).
With PYTHONDONTWRITEBYTECODE set, as on some machines (this project's CI among them), an
editable install never writes .pyc files, so each of those processes compiled every module it
imported from source: about 0.1 s of CPU a process, which an installed copy never pays (pip
compiles what it installs). Compiling them here once gives the tests' processes what an
install would. Reading existing .pyc files is not affected by that variable; a module edited
later is compiled again, in memory, by whoever imports it.
"""

from __future__ import annotations

import compileall
import os

from tests.support.paths import ROOT

PACKAGES = ("dledgerctl", "cluster", "store", "tests")


def compile_project() -> None:
    """Byte-compile :data:`PACKAGES` in place (quietly; a read-only checkout just goes without)."""
    for package in PACKAGES:
        compileall.compile_dir(os.path.join(ROOT, package), quiet=2)
