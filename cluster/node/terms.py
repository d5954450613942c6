"""The term and the vote on disk: ``currterm`` in the node directory (DLedger's file).

The deciding logic (cluster/raft) keeps its term and vote through a term store it is
given; this is the node's, and cluster/raft/member.py's MemoryTermStore the simulator's.
"""

from __future__ import annotations

from store.metafiles import read_currterm, write_currterm


class FileTermStore:
    """``currterm`` in the node directory (DLedger's file: ``currTerm``, ``voteLeader``)."""

    def __init__(self, node_dir: str) -> None:
        self.node_dir = node_dir

    def load(self) -> tuple[int, str | None]:
        ts = read_currterm(self.node_dir)
        return ts.term, ts.vote_for

    def save(self, term: int, voted_for: str | None) -> None:
        write_currterm(self.node_dir, term, voted_for)  # tmp + fsync + .bak + rename + dir fsync
