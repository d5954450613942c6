"""What the root command needs before any command group loads (app.py): the package's
logger, its labels filter and its text handler, the one-line failure, and the reader of
stdout gone away.
Light on purpose: ``dledgerctl --version`` and ``--help`` import it and typer only."""

from __future__ import annotations

import logging
import os
import select
import sys

import typer

log = logging.getLogger("dledgerctl")


class LogLabels(logging.Filter):
    """Puts ``labels`` (a node's group and id, once it starts) on every log record: JSON
    lines carry them as fields."""

    labels: dict = {}

    def filter(self, record: logging.LogRecord) -> bool:
        for k, v in LogLabels.labels.items():
            setattr(record, k, v)
        return True


class ClickLogHandler(logging.Handler):
    """click_log's handler with its colour formatter (the text log lines, ``-v``), imported at
    the first record that reaches it: click_log imports click whole, and most runs of a
    client command log nothing."""

    def __init__(self) -> None:
        super().__init__()
        self._click_log: logging.Handler | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self._click_log is None:
            import click_log

            self._click_log = click_log.ClickHandler()
            self._click_log.formatter = click_log.ColorFormatter()
        self._click_log.emit(record)


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
