"""How a node process runs: its event loop, its allocator and garbage-collector settings.

Process-wide choices that decide much of a node's speed and that nothing else in
cluster/ needs to know about:

- The event loop. uvloop (libuv) when it is installed: per request it costs the node
  about a fifth less CPU than the standard selector loop (measured with
  benchmarks/bench_cluster.py, 64 clients of single appends). ``asyncio`` is kept for
  debugging and for platforms without uvloop.
- glibc's allocator. Frames of pushes and batched appends are 64 KiB to a few MiB.
  By default glibc serves each such buffer with a fresh ``mmap`` and returns it with
  ``munmap`` (or trims the heap top back to the kernel) as soon as it is freed, so every
  one of them page-faults in zeroed pages again. Measured on a follower taking 1 KiB
  entries in batches of 1024: about 3.5 us of kernel time per entry, 0.9 us with the
  thresholds below, and cluster throughput went from about 61k to 85-92k entries/s.
  The cost is that memory freed after a burst stays with the process for reuse.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from typing import Awaitable, Callable

log = logging.getLogger("dledgerctl.node")

LOOPS = ("auto", "uvloop", "asyncio")
# glibc mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20  # the cap of glibc's own dynamic threshold on 64-bit
TRIM_THRESHOLD = 256 << 20


class RuntimeChoiceError(Exception):
    pass


def tune_allocator() -> bool:
    """Keep buffers up to 32 MiB in the heap and freed memory in the process (glibc only);
    True when glibc took both settings."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError, TypeError):
        return False  # not glibc (musl, macOS): their allocators need no such hint
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))


def loop_factory(choice: str = "auto"):
    """The event loop class for ``choice``: uvloop's when asked for or (auto) installed,
    else None for asyncio's default."""
    if choice not in LOOPS:
        raise RuntimeChoiceError(f"unknown event loop {choice!r} (choose from {', '.join(LOOPS)})")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise RuntimeChoiceError("uvloop is not installed (pip install uvloop, or use --event-loop asyncio)") \
                from None
        return None
    return uvloop.Loop


def tune_gc() -> None:
    """Fewer, cheaper cyclic garbage collections for a long-running server.

    Everything alive at start-up (modules, numpy, the opened store) is moved out of the
    collector's sight with ``gc.freeze()``, and the youngest generation is collected after
    50,000 container allocations instead of 700. Requests allocate many short-lived lists,
    tuples and frames that reference counting frees at once; with the defaults the
    collector still ran every few hundred requests and walked every live object in its
    older generations now and then (its functions were about 8% of a busy leader's CPU
    samples under perf)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def run(main: Callable[[], Awaitable], choice: str = "auto"):
    """``await main()`` on a new loop of the chosen kind, after tuning the allocator and
    the garbage collector."""
    factory = loop_factory(choice)
    tuned = tune_allocator()
    tune_gc()
    log.debug("event loop %s, allocator %s", "uvloop" if factory else "asyncio",
              "tuned" if tuned else "left as it is")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())
