"""A broker's own configuration file, read for the settings that shape its store's files.

RocketMQ's broker reads its settings from a Java properties file (``BrokerStartup -c FILE``;
without ``-c`` it keeps them in ``<user.home>/store/config/broker.properties``,
``BrokerPathConfigHelper``, which is ``config/broker.properties`` of a store root in its
default place) and sets each one with ``MixAll.properties2Object``: the setter named for the
key, given ``Integer.parseInt`` of the value for an int setting; a value that does not parse
is skipped (the default stays), silently. ``MessageStoreConfig.getMappedFileSizeConsumeQueue``
then rounds the consume-queue file size up to a whole number of 20-byte units
(``ceil(size / 20.0) * 20``, in Java int arithmetic). RocketMQ refuses, at start, queue files
of another length than that (``MappedFileQueue.load``: "length not matched message store
config value").

Rules kept here: only read; the properties text is read as ``java.util.Properties.load``
reads it (ISO-8859-1, ``#``/``!`` comments, ``=``, ``:`` or blanks between key and value, a
backslash at a line's end joins the next, ``\\uXXXX`` and the other escapes), from a regular
file of at most :data:`MAX_BYTES`; a file that cannot be read is a :class:`BrokerConfError`.
"""

from __future__ import annotations

import math
import os
import re
import stat
from dataclasses import dataclass

from ..errors import StoreUsageError
from .consumequeue import CQ_FILE_SIZE, CQ_STORE_UNIT_SIZE

CONFIG_DIR = "config"  # BrokerPathConfigHelper.getConfigDir's folder under the store root
BROKER_PROPERTIES = "broker.properties"  # BrokerPathConfigHelper's default broker config file name
KEY_CQ_FILE_SIZE = "mappedFileSizeConsumeQueue"  # MessageStoreConfig.mappedFileSizeConsumeQueue
MAX_BYTES = 1 << 20  # a broker's settings file is a few KB


class BrokerConfError(StoreUsageError):
    """The broker's configuration file cannot be read or gives a size the broker cannot use."""


@dataclass(frozen=True)
class QueueFileSize:
    """The consume-queue file size a broker's configuration gives: ``size`` (None: the file
    does not set it, or sets it to what the broker skips, and the broker uses its default),
    ``path`` (the file read) and ``note`` (what to tell the operator, or None)."""

    size: int | None
    path: str
    note: str | None = None


def default_conf(root: str) -> str | None:
    """``root/config/broker.properties`` when it is a regular file (where a broker started
    without ``-c`` keeps its settings), else None."""
    path = os.path.join(root, CONFIG_DIR, BROKER_PROPERTIES)
    try:
        return path if stat.S_ISREG(os.stat(path).st_mode) else None
    except OSError:
        return None


