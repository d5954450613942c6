"""The DLedger 0.2.7 reference stores, writable copies of them, stores written by the
project, and byte-level snapshots of a node directory (shared by the store, cli, spark and
java tests).

Nothing here parses through the store's own decoder (``store.scan``): tests that check the
store against the on-disk format use the plain ``struct``/``int.from_bytes`` readers below,
so a bug in the store's parser cannot hide itself.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import stat
import zlib
from dataclasses import dataclass

from store.filestore import FileStore
from store.format import HEADER_SIZE, MAGIC_CONFIG, MAGIC_NOOP, file_name

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "dledger-0.2.7")

# folder -> (node dir, data file size, index file size), as the fixtures' README lists them
FIXTURE_STORES = {
    "leader": ("dledger-n0", 65536, 4096),
    "follower-truncated": ("dledger-n1", 32768, 2048),
}
FIXTURE_NAMES = sorted(FIXTURE_STORES)


def fixture_path(name: str) -> str:
    """The read-only original node directory of a reference store."""
    return os.path.join(FIXTURES, name, FIXTURE_STORES[name][0])


def copy_fixture(tmp_path, name="leader", node=None):
    """A writable copy of a reference node directory (the originals are read-only)."""
    node = node or FIXTURE_STORES[name][0]
    dst = tmp_path / name / node
    shutil.copytree(os.path.join(FIXTURES, name, node), dst)
    for root, dirs, files in os.walk(dst):
        for n in dirs + files:
            p = os.path.join(root, n)
            os.chmod(p, os.stat(p).st_mode | stat.S_IWUSR)
    os.chmod(dst, os.stat(dst).st_mode | stat.S_IWUSR)
    return dst



def read_manifest(name: str) -> list[str]:
    with open(os.path.join(FIXTURES, name, "manifest.txt")) as fh:
        return [line for line in fh.read().split("\n") if line]


def describe(store) -> list[str]:
    """A store rendered the way DLedger printed the fixtures' manifest.txt."""
    head = (f"END {store.end_index} {store.end_term} BEGIN {store.begin_index} "
            f"COMMITTED {store.committed_index}")
    rows = [f"{e.index} {e.term} {e.pos} {e.size} {hashlib.sha256(e.body).hexdigest()}" for e in store.entries()]
    return [head] + rows


def file_digests(node, subdirs=("data", "index")) -> dict[str, str]:
    """sha256 of every file under the given subdirectories, by relative path."""
    out = {}
    for sub in subdirs:
        base = os.path.join(node, sub)
        if not os.path.isdir(base):
            continue
        for root, _dirs, files in os.walk(base):
            for n in files:
                p = os.path.join(root, n)
                with open(p, "rb") as fh:
                    out[os.path.relpath(p, node)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def all_digests(node) -> dict[str, str]:
    """sha256 of every file in a node directory, including checkpoint/currterm and .bak files."""
    out = {}
    for root, _dirs, files in os.walk(node):
        for n in files:
            p = os.path.join(root, n)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, node)] = hashlib.sha256(fh.read()).hexdigest()
    return out


# --- independent readers of the on-disk format (DESIGN.md section 2) ------------------------

def be_int(buf, off, width):
    return int.from_bytes(buf[off:off + width], "big", signed=True)


def parse_header(buf, off=0) -> dict:
    """An entry header read field by field at DESIGN.md's offsets."""
    return {
        "magic": be_int(buf, off + 0, 4), "size": be_int(buf, off + 4, 4), "index": be_int(buf, off + 8, 8),
        "term": be_int(buf, off + 16, 8), "pos": be_int(buf, off + 24, 8), "channel": be_int(buf, off + 32, 4),
        "chain_crc": be_int(buf, off + 36, 4), "body_crc": be_int(buf, off + 40, 4),
        "body_size": be_int(buf, off + 44, 4),
    }


def parse_index_record(buf, off=0) -> tuple[int, int, int, int, int]:
    """(magic, pos, size, index, term) of a 32-byte index record."""
    return (be_int(buf, off, 4), be_int(buf, off + 4, 8), be_int(buf, off + 12, 4), be_int(buf, off + 16, 8),
            be_int(buf, off + 24, 8))


def store_files(node, sub) -> list[tuple[int, str]]:
    """(start offset, path) of the 20-digit-named files in data/ or index/, sorted."""
    d = os.path.join(node, sub)
    out = []
    for n in os.listdir(d):
        if len(n) == 20 and n.isascii() and n.isdigit() and os.path.isfile(os.path.join(d, n)):
            out.append((int(n), os.path.join(d, n)))
    return sorted(out)


def read_logical(node, sub, offset, size, file_size) -> bytes:
    """``size`` bytes at logical ``offset`` of data/ or index/ (never across a file end)."""
    start = offset - offset % file_size
    with open(os.path.join(node, sub, f"{start:020d}"), "rb") as fh:
        fh.seek(offset - start)
        return fh.read(size)


