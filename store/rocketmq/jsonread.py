"""One bounded reader for the JSON RocketMQ writes with fastjson: the controller's events
(``EventSerializer``: a type id, then fastjson JSON) and the broker's ``config/*.json``
files (``ConfigManager``: consumerOffset.json, topics.json, subscriptionGroup.json,
delayOffset.json, ...). Every reader of such JSON in store/rocketmq goes through here.

Its contract: :func:`loads` and :func:`read_json_file` either give Python objects or raise
:class:`JsonError` (a ValueError) with one line saying why; never RecursionError,
MemoryError or a bare ValueError, whatever the bytes. Bounds:

- size: a file is read through store.regular.read_regular (a regular file only, at most
  ``limit`` bytes); an event body is bounded by its entry;
- depth: at most MAX_DEPTH nested objects and arrays, the outermost counted. fastjson
  1.2.83 (what RocketMQ 5.3.3 uses) refuses arrays nested deeper (``DefaultJSONParser``:
  "array level > 512", counted from inside the event's object: an event whose field holds
  513 nested arrays, depth 514, deserializes, 514 do not) and runs out of stack on objects
  some thousands deep (an ElectMasterEvent with a field nested 5,000 deep does not
  deserialize); both checked with RocketMQ's own EventSerializer in
  tests/java/test_controller_hostile_java.py. Deeper JSON is refused here before parsing;
  objects nested 515 to a few thousand deep, which fastjson still reads, are refused too
  (RocketMQ writes nothing nested more than three deep);
- integer digits: an integer of more than MAX_INT_DIGITS digits is read as a
  :class:`HugeInteger` (fastjson reads it as a BigInteger, and fails where a field takes a
  long), never converted to a Python int: no quadratic conversion, no ValueError.

fastjson's dialect: a ``Map`` with Integer keys is written with bare number keys
(``{0:250,1:249}``, ``ConsumerOffsetManager``'s offset table), which JSON does not allow;
they are quoted before parsing (outside strings only), so they read as strings.
"""

from __future__ import annotations

import json
import re

import numpy as np

from ..regular import UnreadableFile, read_regular

MAX_DEPTH = 514  # fastjson DefaultJSONParser.parseArray: "array level > 512" (+ the event's object, + 1)
MAX_INT_DIGITS = 40  # (a Java long has 19; beyond this an integer stays text)
CONFIG_FILE_LIMIT = 256 << 20  # bytes: a config file larger than this is refused (a broker's are a few MB)

_STRING = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRINGS = re.compile(_STRING.encode())
# a string (kept as it is), or a bare integer key after "{" or "," (quoted): fastjson's Map<Integer, ...>
_INT_KEYS = re.compile(_STRING + r'|([{,]\s*)(-?[0-9]+)(\s*:)')
_BRACKETS = np.zeros(256, np.int8)
_BRACKETS[[ord("["), ord("{")]] = 1
_BRACKETS[[ord("]"), ord("}")]] = -1


class JsonError(ValueError):
    """Not fastjson's JSON, or JSON past a bound (the text says which)."""


class HugeInteger:
    """An integer of more than MAX_INT_DIGITS digits, kept as its text: no field of an event
    or a config file takes it (msgspec's conversion and isinstance checks refuse it, as a
    number or as a string)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other) -> bool:
        return isinstance(other, HugeInteger) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"<integer of {len(self.text.lstrip('-'))} digits>"


def _int(text: str):
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else HugeInteger(text)


def _no_constant(name: str):
    raise JsonError(f"malformed JSON: {name} is no JSON value")


def depth(data: bytes) -> int:
    """How deep ``data`` nests (objects and arrays; brackets in strings do not count), read
    without parsing it: linear time, no recursion."""
    if data.count(b"{") + data.count(b"[") <= MAX_DEPTH:  # (cannot be deeper: most JSON stops here)
        return min(MAX_DEPTH, data.count(b"{") + data.count(b"["))
    flat = np.frombuffer(_STRINGS.sub(b'""', data), np.uint8)
    return int(np.cumsum(_BRACKETS[flat], dtype=np.int64).max(initial=0))


def quote_int_keys(text: str) -> str:
    """fastjson's ``{0:250}`` as JSON (``{"0":250}``): bare integer keys after ``{`` or ``,``
    are quoted; strings are copied as they are."""
    return _INT_KEYS.sub(lambda m: m.group(0) if m.group(2) is None else f'{m.group(1)}"{m.group(2)}"{m.group(3)}',
                         text)


def loads(data: bytes | bytearray | memoryview | str):
    """``data`` (UTF-8 bytes, or text) as fastjson writes JSON, in Python objects (integer
    keys of fastjson's maps as strings). JsonError when it is not, or is past a bound."""
    if isinstance(data, str):
        text = data
        raw = data.encode("utf-8", "surrogatepass")
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    deep = depth(raw)
    if deep > MAX_DEPTH:
        raise JsonError(f"JSON nested {deep} deep, deeper than fastjson reads ({MAX_DEPTH})")
    try:
        return json.loads(quote_int_keys(text), parse_int=_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JsonError(f"malformed JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:  # (cannot happen below MAX_DEPTH; said rather than raised should it)
        raise JsonError(f"JSON nested too deep to read (more than {MAX_DEPTH})") from None


def read_json_file(path: str, limit: int = CONFIG_FILE_LIMIT):
    """The JSON of the config file at ``path`` (store.regular.read_regular: a regular file of
    at most ``limit`` bytes), or None when it is missing or empty (ConfigManager.load then
    reads the ``.bak``). JsonError (its text naming ``path``) when it is no fastjson JSON or
    cannot be read: a FIFO, a device, a directory, too large, not readable."""
    try:
        raw = read_regular(path, limit)
    except FileNotFoundError:
        return None
    except UnreadableFile as exc:  # (its text names the path)
        raise JsonError(str(exc)) from None
    except OSError as exc:
        raise JsonError(f"{path}: {exc.strerror or exc}") from None
    if not raw:
        return None
    try:
        return loads(raw)
    except JsonError as exc:
        raise JsonError(f"{path}: not fastjson's JSON ({exc})") from None
