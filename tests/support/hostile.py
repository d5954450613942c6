"""Hostile frames: what an attacker on the network, or a peer with a bug, can send a node.

Every frame here is well framed (length, header length, header JSON), so it reaches the
decoders and the deciding logic, and every one must be refused: fields missing, of the
wrong type, out of their range (terms the format cannot hold or that cannot be
incremented, indexes past int64), JSON nested a thousand deep in the header or the body,
another group's name, a sender that is no member, a Java header on a request that is
refused. A node must answer each (or close the connection when the header itself is bad),
change nothing, and log no traceback.

Used by tests/net/test_hostile_frames.py (a bounded run in the test command) and by the fault
harness's ``hostile`` fault (tests/support/faults.py, benchmarks/fault_runs.py).
"""

from __future__ import annotations

import json
import random
import socket
import struct

from cluster.net.frames import FrameReceiver
from cluster.net.wire import (
    APPEND,
    CHANGE_MEMBERS,
    FORCE_COMPARE,
    FORCE_TRUNCATE,
    GET,
    HEART_BEAT,
    INSTALL_SNAPSHOT,
    LEADERSHIP_TRANSFER,
    METADATA,
    PROBE,
    PUSH,
    QUERY,
    REPAIR,
    VOTE,
)

I64 = (1 << 63) - 1
# values no numeric field may hold: past int64, a term that cannot be incremented, below
# -1, and other JSON types
BAD_NUMBERS = [I64, I64 + 1, 1 << 64, 10**40, -2, -(1 << 63), 1.5, "7", None, [], {}, True]
DEEP = 1000


def frame(code: int, body: bytes = b"", ext: dict | None = None, *, opaque: int = 1, language: str = "PYTHON",
          header: bytes | None = None) -> bytes:
    """A whole frame; ``header`` replaces the header JSON made from the other arguments."""
    if header is None:
        h = {"code": code, "flag": 0, "opaque": opaque, "language": language, "version": 0}
        if ext is not None:
            h["extFields"] = ext
        header = json.dumps(h).encode()
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _body(obj) -> bytes:
    return json.dumps(obj).encode()