def nonzero_after(node, sub, offset) -> list[tuple[str, int]]:
    """(file name, relative offset) of the first non-zero byte at or after logical ``offset``
    in each file of data/ or index/ that has one."""
    hits = []
    for start, path in store_files(node, sub):
        with open(path, "rb") as fh:
            buf = fh.read()
        lo = max(0, offset - start)
        if lo >= len(buf):
            continue
        stripped = buf[lo:].lstrip(b"\0")
        if stripped:
            hits.append((os.path.basename(path), len(buf) - len(stripped)))
    return hits


def patch(path, offset, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(data)


# --- stores written by the project -------------------------------------------------------

def sample_bodies(count: int, seed: int = 1, max_size: int = 700) -> list[bytes]:
    """Deterministic bodies; every seventh is empty."""
    rng = random.Random(seed)
    return [b"" if i % 7 == 5 else rng.randbytes(rng.randrange(1, max_size)) for i in range(count)]


def write_project_store(node, *, count=80, terms=(1, 1, 2, 3), data_file_size=4096, index_file_size=256,
                        seed=1, max_size=700, noop_at=None, committed=None, with_crc=True,
                        flush="async", config_at=None) -> list[bytes]:
    """Write ``count`` entries with FileStore (terms cycle through ``terms`` in blocks, and
    never go down), optionally a no-op (magic 2) at index ``noop_at`` and a config entry
    (magic 3, a member list) at ``config_at``; returns every entry's raw bytes as read back
    before closing."""
    bodies = sample_bodies(count, seed, max_size)
    block = max(1, -(-count // len(terms)))
    with FileStore.open(str(node), data_file_size=data_file_size, index_file_size=index_file_size,
                        with_crc=with_crc, flush=flush) as s:
        for i, body in enumerate(bodies):
            term = sorted(terms)[min(i // block, len(terms) - 1)]
            if i == noop_at:
                s.append(body, term, magic=MAGIC_NOOP)
            elif i == config_at:
                s.append(b'{"voters":"n0-127.0.0.1:20911;n1-127.0.0.1:20912;n2-127.0.0.1:20913","learners":""}',
                         term, magic=MAGIC_CONFIG)
            else:
                s.append_leader([body], term)
        s.set_committed(count - 1 if committed is None else committed)
        raw = [s.get_bytes(i) for i in range(count)]
    return raw


def damaged_store(node: str, entries: int = 302, committed: int = 301, at: int = 100,
                  file_size: int = 1 << 16, where: str = "body") -> None:
    """A store of ``entries`` committed up to ``committed``, with one byte of entry ``at``
    changed on disk; data files of ``file_size`` bytes. ``where``: "body" (its CRC fails:
    recovery holds it unless it is a damaged tail past the committed index) or "magic" (no
    entry parses there: recovery ends the log at it)."""
    with FileStore.open(node, data_file_size=file_size, index_file_size=1 << 14) as s:
        s.append_leader([b"body-%03d" % i for i in range(entries)], 1)
        s.set_committed(committed)
        pos, _size = s.locate(at)
    path = os.path.join(node, "data", sorted(os.listdir(os.path.join(node, "data")))[pos // file_size])
    at_byte = pos % file_size + (HEADER_SIZE + 2 if where == "body" else 3)
    with open(path, "r+b") as fh:
        fh.seek(at_byte)
        b = fh.read(1)
        fh.seek(at_byte)
        fh.write(bytes([b[0] ^ 0xFF]))


@dataclass
class Base:
    """A store before damage: its node dir, file sizes and every entry's raw bytes."""

    node: object
    dsize: int
    isize: int
    raw: list
    end_pos: int
    committed: int
    with_crc: bool

    @property
    def n(self):
        return len(self.raw)

    def pos(self, i):
        return parse_header(self.raw[i])["pos"]

    def data_file(self, pos):
        return self.node / "data" / file_name(pos - pos % self.dsize)

    def index_file(self, i):
        off = i * 32
        return self.node / "index" / file_name(off - off % self.isize)

    def window_files(self):
        """Start offsets of the data files recovery walks (the last three)."""
        return [s for s, _ in store_files(self.node, "data")][-3:]

    def first_in_file(self, start):
        return next(i for i in range(self.n) if self.pos(i) >= start)


def make_base(tmp_path, kind) -> Base:
    if kind == "project":
        node = tmp_path / "p" / "dledger-n0"
        raw = write_project_store(node, count=83, data_file_size=4096, index_file_size=256, committed=70)
        dsize, isize = 4096, 256
    else:
        node = copy_fixture(tmp_path, kind)
        _n, dsize, isize = FIXTURE_STORES[kind]
        raw = None
    with FileStore.open(str(node), read_only=True) as s:
        raw = [s.get_bytes(i) for i in range(s.end_index + 1)]
        end_pos, committed = s.write_pos, s.committed_index
    return Base(node, dsize, isize, raw, end_pos, committed, kind == "project")


def file_crcs(root) -> dict:
    """The crc32 of every file under ``root``, by relative path (to see a tree left as it was)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            with open(os.path.join(d, f), "rb") as fh:
                out[os.path.relpath(os.path.join(d, f), root)] = zlib.crc32(fh.read())
    return out
