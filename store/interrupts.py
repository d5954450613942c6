"""Holding Ctrl-C (and SIGTERM) over steps that must not stop half-way.

A command that swaps files into place with several renames leaves a mix of old and new files
when it stops between two of them. :class:`HeldSignals` makes the steps between
:meth:`~HeldSignals.start` and :meth:`~HeldSignals.stop` run to their end: SIGINT and SIGTERM
that arrive meanwhile are recorded, not acted on, and the caller, told by ``caught``, says
what was finished and then stops. Only the main thread can set signal handlers: elsewhere
nothing is held (the signals reach the main thread anyway).
"""

from __future__ import annotations

import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM)


class HeldSignals:
    """SIGINT and SIGTERM held from :meth:`start` to :meth:`stop`; ``caught``: the signals
    that arrived meanwhile, in order (none repeated)."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._old: dict[int, object] = {}

    def _hold(self, signum, _frame) -> None:
        if signum not in self.caught:
            self.caught.append(signum)

    def start(self) -> None:
        if self._old or threading.current_thread() is not threading.main_thread():
            return
        for s in HELD:
            self._old[s] = signal.signal(s, self._hold)

    def stop(self) -> None:
        """Put the handlers back (the signals caught stay in ``caught``: the caller acts on them)."""
        old, self._old = self._old, {}
        for s, handler in old.items():
            signal.signal(s, handler)
