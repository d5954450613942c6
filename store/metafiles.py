"""The ``checkpoint`` and ``currterm`` files: small Java-properties texts.

DLedger writes them with ``IOUtils.string2File``: the new text goes to ``<name>.tmp``, the
previous content is copied to ``<name>.bak``, then the tmp file is renamed over the main
one. We do the same, and fsync the tmp file and the directory so a crash leaves either the
old or the new content. Readers fall back to ``.bak`` when the main file is missing or
unreadable.

Key names are DLedger's: ``DLedgerMmapFileStore.END_INDEX_KEY`` / ``COMMITTED_INDEX_KEY``,
``MemberState.TERM_PERSIST_KEY_TERM`` / ``TERM_PERSIST_KEY_VOTE_FOR``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import StoreCorruptError, StoreIOError
from .format import TERM_MAX
from .regular import UnreadableFile, read_regular

CHECKPOINT_FILE = "checkpoint"  # DLedgerMmapFileStore.CHECK_POINT_FILE
CURRTERM_FILE = "currterm"  # MemberState.TERM_PERSIST_FILE
END_INDEX_KEY = "endIndex"
COMMITTED_INDEX_KEY = "committedIndex"
TERM_KEY = "currTerm"
VOTE_KEY = "voteLeader"
MAX_PROPERTIES_BYTES = 64 << 10  # a few lines of key=value: a larger file is no checkpoint or currterm


def parse_properties(text: str) -> dict[str, str]:
    """The subset of java.util.Properties syntax these files use: comments, ``=``/``:``."""
    props: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            parts = line.split(None, 1)
            key, value = parts[0], parts[1] if len(parts) > 1 else ""
        else:
            key, value = line[:cut].strip(), line[cut + 1 :].strip()
        props[key] = value
    return props


def format_properties(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{k}={v}\n" for k, v in pairs)


@dataclass
class PropertiesFile:
    path: str
    source: str | None  # which file the values came from: the main file, the .bak, or None
    props: dict[str, str]
    problem: str | None = None  # why the main file was not used, if it was not

    def int_value(self, key: str) -> int | None:
        value = self.props.get(key, "").strip()
        if not value:
            return None
        try:
            return int(value)
        except ValueError:
            raise StoreCorruptError(f"{self.source}: {key}={value!r} is not an integer") from None


def read_properties(path: str, *, bak_only: bool = False) -> PropertiesFile:
    problem = None
    for candidate in (path + ".bak",) if bak_only else (path, path + ".bak"):
        try:
            # (a FIFO or a device in its place is refused, never waited on or read without end)
            text = read_regular(candidate, MAX_PROPERTIES_BYTES).decode("utf-8")
        except FileNotFoundError:
            problem = problem or f"{os.path.basename(candidate)} is missing"
            continue
        except (OSError, UnicodeDecodeError, UnreadableFile) as exc:
            problem = problem or f"{os.path.basename(candidate)} is unreadable: {exc}"
            continue
        return PropertiesFile(path, candidate, parse_properties(text), problem if candidate != path else None)
    return PropertiesFile(path, None, {}, problem)


def write_properties(path: str, pairs: list[tuple[str, str]]) -> None:
    """Atomically replace ``path`` (tmp, fsync, previous content to .bak, rename, fsync dir)."""
    replace_file(path, format_properties(pairs).encode("utf-8"))


def replace_file(path: str, text: bytes) -> None:
    """Atomically replace ``path`` with ``text``: written to a .tmp and fsynced, the previous
    content kept in .bak, renamed into place, the directory fsynced. StoreIOError if not."""
    tmp, bak = path + ".tmp", path + ".bak"
    directory = os.path.dirname(path) or "."
    try:
        _write_synced(tmp, text)
        try:
            previous = read_regular(path, MAX_PROPERTIES_BYTES)
        except (FileNotFoundError, UnreadableFile):  # (nothing sound to keep as the .bak)
            previous = None
        if previous is not None:
            _write_synced(bak, previous)
        os.replace(tmp, path)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise StoreIOError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _write_synced(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class Checkpoint:
    end_index: int | None
    committed_index: int | None
    source: str | None
    problem: str | None = None


def _read_valid(path: str, parse):
    """``parse(read_properties(path))``; when the main file is readable but its values are
    not (a torn or hand-edited file), the ``.bak`` instead, with the problem noted. Raises
    StoreCorruptError only when neither file holds valid values."""
    pf = read_properties(path)
    try:
        return parse(pf, pf.problem)
    except StoreCorruptError as exc:
        if pf.source != path:
            raise
        bak = read_properties(path, bak_only=True)
        if bak.source is None:
            raise
        try:
            return parse(bak, str(exc))
        except StoreCorruptError:
            raise exc from None


def read_checkpoint(node_dir: str) -> Checkpoint:
    return _read_valid(
        os.path.join(node_dir, CHECKPOINT_FILE),
        lambda pf, problem: Checkpoint(pf.int_value(END_INDEX_KEY), pf.int_value(COMMITTED_INDEX_KEY),
                                       pf.source, problem),
    )


def write_checkpoint(node_dir: str, end_index: int, committed_index: int) -> None:
    # Same key order as DLedger's Hashtable-backed Properties prints them.
    write_properties(
        os.path.join(node_dir, CHECKPOINT_FILE),
        [(COMMITTED_INDEX_KEY, str(committed_index)), (END_INDEX_KEY, str(end_index))],
    )


@dataclass
class TermState:
    term: int
    vote_for: str | None  # None when the node has not voted in this term
    source: str | None
    problem: str | None = None


def read_currterm(node_dir: str) -> TermState:
    """The term and vote on disk. StoreCorruptError naming the file when neither it nor its
    .bak holds valid values, or when the term is outside 0..TERM_MAX: a node cannot run in a
    term it could not leave (the next election's term would not fit the log format), and
    an older term from the .bak could let it vote twice, so it is not used instead."""
    def parse(pf, problem):
        term = pf.int_value(TERM_KEY)
        vote = pf.props.get(VOTE_KEY, "").strip() or None
        return TermState(term if term is not None else 0, vote, pf.source, problem)

    ts = _read_valid(os.path.join(node_dir, CURRTERM_FILE), parse)
    if not 0 <= ts.term <= TERM_MAX:
        raise StoreCorruptError(f"{ts.source}: {TERM_KEY}={ts.term} is outside 0..{TERM_MAX} (no election could "
                                f"follow it)")
    return ts


def write_currterm(node_dir: str, term: int, vote_for: str | None) -> None:
    write_properties(
        os.path.join(node_dir, CURRTERM_FILE),
        [(VOTE_KEY, vote_for or ""), (TERM_KEY, str(term))],
    )
