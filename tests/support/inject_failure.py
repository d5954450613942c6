"""Run ``dledgerctl`` with a failure planted in one of a node's tasks (a test helper, not a
test): ``python tests/support/inject_failure.py TASK dledgerctl-args...``.

TASK is where an exception is raised, once the node runs, by patching this process's
copy of the code before the command starts (nothing in the shipped code knows of it):

- ``tick``: RaftCore.tick raises OverflowError on its 20th call (as os.ftruncate did on a
  2^63-byte data file at the first leadership);
- ``server``: the server's connection upkeep task (FrameServer._sweep) raises;
- ``flusher``: a flush's batch (BackgroundSync.run) fails with an error that is not the
  disk's;
- ``task``: a request to a peer that is not connected (Channel.request, awaited in a task
  of its own) raises something other than a transport error.
"""

from __future__ import annotations

import asyncio
import sys


def plant(task: str) -> None:
    if task == "tick":
        from cluster.raft.core import RaftCore

        real, calls = RaftCore.tick, [0]

        def tick(self, now):
            calls[0] += 1
            if calls[0] == 20:
                raise OverflowError("injected: Python int too large to convert to C long")
            return real(self, now)
        RaftCore.tick = tick
    elif task == "server":
        from cluster.net.server import FrameServer

        async def sweep(self):
            await asyncio.sleep(0.2)
            raise RuntimeError("injected into the server's upkeep")
        FrameServer._sweep = sweep
    elif task == "flusher":
        from cluster.node.background import BackgroundSync

        def run(self, jobs):
            fut = self.loop.create_future()
            self.loop.call_soon(fut.set_exception, ValueError("injected into the flusher"))
            return fut
        BackgroundSync.run = run
    elif task == "task":
        from cluster.net.channel import Channel

        async def request(self, frame, timeout):
            raise KeyError("injected into a request task")
        Channel.request = request
    else:
        raise SystemExit(f"unknown task {task!r}")


if __name__ == "__main__":
    plant(sys.argv[1])
    from dledgerctl.__main__ import main

    sys.argv = ["dledgerctl", *sys.argv[2:]]
    main()
