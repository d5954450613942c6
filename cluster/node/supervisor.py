"""A node never runs on with a dead task (:class:`Supervisor`).

A node is its tick loop (elections, heartbeats, replication, the periodic flush and
checkpoint), its server's upkeep task, its flushes (cluster/node/background.py) and the
tasks it starts for requests. An exception escaping one of them used to end that task
alone: a node whose tick died kept its port open and answered, but never elected,
heartbeated, flushed or checkpointed again, and said nothing (the task's exception was
collected, at shutdown, by a gather that returned it). Now the first such exception
stops the node (a clean shutdown: the server closes, the store is flushed and its
checkpoint written), and :meth:`Node.run` raises :class:`NodeFailure` naming the task and
the exception, which ``node start`` prints as its one ``Error:`` line with a non-zero exit,
so a service manager restarts it.

Exceptions that are part of a task's job are handled where they arise and never reach
here: a peer that does not answer (TransportError), a request that does not decode, a
disk error on a flush (StoreIOError: logged, the appends waiting for it stay
unacknowledged), a state machine's own bug. What reaches here is a bug or a condition
nothing was written for, and going on would only hide it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import traceback
from typing import Callable

log = logging.getLogger("dledgerctl.node")


class NodeFailure(Exception):
    """A task of the node failed; the node stopped. ``what`` names the task; the cause is
    chained (``__cause__``)."""

    def __init__(self, what: str, exc: BaseException) -> None:
        self.what = what
        super().__init__(f"{what} failed: {describe(exc)}")


def describe(exc: BaseException) -> str:
    """``Type: message (at file:line)``, the line being where it was raised, for the one line
    an operator sees (the whole traceback is logged at debug level)."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if frames:
        last = frames[-1]
        parts = os.path.normpath(last.filename).split(os.sep)
        where = f" (at {'/'.join(parts[-3:])}:{last.lineno})"
    text = str(exc)
    return f"{type(exc).__name__}{': ' + text if text else ''}{where}"


class Supervisor:
    """Watches a node's tasks and callbacks; the first failure calls ``stop()`` once and is
    kept in :attr:`failure` (what, exception) for the node to raise after its shutdown."""

    def __init__(self, stop: Callable[[], None]) -> None:
        self._stop = stop
        self.failure: tuple[str, BaseException] | None = None

    def failed(self, what: str, exc: BaseException) -> None:
        if self.failure is not None:
            log.debug("%s failed too, while the node stops: %s", what, describe(exc))
            return
        self.failure = (what, exc)
        log.debug("%s failed; stopping the node", what, exc_info=exc)
        self._stop()

    def watch(self, task: asyncio.Future, what: str) -> asyncio.Future:
        """Fail when ``task`` ends with an exception (not when cancelled: that is a stop)."""
        def done(t: asyncio.Future) -> None:
            if not t.cancelled() and t.exception() is not None:
                self.failed(what, t.exception())
        task.add_done_callback(done)
        return task

    def guard(self, what: str, fn: Callable, *args, **kwargs) -> None:
        """Call ``fn(*args, **kwargs)`` (a callback the loop or a channel runs); an exception
        fails the node instead of reaching the loop's handler, which would only log it."""
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - anything: the point is that the node stops
            self.failed(what, exc)

    def error(self) -> NodeFailure | None:
        if self.failure is None:
            return None
        what, exc = self.failure
        err = NodeFailure(what, exc)
        err.__cause__ = exc
        return err
