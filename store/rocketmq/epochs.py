"""A controller-mode broker's epoch file and identity, and the rules its replicas' handshakes
follow (RocketMQ 5's ``store/.../ha/autoswitch``), as pure functions over what the files say.

The epoch file (``<storePathRootDir>/epochFileCheckpoint``, ``.bak`` beside it), written by
``common/.../utils/CheckpointFile``: a line with the number of entries, a line with the CRC32
(masked 0x7fffffff, ``UtilAll.crc32``) of every line after the two, each with its line end,
then one ``epoch-startOffset`` line per master epoch whose data the replica holds
(``EpochFileCache.EpochEntrySerializer``). ``CheckpointFile.read`` takes the main file, and the
``.bak`` when the main file is missing, holds no entry, or fails its count or CRC (an
IOException). A header or entry that is not a number (Java's NumberFormatException, which is
no IOException) is not caught there: the store cannot load its epochs at all.

Each epoch ends where the next begins; the last one ends at the replica's max offset
(``setLastEpochEntryEndOffset``). A slave's first handshake compares its epochs with its
master's (``AutoSwitchHAClient.doTruncate``): with no epochs it takes itself for a new
replica and truncates nothing; otherwise ``findConsistentPoint``, from its newest epoch down,
takes the first epoch both hold with the same start offset and ends at the smaller of the two
end offsets; the slave truncates its log there (-1: no such epoch, and it refuses to go on).
A new master (``AutoSwitchHAService.changeToMaster``) drops its epochs at or above the new
one and appends the new epoch at its max offset.

The identity (``<storePathRootDir>/brokerIdentity``, ``MessageStoreConfig
.getStorePathBrokerIdentity``) is ``cluster#broker#id`` (``BrokerMetadata``); ``-temp`` beside
it, written while the broker registers, adds ``#registerCheckCode`` (``TempBrokerMetadata``).
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from typing import NamedTuple

from ..regular import UnreadableFile, read_regular

EPOCH_FILE = "epochFileCheckpoint"  # MessageStoreConfig.getStorePathEpochFile: storePathRootDir/epochFileCheckpoint
BACKUP_SUFFIX = ".bak"  # CheckpointFile.getBackFilePath
IDENTITY_FILE = "brokerIdentity"  # MessageStoreConfig.getStorePathBrokerIdentity
TEMP_SUFFIX = "-temp"  # ReplicasManager: the temp metadata beside the identity
FILE_LIMIT = 64 << 20  # bytes: an epoch file holds a line per master epoch (tens of bytes each)
LONG_MAX = (1 << 63) - 1  # EpochEntry's endOffset until it is set (Long.MAX_VALUE)
INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
# The epoch ``mq migrate --controller-mode`` gives every replica of a group moved into controller
# mode: below the first masterEpoch a controller gives a new broker set (1: ReplicasInfoManager's
# electMaster counts up from 0), so that the first master keeps it and appends its own epoch
# after it, and each slave's first handshake finds it in common (the same start, the log's
# first offset) and keeps its log to its end. An epoch file with epoch 1 would be replaced on
# the first master (changeToMaster drops epochs at or above its own), leaving the slaves no
# consistent point; none at all would have them taken for new replicas, which a slave behind
# the master never recovers from (tests/java/test_rocketmq5_ha_java.py).
CONTROLLER_ENTRY_EPOCH = 0
LONG_MIN = -(1 << 63)
_JAVA_INT = re.compile(r"[+-]?[0-9]+\Z")  # (ASCII digits: what Integer.parseInt reads here, sign included)


class EpochFileError(Exception):
    """The file cannot be read as CheckpointFile reads it (``fatal``: not even by falling back
    to the .bak: RocketMQ's store does not load)."""

    def __init__(self, text: str, fatal: bool = False) -> None:
        super().__init__(text)
        self.fatal = fatal


class EpochEntry(NamedTuple):  # remoting/.../protocol/EpochEntry: epoch, startOffset
    epoch: int
    start_offset: int


def _java_number(text: str, lo: int, hi: int, what: str) -> int:
    if not _JAVA_INT.match(text) or not lo <= int(text) <= hi:
        raise EpochFileError(f"{what} {text[:30]!r} is not a number Java reads (NumberFormatException)", fatal=True)
    return int(text)


def _lines(text: str) -> list[str]:
    """The lines BufferedReader.readLine gives (a line ends at \\n, \\r or \\r\\n)."""
    out = re.split(r"\r\n|\r|\n", text)
    if out and out[-1] == "":
        out.pop()  # (text ending in a line end: no empty line after it)
    return out


def parse_epoch_file(text: str) -> list[EpochEntry]:
    """CheckpointFile.read of one file: its entries, or EpochFileError saying what is wrong
    (``fatal`` where Java raises a NumberFormatException rather than an IOException)."""
    lines = _lines(text)
    if len(lines) < 2:
        # (readLine gives null: Integer.parseInt(null) is a NumberFormatException too)
        raise EpochFileError("shorter than its two header lines", fatal=True)
    expected = _java_number(lines[0], INT_MIN, INT_MAX, "entry count")
    crc = _java_number(lines[1], INT_MIN, INT_MAX, "CRC")
    out = []
    for line in lines[2:]:
        parts = line.split("-")  # (EpochEntrySerializer.fromLine: a line of another shape is skipped)
        parts = parts if parts[-1:] != [""] else parts[:-1]  # (Java's split drops trailing empty strings)
        while parts and parts[-1] == "":
            parts.pop()
        if len(parts) == 2:
            out.append(EpochEntry(_java_number(parts[0], INT_MIN, INT_MAX, "epoch"),
                                  _java_number(parts[1], LONG_MIN, LONG_MAX, "start offset")))
    truth = zlib.crc32("".join(line + "\n" for line in lines[2:]).encode("utf-8")) & 0x7FFFFFFF
    if len(out) != expected:
        raise EpochFileError(f"says {expected} entries, holds {len(out)}")
    if crc != 0 and crc != truth:  # (0: CheckpointFile.NOT_CHECK_CRC_MAGIC_CODE)
        raise EpochFileError(f"CRC32 of its entries is {truth}, the file says {crc}")
    return out


def epoch_file_text(entries: list[EpochEntry]) -> str:
    """The file CheckpointFile.write makes of ``entries`` (with Unix line ends)."""
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries)
    return f"{len(entries)}\n{zlib.crc32(body.encode('utf-8')) & 0x7FFFFFFF}\n{body}"


