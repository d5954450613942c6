"""Ctrl-C at any moment of a command, its first half second (the modules loading) included:
exit 130, no traceback. A real process sent SIGINT while it is still importing: ``-X
importtime`` writes a line to stderr per module loaded, stderr is a pipe made to hold 4 KiB,
and the test stops reading once typer is in, so the process cannot load more than a pipe's
worth of modules beyond that point before the signal arrives (no timing involved).
"""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.paths import ROOT

ENV = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200")


def _interrupt_while_importing(args: list[str], marker: str) -> tuple[int, str]:
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "dledgerctl", *args], stdout=subprocess.DEVNULL,
                            stderr=w, env=ENV)
    os.close(w)
    seen = []
    with os.fdopen(r, "r", errors="replace") as err:
        for line in err:
            seen.append(line)
            if re.search(rf"\|\s+{re.escape(marker)}$", line.rstrip()):
                break
        else:
            raise AssertionError(f"{marker} never imported: {''.join(seen)[-2000:]}")
        proc.send_signal(signal.SIGINT)
        seen.extend(err.readlines())
    code = proc.wait(timeout=60)
    return code, "".join(seen)


@pytest.mark.parametrize("args", [["store", "verify", "/nonexistent"], ["cluster", "status", "--base-dir", "/nope"],
                                  ["--version"]])
def test_ctrl_c_while_the_modules_load(args):
    code, err = _interrupt_while_importing(args, "typer")
    loaded = [line for line in err.splitlines() if line.startswith("import time:")]
    # (a module whose import fails still gets its line, so app's is there either way; the last
    # command module app.py imports is not, unless the signal came after the imports)
    assert not any(re.search(r"\|\s+dledgerctl\.spark_cmd$", line) for line in loaded), "the signal came too late"
    others = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert others == [], "\n".join(others)  # no traceback, no "Exception ignored"
    assert code == 130
