"""Entry bodies as packed runs, the way a batched APPEND carries them.

A run is ``count`` big-endian int32 body sizes, then the bodies end to end. A leader that
gets many APPENDs at once hands the file store their bodies as one :class:`PackedBodies`
of those runs; the compiled lane (``store._lanes.encode_packed``) encodes entries straight
from the runs' buffers. A list of bodies would cost an object per body to make, to read
through the buffer protocol and to free, about a third of a microsecond an entry on this
path (1 KiB bodies).

Everything else still sees a sequence of bodies: ``len``, iteration and ``[i]`` (a view
of the run's buffer) work, so the Python lanes and the memory store need nothing of their
own.
"""

from __future__ import annotations

import bisect
import struct
from typing import Iterator, Sequence

import numpy as np

_SIZES = np.dtype(">i4")


def run_sizes(buf, count: int) -> np.ndarray:
    """The body sizes of a run; ValueError (saying why) unless ``buf`` holds exactly
    ``count`` non-negative sizes and the bodies they add up to."""
    if count <= 0:
        raise ValueError(f"a run holds {count} bodies; at least 1 is needed")
    n = len(buf)
    if n < 4 * count:
        raise ValueError(f"a run of {count} bodies has {n} bytes, too few for its size table")
    sizes = np.frombuffer(buf, dtype=_SIZES, count=count).astype(np.int64)
    if sizes.min() < 0:
        raise ValueError("a run has a negative body size")
    if int(sizes.sum()) != n - 4 * count:
        raise ValueError(f"a run's body sizes add up to {int(sizes.sum())}, it carries {n - 4 * count} bytes of bodies")
    return sizes


class PackedBodies(Sequence):
    """Bodies of one append, as packed runs (``runs``: a list of ``(buffer, count)``).

    ``largest`` is the largest body's size. The runs' buffers must not change while the
    object is in use; it keeps no copy."""

    __slots__ = ("runs", "largest", "_starts", "_n")

    def __init__(self, runs: Sequence[tuple[object, int]] = ()) -> None:
        self.runs: list[tuple[object, int]] = []
        self.largest = 0
        self._starts: list[int] = []  # index of each run's first body
        self._n = 0
        for buf, count in runs:
            self.add(buf, count)

    @classmethod
    def of(cls, bodies: Sequence) -> "PackedBodies":
        """The same bodies as one run (a copy): for tests and callers that hold a list."""
        bodies = [bytes(b) for b in bodies]
        packed = cls()
        if bodies:
            packed.add(struct.pack(f">{len(bodies)}i", *map(len, bodies)) + b"".join(bodies), len(bodies))
        return packed

    def add(self, buf, count: int, largest: int | None = None) -> None:
        """Append a run. ``largest`` is its largest body, from a caller that has checked
        the run's size table (cluster/net/appends.py check_bodies); without it the table is checked here
        (ValueError). The compiled lane checks the table's bounds again, whatever it is told."""
        if largest is None:
            largest = int(run_sizes(buf, count).max())
        self.runs.append((buf, count))
        self._starts.append(self._n)
        self._n += count
        if largest > self.largest:
            self.largest = largest

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("body index out of range")
        r = bisect.bisect_right(self._starts, i) - 1
        buf, count = self.runs[r]
        k = i - self._starts[r]
        sizes = np.frombuffer(buf, dtype=_SIZES, count=count)
        start = 4 * count + int(sizes[:k].sum())
        return memoryview(buf)[start : start + int(sizes[k])]

    def __iter__(self) -> Iterator[memoryview]:
        for buf, count in self.runs:
            view = memoryview(buf)
            off = 4 * count
            for size in np.frombuffer(buf, dtype=_SIZES, count=count).tolist():
                yield view[off : off + size]
                off += size

    def __repr__(self) -> str:
        return f"PackedBodies({len(self.runs)} runs, {self._n} bodies)"