def read_properties(path: str) -> dict[str, str]:
    """The properties of the file ``path`` as ``java.util.Properties.load`` reads them (the
    last of a key wins). BrokerConfError when it is not a regular file, larger than
    :data:`MAX_BYTES`, or cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # (a FIFO: opened without waiting, then refused)
    except OSError as exc:
        raise BrokerConfError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BrokerConfError(f"{path}: not a regular file: give the broker's configuration file")
        if st.st_size > MAX_BYTES:
            raise BrokerConfError(f"{path}: {st.st_size} bytes, more than a broker's configuration file holds "
                                  f"(at most {MAX_BYTES} read)")
        chunks, left = [], MAX_BYTES + 1
        while left > 0:
            b = os.read(fd, min(left, 1 << 16))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
    except OSError as exc:
        raise BrokerConfError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    raw = b"".join(chunks)
    if len(raw) > MAX_BYTES:
        raise BrokerConfError(f"{path}: more than {MAX_BYTES} bytes: not a broker's configuration file")
    try:
        return parse_properties(raw.decode("latin-1"))
    except BrokerConfError as exc:
        raise BrokerConfError(f"{path}: {exc}") from None


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """``Properties.load`` of ``text`` (its LineReader and load0): a natural line's leading
    blanks are skipped, blank and comment lines (``#`` or ``!`` first) too; a line whose end
    has an odd run of backslashes goes on in the next, whose leading blanks are dropped; the
    key ends at the first unescaped ``=``, ``:`` or blank, then blanks and at most one ``=``
    or ``:`` are skipped; escapes are read in key and value (a malformed ``\\u`` makes Java
    refuse the file: BrokerConfError)."""
    out: dict[str, str] = {}
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    while i < len(lines):
        line = lines[i].lstrip(" \t\f")
        i += 1
        if not line or line[0] in "#!":
            continue
        while _continued(line):
            line = line[:-1]
            if i >= len(lines):
                break
            line += lines[i].lstrip(" \t\f")
            i += 1
        key_len, value_start, has_sep, escaped = 0, len(line), False, False
        while key_len < len(line):
            c = line[key_len]
            if c in "=:" and not escaped:
                value_start, has_sep = key_len + 1, True
                break
            if c in " \t\f" and not escaped:
                value_start = key_len + 1
                break
            escaped = not escaped if c == "\\" else False
            key_len += 1
        while value_start < len(line):
            c = line[value_start]
            if c not in " \t\f":
                if not has_sep and c in "=:":
                    has_sep = True
                else:
                    break
            value_start += 1
        out[_unescape(line[:key_len])] = _unescape(line[value_start:])
    return out


def _continued(line: str) -> bool:
    """An odd run of backslashes at the end: the line goes on in the next."""
    return (len(line) - len(line.rstrip("\\"))) % 2 == 1


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, k = [], 0
    while k < len(s):
        c = s[k]
        if c != "\\" or k + 1 >= len(s):
            if c != "\\":
                out.append(c)
            k += 1
            continue
        c = s[k + 1]
        if c == "u":
            hexa = s[k + 2:k + 6]
            if len(hexa) < 4 or not all(h in "0123456789abcdefABCDEF" for h in hexa):
                raise BrokerConfError(f"malformed \\uxxxx escape {s[k:k + 6]!r} (Properties.load refuses the file)")
            out.append(chr(int(hexa, 16)))
            k += 6
            continue
        out.append(_ESCAPES.get(c, c))
        k += 2
    return "".join(out)


def java_parse_int(text: str) -> int | None:
    """``Integer.parseInt``: an optional sign and ASCII digits (Java also takes other
    scripts' digits: taken here too), within int; None where Java throws."""
    if not re.fullmatch(r"[+-]?\d+", text):
        return None
    try:
        v = int(text)
    except ValueError:
        return None
    return v if -(1 << 31) <= v < (1 << 31) else None


def _java_int(v: int) -> int:
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def rounded_queue_file_size(value: int) -> int:
    """``MessageStoreConfig.getMappedFileSizeConsumeQueue`` of a configured size: up to a
    whole number of units, ``(int) (factor * CQ_STORE_UNIT_SIZE)`` with ``factor =
    (int) Math.ceil(value / 20.0)`` (an int product: it wraps past Integer.MAX_VALUE)."""
    factor = math.ceil(value / (CQ_STORE_UNIT_SIZE * 1.0))
    return _java_int(factor * CQ_STORE_UNIT_SIZE)


def queue_file_size(path: str) -> QueueFileSize:
    """The consume-queue file size the broker configured in ``path`` (see the module's text).
    BrokerConfError when the file cannot be read or the size is one no broker can use."""
    props = read_properties(path)
    text = props.get(KEY_CQ_FILE_SIZE)
    if text is None:
        return QueueFileSize(None, path)
    value = java_parse_int(text)
    if value is None:
        return QueueFileSize(None, path, f"{path}: {KEY_CQ_FILE_SIZE}={text!r} is not an int, so the broker skips "
                                         f"it (MixAll.properties2Object) and uses its default {CQ_FILE_SIZE}")
    size = rounded_queue_file_size(value)
    if size <= 0:
        raise BrokerConfError(f"{path}: {KEY_CQ_FILE_SIZE}={value} makes consume-queue files of {size} bytes, which "
                              f"no broker can map")
    note = None if size == value else (f"{path}: {KEY_CQ_FILE_SIZE}={value}, which the broker rounds up to {size} "
                                       f"(a whole number of {CQ_STORE_UNIT_SIZE}-byte units)")
    return QueueFileSize(size, path, note)
