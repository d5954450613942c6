"""The package's logger, its labels filter and its text handler. The root command (app.py)
sets them up when a command runs: ``--version`` and ``--help`` end before that and do
without the logging module."""

from __future__ import annotations

import logging

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
