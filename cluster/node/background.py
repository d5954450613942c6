"""Work a node runs off its event loop: the store's flushes (:class:`BackgroundSync`).
"""

from __future__ import annotations

import asyncio

from store.files import Flusher, SyncJob, flush_error, sync_fds


class BackgroundSync:
    """Runs the store's sync jobs (store.files.SyncJob) off the event loop, one batch at a
    time; :meth:`run` returns a future of the batch, failing with StoreIOError.

    With store._flusher built, a thread of its own runs them without ever taking the
    interpreter lock and wakes the loop through an eventfd. Otherwise sync_fds runs in the
    loop's default executor: a pool thread is woken through a queue, takes the interpreter
    lock around each syscall and to hand back its result, and the loop is woken through
    call_soon_threadsafe. With the loop busy in Python, that cost 1.2-1.8 ms of CPU per
    flush outside the loop thread, against 0.12-0.14 ms for the compiled thread
    (benchmarks/bench_flush.py), and a node flushes 100 times a second."""

    def __init__(self, loop: asyncio.AbstractEventLoop, compiled: bool = True) -> None:
        self.loop = loop
        self._flusher = None
        self._waiter: asyncio.Future | None = None
        if compiled and Flusher is not None:
            self._flusher = Flusher()
            loop.add_reader(self._flusher.fileno(), self._collect)

    @property
    def compiled(self) -> bool:
        return self._flusher is not None

    def run(self, jobs: list[SyncJob]) -> asyncio.Future:
        if self._flusher is None:
            return self.loop.run_in_executor(None, sync_fds, jobs)
        fut = self.loop.create_future()
        self._flusher.submit(jobs)  # (RuntimeError while the batch before is not collected)
        self._waiter = fut
        return fut

    def _collect(self) -> None:
        try:
            code = self._flusher.collect()
        except Exception as exc:  # noqa: BLE001 - the batch's future fails with it (the node stops on it)
            fut, self._waiter = self._waiter, None
            if fut is not None and not fut.done():
                fut.set_exception(exc)
            return
        if code < 0 or self._waiter is None:  # (woken early: not done yet)
            return
        fut, self._waiter = self._waiter, None
        if not fut.done():
            if code:
                fut.set_exception(flush_error(code))
            else:
                fut.set_result(None)

    def close(self) -> None:
        """Stop the thread (after a batch under way); await :meth:`run`'s future first."""
        if self._flusher is not None:
            self.loop.remove_reader(self._flusher.fileno())
            self._flusher.close()
            self._flusher = None