@dataclass
class EpochRead:
    """What a broker's store would load: ``entries`` from ``source`` (a path, or None when
    neither file holds any: a new replica), and what was wrong with each file it looked at."""

    entries: list[EpochEntry]
    source: str | None
    problems: list[str] = field(default_factory=list)


def read_epochs(store: str) -> EpochRead:
    """CheckpointFile.read of a broker's epoch file (``store``: the store root, or the file):
    the main file, else its .bak (when the main file is missing, empty or fails its count or
    CRC). EpochFileError (fatal) when RocketMQ's own read would throw: a number Java cannot
    parse, in whichever file it reads last. A FIFO or a device is never opened for reading:
    it counts as a file that fails."""
    path = os.path.join(store, EPOCH_FILE) if os.path.isdir(store) else store
    problems: list[str] = []
    for p in (path, path + BACKUP_SUFFIX):
        try:
            got = parse_epoch_file(read_regular(p, FILE_LIMIT).decode("utf-8"))
        except FileNotFoundError:
            problems.append(f"{p}: no such file")  # (CheckpointFile.read: a missing file reads as no entries)
            continue
        except UnreadableFile as exc:
            problems.append(str(exc))
            continue
        except UnicodeDecodeError as exc:
            problems.append(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})")
            continue
        except EpochFileError as exc:
            if exc.fatal:
                raise EpochFileError(f"{p}: {exc}: RocketMQ's store cannot load its epochs "
                                     f"({'; '.join(problems + [''])}the .bak is not read after this)", fatal=True)
            problems.append(f"{p}: {exc}")
            continue
        except OSError as exc:
            problems.append(f"{p}: {exc.strerror or exc}")
            continue
        if got:
            return EpochRead(got, p, problems)
        problems.append(f"{p}: no entries")
    return EpochRead([], None, problems)


# -- the rules of EpochFileCache, over lists of entries ------------------------------------------

