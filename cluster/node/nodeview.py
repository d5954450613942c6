"""What the request handler (requests.py, and its parts reads.py, operator.py, peers.py) may
see of the node it answers for: the one declared interface between them. The node
(process.py ``Node``) has all of it; a test can hand the handler anything else that does.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from store.base import LogStore

from ..net.channel import Channel
from ..net.frames import Frame
from ..net.server import FrameServer
from ..net.tls import Tls
from ..raft.config import NodeConfig
from ..raft.core import RaftCore
from ..raft.statemachine import Applier
from .metrics import Counts
from .scrub import Scrubber
from .supervisor import Supervisor


class NodeView(Protocol):
    """A running node, as its request handler sees it."""

    cfg: NodeConfig
    store: LogStore  # (the node's FileStore: read_entries; its keepers are fixed at open)
    counts: Counts
    tls: Tls | None
    server: FrameServer  # (its count of socket reads: which reads may join a read round)
    channels: dict[str, Channel]  # (to every other member: read indexes, probes and repairs)
    supervisor: Supervisor
    loop: asyncio.AbstractEventLoop
    core: RaftCore | None
    applier: Applier | None
    scrubber: Scrubber | None  # (what it holds damaged is never served)

    def now(self) -> int:
        """The node's clock, in ms (the core's time)."""

    def process(self) -> None:
        """Act on what the core decided (sends, notes), then have the handler answer what it
        finished (Requests.answer_finished)."""

    def frame_for(self, peer: str, req) -> Frame:
        """A peer request as the frame ``peer`` reads (its dialect)."""

    def apply_soon(self) -> None:
        """Feed the state machine what is committed, on the next loop iteration."""

    def track(self, task: asyncio.Task) -> None:
        """Keep ``task`` until it ends (cancelled when the node shuts down)."""
