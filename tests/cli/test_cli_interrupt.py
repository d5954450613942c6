"""Ctrl-C at any moment of a command, its first half second (the modules loading) included:
exit 130, no traceback. A real process sent SIGINT while it is still importing: ``-X
importtime`` writes a line to stderr per module loaded, stderr is a pipe made to hold 4 KiB,
and the test stops reading at a module after which the command still writes more than a pipe's
worth of those lines, so the process is blocked writing one, in the middle of its imports, when
the signal arrives (no timing involved). Which module that is comes from an uninterrupted run of
the same command (the lazy paths load few modules: ``--version``'s last 4 KiB begin inside
dledgerctl's own package).
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


PIPE = 4096
MARGIN = 512  # bytes of import lines beyond a full pipe still to come after the marker


def _marker(args: list[str]) -> str:
    """The last module whose import line is followed by more than a pipe's worth (and a margin)
    of lines, the command's imports from dledgerctl's package on, in an uninterrupted run."""
    err = subprocess.run([sys.executable, "-X", "importtime", "-m", "dledgerctl", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, env=ENV, text=True, timeout=60).stderr
    lines = [ln + "\n" for ln in err.splitlines() if ln.startswith("import time:")]
    names = [ln.rsplit("|", 1)[-1].strip() for ln in lines]
    after = 0
    for k in range(len(lines) - 1, -1, -1):
        if after > PIPE + MARGIN:
            return names[k]
        if names[k] == "dledgerctl":
            break
        after += len(lines[k])
    raise AssertionError(f"dledgerctl {' '.join(args)} imports too little for the pipe to hold it back: {after} bytes")


def _interrupt_while_importing(args: list[str], marker: str) -> tuple[int, str]:
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE)
    proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "dledgerctl", *args], stdout=subprocess.DEVNULL,
                            stderr=w, env=ENV)
    os.close(w)
    seen = []
    with os.fdopen(r, "rb", buffering=0) as err:
        # a byte at a time up to the marker's line: a buffered read would take what follows it
        # out of the pipe too, and let the process write that much further
        line = bytearray()
        while True:
            byte = err.read(1)
            if not byte:
                raise AssertionError(f"{marker} never imported: {''.join(seen)[-2000:]}")
            line += byte
            if byte == b"\n":
                seen.append(line.decode(errors="replace"))
                line = bytearray()
                if re.search(rf"\|\s+{re.escape(marker)}$", seen[-1].rstrip()):
                    break
        proc.send_signal(signal.SIGINT)
        seen.extend(err.read().decode(errors="replace").splitlines(True))
    code = proc.wait(timeout=60)
    return code, "".join(seen)


@pytest.mark.parametrize("args", [["store", "verify", "/nonexistent"], ["cluster", "status", "--base-dir", "/nope"],
                                  ["--version"]])
def test_ctrl_c_while_the_modules_load(args):
    code, err = _interrupt_while_importing(args, _marker(args))
    loaded = [line for line in err.splitlines() if line.startswith("import time:")]
    # (a module whose import fails still gets its line, so app's is there either way; the last
    # command module app.py imports is not, unless the signal came after the imports)
    assert not any(re.search(r"\|\s+dledgerctl\.spark_cmd$", line) for line in loaded), "the signal came too late"
    others = [line for line in err.splitlines() if not line.startswith("import time:")]
    assert others == [], "\n".join(others)  # no traceback, no "Exception ignored"
    assert code == 130
