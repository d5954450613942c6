"""The commit-log writer ``mq migrate`` had before it wrote a batch at a time, kept for tests
only: a message at a time, through a buffered file, RocketMQ's roll rule applied to each
(``DefaultAppendMessageCallback``: a message whose bytes and 8 more do not fit in what is left
of a file goes to the next one, after a blank record). tests/rocketmq/test_mq_moving.py holds
store/rocketmq/commitlog.py's batch writer to its files, byte for byte."""

from __future__ import annotations

import os
import struct

from store.rocketmq.commitlog import BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH, file_name, too_large
from store.rocketmq.message import PHY_POS_POSITION

_BLANK = struct.Struct(">ii")
_I64 = struct.Struct(">q")


class OneByOneWriter:
    """``append(message)`` -> its offset; ``close()``; ``files`` and ``blanks`` counted."""

    def __init__(self, dir: str, file_size: int, start: int = 0) -> None:
        assert start % file_size == 0
        self.dir, self.file_size = dir, file_size
        os.makedirs(dir)
        self.offset, self.files, self.blanks = start, 0, 0
        self._fh = None
        self._file_start = start

    @property
    def left(self) -> int:
        return 0 if self._fh is None else self._file_start + self.file_size - self.offset

    def _next_file(self) -> None:
        if self._fh is not None:
            left = self.left
            if left >= END_FILE_MIN_BLANK_LENGTH:
                self._fh.write(_BLANK.pack(left, BLANK_MAGIC_CODE))
                self.blanks += 1
            self.offset += left
            self._finish()
        self._file_start = self.offset
        self._fh = open(os.path.join(self.dir, file_name(self.offset)), "xb")
        self.files += 1

    def _finish(self) -> None:
        fh, self._fh = self._fh, None
        fh.flush()
        os.ftruncate(fh.fileno(), self.file_size)
        fh.close()

    def append(self, message) -> int:
        n = len(message)
        if n + END_FILE_MIN_BLANK_LENGTH > self.file_size:
            raise too_large(n, self.file_size)
        if self._fh is None or n + END_FILE_MIN_BLANK_LENGTH > self.left:
            self._next_file()
        at = self.offset
        self._fh.write(message[:PHY_POS_POSITION])
        self._fh.write(_I64.pack(at))
        self._fh.write(message[PHY_POS_POSITION + 8:])
        self.offset += n
        return at

    def close(self) -> None:
        if self._fh is not None:
            self._finish()
