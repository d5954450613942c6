"""One renderer for every command: rows (dicts) to table, json, jsonl or csv on stdout."""

from __future__ import annotations

import csv
import io
import sys
from enum import Enum
from typing import Any, Iterable

import msgspec
from tabulate import tabulate


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
        return n
    rows = list(rows)
    if fmt == Format.json:
        out.write(to_json(rows) + "\n")
        return len(rows)
    if not rows:
        out.write("(no rows)\n")
        return 0
    cols = columns or list(dict.fromkeys(k for row in rows for k in row))
    table = [[_cell(row.get(c)) for c in cols] for row in rows]
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
        out.write(tabulate([[k, _cell(v)] for k, v in obj.items()], tablefmt="plain", disable_numparse=True) + "\n")