@dataclass(frozen=True)
class Span:
    """An epoch with its end: the next epoch's start, or the replica's max offset for the last."""

    epoch: int
    start: int
    end: int


def spans(entries: list[EpochEntry], max_offset: int | None) -> list[Span]:
    """EpochFileCache.initEntries, then setLastEpochEntryEndOffset(``max_offset``), which leaves
    the last end at Long.MAX_VALUE when ``max_offset`` is None or below its start. In epoch
    order (a TreeMap: a repeated epoch keeps its later line); each line's end is the start of
    the line after it in the file."""
    live: dict[int, list[int]] = {}
    prev: list[int] | None = None
    for e in entries:
        cell = [e.start_offset, LONG_MAX]
        live[e.epoch] = cell
        if prev is not None:
            prev[1] = e.start_offset
        prev = cell
    out = [Span(k, live[k][0], live[k][1]) for k in sorted(live)]
    if out and max_offset is not None and out[-1].start <= max_offset:
        out[-1] = Span(out[-1].epoch, out[-1].start, max_offset)
    return out


def consistent_point(local: list[Span], master: list[Span]) -> int:
    """EpochFileCache.findConsistentPoint: from the local newest epoch down, the first one the
    master holds with the same start offset, ending at the smaller end; -1 when none."""
    theirs = {s.epoch: s for s in master}
    for s in sorted(local, key=lambda x: x.epoch, reverse=True):
        m = theirs.get(s.epoch)
        if m is not None and m.start == s.start:
            return min(s.end, m.end)
    return -1


def as_master(entries: list[EpochEntry], epoch: int, max_offset: int) -> list[EpochEntry] | None:
    """The epochs after changeToMaster(``epoch``) at ``max_offset`` (its truncateInvalidMsg
    aside); None when RocketMQ refuses (``epoch`` below the last epoch held)."""
    last = max((e.epoch for e in entries), default=-1)
    if epoch < last:
        return None
    kept = [e for e in entries if e.epoch < epoch]
    if kept and (kept[-1].start_offset >= max_offset):
        return kept  # (appendEntry refuses an entry that does not start past the last one)
    return kept + [EpochEntry(epoch, max_offset)]


def handshake(local: list[EpochEntry], local_max: int, master: list[EpochEntry], master_max: int) -> int | None:
    """Where a slave's first handshake with this master truncates its log (doTruncate): None
    when it has no epochs (a new replica: nothing truncated, it reports offset 0), -1 when
    there is no consistent point (it refuses), else the offset."""
    if not local:
        return None
    return consistent_point(spans(local, local_max), spans(master, master_max))


# -- identity ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identity:
    cluster: str
    broker: str
    broker_id: int | None
    register_check_code: str | None  # the -temp file's only
    path: str
    problem: str = ""


def read_identity(store: str) -> list[Identity]:
    """The broker's identity files (``brokerIdentity`` and ``brokerIdentity-temp``) that exist,
    decoded as BrokerMetadata / TempBrokerMetadata decode them; a file they cannot decode is
    one with ``problem`` set."""
    out = []
    base = os.path.join(store, IDENTITY_FILE)
    for path, temp in ((base, False), (base + TEMP_SUFFIX, True)):
        try:
            text = read_regular(path, 1 << 16).decode("utf-8")
        except FileNotFoundError:
            continue
        except (UnreadableFile, UnicodeDecodeError, OSError) as exc:
            out.append(Identity("", "", None, None, path, f"unreadable: {exc}"))
            continue
        parts = text.split("#")
        while parts and parts[-1] == "":
            parts.pop()
        want = 4 if temp else 3
        if len(parts) < want:
            out.append(Identity("", "", None, None, path, f"{text[:60]!r} is not cluster#broker#id"
                                + ("#checkCode" if temp else "")))
            continue
        try:
            bid = int(parts[2].strip()) if re.fullmatch(r"\s*[+-]?[0-9]+\s*", parts[2]) else None
        except ValueError:
            bid = None
        out.append(Identity(parts[0], parts[1], bid, parts[3] if temp else None, path,
                            "" if bid is not None else f"broker id {parts[2][:20]!r} is not a number"))
    return out
