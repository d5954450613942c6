"""What a push can look like when it arrives damaged: the simulator's model of a torn or
flipped range of entries (tests/support/sim.py ``NetConfig.garble``).

A push carries a range of the leader's data file as it lies (the entries' raw bytes). On
the way it can arrive cut short (a range torn at any byte) or with one byte changed. A
follower must refuse either whole or store only the good entries before the damage, and
answer so that the leader sends the rest again: what it stores must be byte for byte what
the leader holds.

The bytes a flip may change are those some check covers: the size, index, term and pos
fields, the two CRC fields, the body size and the body. Two header fields no check can
cover are left alone: ``magic`` (1, 2 and 3 are all valid, and no checksum covers it) and
``channel`` (4 reserved bytes, 0 on every path, no checksum covers them either).
"""

from __future__ import annotations

import random

from store.format import ENTRY_HEADER, HEADER_SIZE

_UNCOVERED = frozenset(range(0, 4)) | frozenset(range(32, 36))  # magic, channel


def entry_starts(raw: bytes) -> list[int]:
    """The offsets at which the entries of a well-formed range begin."""
    out, off = [], 0
    while off + HEADER_SIZE <= len(raw):
        out.append(off)
        off += ENTRY_HEADER.unpack_from(raw, off)[1]
    return out


def garble(raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    """``raw`` torn (cut at a random byte short of its end) or with one covered byte
    changed: (what was done, the damaged bytes)."""
    if rng.random() < 0.3:
        cut = rng.randrange(len(raw))
        return f"torn at byte {cut} of {len(raw)}", raw[:cut]
    starts = entry_starts(raw)
    start = rng.choice(starts)
    end = starts[starts.index(start) + 1] if start != starts[-1] else len(raw)
    at = rng.choice([k for k in range(end - start) if k not in _UNCOVERED])
    out = bytearray(raw)
    out[start + at] ^= rng.randrange(1, 256)
    return f"byte {start + at} flipped", bytes(out)
