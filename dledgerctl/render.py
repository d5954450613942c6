"""One renderer for every command: rows (dicts) to table, json, jsonl or csv on stdout."""

from __future__ import annotations

import csv
import io
import sys
import unicodedata
from enum import Enum
from typing import Any, Iterable

import msgspec


class Format(str, Enum):
    table = "table"
    json = "json"
    jsonl = "jsonl"
    csv = "csv"


_encoder = msgspec.json.Encoder()


def to_json(value: Any) -> str:
    return _encoder.encode(value).decode("utf-8")


def _cell(value: Any) -> Any:
    return "" if value is None else value


# C0 and C1 control characters and DEL, as a terminal must not receive them from data
_ESCAPES = {**{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0))},
            ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def shown(value: Any) -> str:
    """A table cell's text: None as empty, control characters escaped (\\n, \\x1b), so a
    body's bytes can neither move the cursor nor break the table's lines."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else str(value)
    return text.translate(_ESCAPES) if not text.isprintable() else text


_ZERO_WIDTH = {"Mn", "Me", "Cf"}  # combining marks, enclosing marks, format characters (zero-width joiner, ...)


def display_width(text: str) -> int:
    """How many terminal columns ``text`` takes: East Asian wide and fullwidth characters
    (CJK, most emoji) two, combining marks and format characters none, the others one, as
    terminals draw them. Tables pad by this, not by ``len``, so a column of CJK topic names
    lines up."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.category(c) in _ZERO_WIDTH else 2 if unicodedata.east_asian_width(c) in "WF" else 1
               for c in text)


class _DisplayWidths:
    """What tabulate asks of the optional ``wcwidth`` package to pad wide characters
    (``wcswidth``), answered by :func:`display_width`; one measure for every table."""

    wcswidth = staticmethod(display_width)


def tabulate(*args, **kwargs) -> str:
    """tabulate's ``tabulate``, imported when a table is first drawn: importing it reads its
    version from the installed packages' metadata (about 12 ms), which a command printing
    JSON does not need."""
    import tabulate as module

    if module.wcwidth is not _DisplayWidths:
        module.wcwidth = _DisplayWidths
        module.WIDE_CHARS_MODE = True
    return module.tabulate(*args, **kwargs)


def _ljust(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def render(rows: Iterable[dict], fmt: Format, *, columns: list[str] | None = None, out=None) -> int:
    """Write ``rows``; returns how many were written. jsonl and csv stream row by row."""
    out = out or sys.stdout
    n = 0
    if fmt == Format.jsonl:
        for row in rows:
            out.write(to_json(row) + "\n")
            n += 1
        return n
    if fmt == Format.csv:
        writer = None
        for row in rows:
            if writer is None:
                writer = csv.DictWriter(out, fieldnames=columns or list(row), extrasaction="ignore", lineterminator="\n")
                writer.writeheader()
            writer.writerow({k: _cell(v) for k, v in row.items()})
            n += 1
        if writer is None and columns:  # no rows: still the header, so a reader sees the columns
            csv.DictWriter(out, fieldnames=columns, lineterminator="\n").writeheader()
        return n
    rows = list(rows)
    if fmt == Format.json:
        out.write(to_json(rows) + "\n")
        return len(rows)
    if not rows:
        out.write("(no rows)\n")
        return 0
    cols = columns or list(dict.fromkeys(k for row in rows for k in row))
    table = [[shown(row.get(c)) for c in cols] for row in rows]
    out.write(tabulate(table, headers=cols, tablefmt="simple", disable_numparse=True) + "\n")
    return len(rows)


def render_object(obj: dict, fmt: Format, out=None) -> None:
    """A single record (a summary): key/value table, or one JSON object."""
    out = out or sys.stdout
    if fmt in (Format.json, Format.jsonl):
        out.write(to_json(obj) + "\n")
    elif fmt == Format.csv:
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=list(obj), lineterminator="\n")
        writer.writeheader()
        writer.writerow({k: _cell(v) for k, v in obj.items()})
        out.write(buf.getvalue())
    else:
        out.write(tabulate([[k, shown(v)] for k, v in obj.items()], tablefmt="plain", disable_numparse=True) + "\n")


class StreamTable:
    """A table written as its rows arrive (``get --follow``): the header once, then each
    batch of rows at once. Columns are as wide as the header and the first batch need; a
    wider value later widens its column from that row on (nothing printed is redrawn).
    Cells are left-aligned, as :func:`render` aligns them; the last column is not padded."""

    def __init__(self, columns: list[str], out=None) -> None:
        self.columns, self.out = columns, out or sys.stdout
        self.widths: list[int] | None = None

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        cells = [[shown(r.get(c)) for c in self.columns] for r in rows]
        lines = []
        if self.widths is None:
            self.widths = [max([display_width(c)] + [display_width(row[k]) for row in cells])
                           for k, c in enumerate(self.columns)]
            lines.append(self._line(list(self.columns)))
            lines.append(self._line(["-" * w for w in self.widths]))
        for row in cells:
            self.widths = [max(w, display_width(text)) for w, text in zip(self.widths, row)]
            lines.append(self._line(row))
        self.out.write("\n".join(lines) + "\n")
        self.out.flush()

    def _line(self, row: list[str]) -> str:
        return "  ".join(_ljust(text, w) for text, w in zip(row[:-1], self.widths)) + "  " + row[-1]


class RowStream:
    """Rows written batch by batch as they arrive: jsonl one line per row and csv one
    header then lines, flushed after every batch; table as a :class:`StreamTable` when
    ``live`` (rows as they come), else one aligned table at :meth:`close`; json one array
    at :meth:`close`."""

    def __init__(self, fmt: Format, columns: list[str], *, live: bool = False, out=None) -> None:
        self.fmt, self.columns, self.out = fmt, columns, out or sys.stdout
        self.count = 0
        self._held: list[dict] = []
        self._csv = None
        self._table = StreamTable(columns, self.out) if live and fmt == Format.table else None

    def write(self, rows: list[dict]) -> None:
        self.count += len(rows)
        if self._table is not None:
            self._table.write(rows)
            return
        if self.fmt == Format.jsonl:
            self.out.write("".join(to_json(r) + "\n" for r in rows))
        elif self.fmt == Format.csv:
            if self._csv is None:
                self._csv = csv.DictWriter(self.out, fieldnames=self.columns, extrasaction="ignore",
                                           lineterminator="\n")
                self._csv.writeheader()
            self._csv.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
        else:
            self._held.extend(rows)
            return
        self.out.flush()

    def close(self) -> None:
        if self.fmt in (Format.json, Format.table) and self._table is None:
            render(self._held, self.fmt, columns=self.columns)
        elif self.count == 0 and self.fmt == Format.table:
            self.out.write("(no rows)\n")
        elif self.count == 0 and self.fmt == Format.csv and self._csv is None:
            render([], self.fmt, columns=self.columns, out=self.out)
        self.out.flush()
