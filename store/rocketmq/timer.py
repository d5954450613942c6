"""RocketMQ 5's timer files (``TimerMessageStore``: messages delivered at a time of the
producer's choosing), which name commit-log offsets and so must follow a move.

A 5.x broker with the timer (``timerWheelEnable``) keeps, beside ``consumequeue/``:

- ``timerlog/``: files named by their first byte (``mappedFileSizeTimerLog``, 100 MiB by
  default) of 52-byte units, one per timer message enqueued, rolled or deleted: size (i32,
  52), the slot's previous unit's timer-log position (i64), magic (i32: 1 default, 2 roll,
  4 delete), write time (i64), delay (i32), the message's commit-log offset (i64, at byte
  28), its size (i32), its real topic's hash (i32) and 8 reserved bytes. A unit that does not
  fit in what is left of a file gives way to a 16-byte blank record (size = bytes left, 0,
  magic -875286124) and the next file (``TimerLog.append``);
- ``timerwheel``: the wheel's slots, which hold timer-log positions only;
- ``config/timercheck`` and ``config/timermetrics``: queue offsets, timer-log positions,
  times and counts.

Only the units' commit-log offsets change in a move (:func:`move_timer_log`); the rest keeps
its meaning and is copied as it is.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from ..writing import copy_file, write_file

TIMER_LOG_DIR = "timerlog"  # TimerMessageStore.getTimerLogPath
TIMER_WHEEL_FILE = "timerwheel"  # TimerMessageStore.getTimerWheelPath
UNIT_SIZE = 52  # TimerLog.UNIT_SIZE
OFFSET_PY_AT = 28  # TimerLog.UNIT_PRE_SIZE_FOR_MSG: size, prev pos, magic, write time, delay
BLANK_MAGIC = -875286124  # TimerLog.BLANK_MAGIC_CODE (0xBBCCDDEE ^ 1880681586 + 8, as Java reads it)
NO_MESSAGE = -1  # where a unit whose message was not moved now points: no commit-log file holds it

_HEAD = struct.Struct(">iqi")  # size, prev pos, magic


class TimerLogError(ValueError):
    """A timer-log file that does not read as TimerLog writes it (the text says where)."""


def move_timer_log(src_root: str, dest_root: str, old: np.ndarray, new: np.ndarray) -> tuple[int, int]:
    """Copy ``timerlog/`` (its units' commit-log offsets from ``old`` to ``new``, both sorted by
    ``old``; a unit whose offset is not in ``old`` gets NO_MESSAGE, so the timer skips it as one
    whose commit-log file is gone) and ``timerwheel`` from ``src_root`` to ``dest_root``;
    (units rewritten, units pointing nowhere now). Nothing when SRC has neither."""
    wheel = os.path.join(src_root, TIMER_WHEEL_FILE)
    if os.path.isfile(wheel):
        copy_file(wheel, os.path.join(dest_root, TIMER_WHEEL_FILE))
    src = os.path.join(src_root, TIMER_LOG_DIR)
    if not os.path.isdir(src):
        return 0, 0
    os.makedirs(os.path.join(dest_root, TIMER_LOG_DIR))
    moved = lost = 0
    for name in sorted(os.listdir(src)):
        with open(os.path.join(src, name), "rb") as fh:
            data = bytearray(fh.read())
        at = _units(data, os.path.join(src, name))
        if len(at):
            offsets = np.array([struct.unpack_from(">q", data, p + OFFSET_PY_AT)[0] for p in at], np.int64)
            k = np.minimum(np.searchsorted(old, offsets), max(len(old) - 1, 0))
            found = (old[k] == offsets) if len(old) else np.zeros(len(offsets), bool)
            for p, hit, j in zip(at, found.tolist(), k.tolist()):
                struct.pack_into(">q", data, p + OFFSET_PY_AT, int(new[j]) if hit else NO_MESSAGE)
            moved += int(found.sum())
            lost += int(len(found) - found.sum())
        write_file(os.path.join(dest_root, TIMER_LOG_DIR, name), data)
    return moved, lost


def unit_positions(data: bytes, path: str) -> list[int]:
    """The byte positions of the units in one timer-log file's ``data`` (read only: ``mq
    check``); TimerLogError naming ``path`` where they do not read as TimerLog writes them."""
    return _units(data, path)


def _units(data: bytearray, path: str) -> list[int]:
    """The positions of the units in one timer-log file, up to its blank record or its
    unwritten rest (zeros)."""
    out, p = [], 0
    while p + _HEAD.size <= len(data):
        size, _, magic = _HEAD.unpack_from(data, p)
        if size == 0:
            break
        if magic == BLANK_MAGIC and size == len(data) - p:
            break
        if size != UNIT_SIZE or p + UNIT_SIZE > len(data):
            raise TimerLogError(f"{path} offset {p}: a unit of {size} bytes (magic {magic}) where TimerLog writes "
                                f"{UNIT_SIZE}-byte units or a blank record to the file's end")
        out.append(p)
        p += UNIT_SIZE
    return out
