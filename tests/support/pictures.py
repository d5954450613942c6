"""Checks of the pictures the commands draw (``store verify --plot``, ``spark stats --plot``)."""

from __future__ import annotations

import struct
import zlib


def png_size(path: str) -> tuple[int, int]:
    """Width and height from a PNG's header, its chunks' CRCs checked."""
    with open(path, "rb") as fh:
        data = fh.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    off, size, ended = 8, None, False
    while off < len(data):
        (n,) = struct.unpack(">I", data[off:off + 4])
        kind, body = data[off + 4:off + 8], data[off + 8:off + 8 + n]
        assert struct.unpack(">I", data[off + 8 + n:off + 12 + n])[0] == zlib.crc32(kind + body), kind
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        ended = kind == b"IEND"
        off += 12 + n
    assert ended, "the PNG is cut short"
    return size
