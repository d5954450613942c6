"""What the root command needs before any command group loads (app.py): the one-line
failure, and the reader of stdout gone away.
Light on purpose: ``dledgerctl --version`` and ``--help`` import it and typer only (the log's
set-up is in loglines.py, which a command loads when it runs)."""

from __future__ import annotations

import os
import select
import sys

import typer

def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one ``Error: ...`` line on stderr; return the Exit to raise."""
    first_line = " ".join(str(message).split("\n")[0].split()) or "unknown error"
    typer.echo(f"Error: {first_line}", err=True)
    return typer.Exit(code)


def stdout_gone() -> bool:
    """Whether stdout's reader went away (a pipe or socket with nobody reading: poll says
    POLLERR/POLLHUP), so a BrokenPipeError was stdout's and not a connection's."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _fd, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # (no stdout file descriptor: CliRunner's, or closed)
        return False


def quiet_closed_stdout() -> None:
    """After stdout's reader went away (``dledgerctl ... | head -1``): what is left for
    stdout goes nowhere, so neither this command nor the interpreter's last flush complains.
    The root command (app.py) calls it for a BrokenPipeError from any command, which then
    ends with exit 0, as ``head`` got what it wanted."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # (stdout closed or not a file: nothing is left to flush there)
        pass
