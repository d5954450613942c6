"""Commit logs of master-slave stores changed on purpose, for the tests of ``mq align`` and
``spark mq-align``: where each message starts, a log cut short at an offset, a byte flipped."""

from __future__ import annotations

import os

from store.rocketmq.commitlog import walk_file

# a byte of a message's BORNTIMESTAMP: no CRC covers it, so a replica's recovery keeps a message
# flipped there (a body that fails its CRC ends the log before its message: replica.log_extent)
BORN_AT = 44


def boundaries(d) -> list[int]:
    """Every message's start offset in the commit log of store root ``d`` (a Path)."""
    out = []
    for name in sorted(os.listdir(d / "commitlog")):
        b = (d / "commitlog" / name).read_bytes()
        offs, _sizes, _p, _end = walk_file(b, len(b))
        out += [int(name) + o for o in offs]
    return out


def cut_log(d, at: int) -> None:
    """``d``'s commit log ending at offset ``at``: zeros after it, the later files removed."""
    for name in sorted(os.listdir(d / "commitlog")):
        start, path = int(name), d / "commitlog" / name
        size = os.path.getsize(path)
        if start >= at:
            os.unlink(path)
        elif start + size > at:
            with open(path, "r+b") as fh:
                fh.seek(at - start)
                fh.write(bytes(start + size - at))


def flip(d, at: int) -> None:
    """The byte at commit-log offset ``at`` of ``d`` with its lowest bit flipped."""
    name = max(n for n in os.listdir(d / "commitlog") if int(n) <= at)
    with open(d / "commitlog" / name, "r+b") as fh:
        fh.seek(at - int(name))
        byte = fh.read(1)
        fh.seek(at - int(name))
        fh.write(bytes([byte[0] ^ 1]))
