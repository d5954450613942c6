"""The command line as the tests run it: in process through typer's CliRunner
(:func:`invoke`), or as a real ``python -m dledgerctl`` process (:func:`cli`)."""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner

from dledgerctl.app import app
from tests.support.paths import ROOT, SUPPORT

runner = CliRunner()

# state machines the tests load into nodes by module name (nodes inherit the environment)
STATE_MACHINES = os.path.join(SUPPORT, "sm")


def invoke(*args, input=None):
    """The real typer app in this process; every argument as text (bytes as the file
    system's names)."""
    return runner.invoke(app, [os.fsdecode(a) if isinstance(a, bytes) else str(a) for a in args], input=input)


def invoke_clean(*args):
    """:func:`invoke`, and no traceback reached the output, whatever the exit code."""
    r = invoke(*args)
    assert "Traceback" not in r.output + r.stderr
    return r


def cli(*args, timeout: float = 60, input=None, env=None) -> subprocess.CompletedProcess:
    """``python -m dledgerctl ARGS`` in a process of its own (a hang fails at ``timeout``),
    with the project and tests/support/sm on PYTHONPATH, 200 columns, and ``env`` on top."""
    full = dict(os.environ)
    full.update(PYTHONPATH=os.pathsep.join([ROOT, STATE_MACHINES]), COLUMNS="200")
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "dledgerctl", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full, input=input)