def nested(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def peer_requests(group: str, sender: str, term: int) -> dict[int, dict]:
    """A valid-looking body of each peer request (JSON ones), to spoil one field at a time."""
    return {
        VOTE: {"group": group, "leaderId": sender, "term": term, "ledgerEndIndex": 0, "ledgerEndTerm": term,
               "preVote": True},
        HEART_BEAT: {"group": group, "leaderId": sender, "term": term},
        LEADERSHIP_TRANSFER: {"group": group, "leaderId": sender, "transfereeId": sender, "term": term},
        PROBE: {"group": group, "leaderId": sender, "term": term, "first": 0, "count": 1},
        REPAIR: {"group": group, "leaderId": sender, "term": term, "fromIndex": 1 << 62},
    }


def push_ext(group: str, sender: str, term: int) -> dict:
    return {"group": group, "leaderId": sender, "term": str(term), "type": "COMMIT", "commitIndex": "-1",
            "firstEntryIndex": "-1", "count": "0"}


def snapshot_ext(group: str, sender: str, term: int) -> dict:
    return {"group": group, "leaderId": sender, "term": str(term), "index": "0", "snapTerm": "0", "size": "1",
            "crc": "0", "offset": "0", "dataLength": "0"}


def hostile_frames(rng: random.Random, group: str, members: list[str], n: int) -> list[bytes]:
    """``n`` frames, each refused by any node of ``group`` (whose members are ``members``)."""
    out = []
    kinds = [_spoiled_field, _missing_field, _deep, _foreign, _client]
    while len(out) < n:
        out.append(rng.choice(kinds)(rng, group, rng.choice(members)))
    return out


def _spoiled_field(rng, group, sender) -> bytes:
    bad = rng.choice(BAD_NUMBERS)
    pick = rng.random()
    if pick < 0.2:  # a push's scalars travel in extFields, as strings
        ext = push_ext(group, sender, 1)
        field = rng.choice(["term", "commitIndex", "firstEntryIndex", "count", "beginIndex", "configAt"])
        ext[field] = rng.choice([str(I64) if field == "term" else str(I64 + 1), str(I64 + 1), "1" * 30, "-2",
                                 "1_0", " 3", "x", "9" * 5000])
        return frame(PUSH, b"", ext, opaque=rng.randrange(1 << 31))
    if pick < 0.3:
        ext = snapshot_ext(group, sender, 1)
        ext[rng.choice(list(ext)[2:])] = rng.choice([str(I64 + 1), "1e3", str(1 << 70), "0x10"])
        return frame(INSTALL_SNAPSHOT, b"", ext, opaque=rng.randrange(1 << 31))
    code, body = rng.choice(list(peer_requests(group, sender, 1).items()))
    numeric = [k for k, v in body.items() if isinstance(v, int) and not isinstance(v, bool)]
    field = rng.choice(numeric)
    body[field] = bad if bad != I64 or field.lower().endswith("term") else I64 + 1  # (an index may be I64)
    return frame(code, _body(body), opaque=rng.randrange(1 << 31), language=rng.choice(["PYTHON", "JAVA"]))


def _missing_field(rng, group, sender) -> bytes:
    code, body = rng.choice(list(peer_requests(group, sender, 1).items()))
    body.pop(rng.choice([k for k in body if k != "preVote"]))
    return frame(code, _body(body), language=rng.choice(["PYTHON", "JAVA"]))


def _deep(rng, group, sender) -> bytes:
    depth = rng.choice([33, 200, DEEP, 5 * DEEP])
    if rng.random() < 0.4:  # in the header: an unknown key (skipped by a parser, recursively) or extFields
        key = rng.choice(["x", "extFields", "remark"])
        header = ('{"code":%d,"flag":0,"opaque":3,"%s":%s}' % (HEART_BEAT, key, nested(depth))).encode()
        return frame(HEART_BEAT, header=header)
    code = rng.choice([VOTE, HEART_BEAT, GET, METADATA, APPEND, FORCE_COMPARE, QUERY, CHANGE_MEMBERS])
    body = ('{"group":"%s","leaderId":"%s","term":1,"deep":%s}' % (group, sender, nested(depth))).encode()
    ext = {"group": group, "count": "1"} if code == APPEND and rng.random() < 0.5 else None
    return frame(code, body, ext)


def _foreign(rng, group, sender) -> bytes:
    """Another group, or a sender that is no member: refused before anything is learnt (a
    Java header included)."""
    code, body = rng.choice(list(peer_requests(group, sender, 1).items()))
    if rng.random() < 0.5:
        body["group"] = group + "-other"
    else:
        body["leaderId"] = "intruder"
    return frame(code, _body(body), language="JAVA")


def _client(rng, group, sender) -> bytes:
    pick = rng.random()
    if pick < 0.25:
        return frame(GET, _body({"group": group, "index": rng.choice(BAD_NUMBERS), "count": 1}))
    if pick < 0.4:
        return frame(GET, _body({"group": group, "index": 0, "count": rng.choice(BAD_NUMBERS)}))
    if pick < 0.5:  # DLedger's own form
        return frame(GET, _body({"group": group + "-other", "beginIndex": 0, "remoteId": sender}), language="JAVA")
    if pick < 0.6:
        return frame(METADATA, _body({"group": group + "-other"}))
    if pick < 0.75:  # bodies that do not add up to the count
        count = rng.choice(["0", "-1", "2", str(1 << 40), "x"])
        return frame(APPEND, struct.pack(">i", 3) + b"abcd", {"group": group, "count": count})
    if pick < 0.85:
        bad = rng.choice([v for v in BAD_NUMBERS if v != I64])  # (a cut from I64 on would be a harmless request)
        return frame(FORCE_TRUNCATE, _body({"group": group, "peer": sender, "fromIndex": bad}))
    return frame(CHANGE_MEMBERS, _body({"group": group, "kind": rng.choice(["evict", 7, None]), "id": "n9"}))


def send_all(host: str, port: int, frames: list[bytes], timeout: float = 5.0) -> dict[str, int]:
    """Send ``frames`` on one connection at a time (a new one after the node closes one) and
    read every answer: counts of ``answered`` and ``closed`` (the node closed the connection
    instead: a bad header)."""
    counts = {"answered": 0, "closed": 0}
    sock = None
    try:
        for data in frames:
            if sock is None:
                sock = socket.create_connection((host, port), timeout=timeout)
                receiver = FrameReceiver()
            try:
                sock.sendall(data)
                got = []
                while not got:
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        raise ConnectionError("closed")
                    got = receiver.feed(chunk)
                counts["answered"] += 1
            except (ConnectionError, OSError):
                counts["closed"] += 1
                sock.close()
                sock = None
    finally:
        if sock is not None:
            sock.close()
    return counts
