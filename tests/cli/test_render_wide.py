"""Tables line up on a terminal when cells hold wide characters (CJK topic names: two
columns each) or combining marks (none): every column starts at the same screen column on
every line. render(), the streaming table, and ``mq topics`` on a store with such a topic.
"""

from __future__ import annotations

import io
import unicodedata

from typer.testing import CliRunner

from dledgerctl.app import app
from dledgerctl.render import Format, StreamTable, render
from tests.support.rmq_store import write_broker_store


def screen_width(text: str) -> int:
    """Columns a terminal gives ``text`` (the test's own measure)."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def column_starts(line: str, values: list[str]) -> list[int]:
    """The screen column at which each of ``values`` (in order) begins in ``line``."""
    starts, at = [], 0
    for v in values:
        i = line.index(v, at)
        starts.append(screen_width(line[:i]))
        at = i + len(v)
    return starts


ROWS = [{"topic": "主题-ü", "queue": "q1", "n": "1"}, {"topic": "Topic0", "queue": "q22", "n": "22"},
        {"topic": "e\u0301t\u00e9", "queue": "q3", "n": "3"}, {"topic": "トピック名前", "queue": "q4", "n": "4"}]


def _aligned(lines: list[str]) -> None:
    starts = [column_starts(line, [r["topic"], r["queue"], r["n"]]) for line, r in zip(lines, ROWS)]
    assert len({tuple(s) for s in starts}) == 1, "\n".join(lines)


def test_render_table_pads_by_screen_width():
    out = io.StringIO()
    render(ROWS, Format.table, columns=["topic", "queue", "n"], out=out)
    lines = out.getvalue().splitlines()
    assert column_starts(lines[0], ["topic", "queue", "n"]) == column_starts(lines[2], ["主题-ü", "q1", "1"])
    _aligned(lines[2:])


def test_stream_table_pads_by_screen_width():
    out = io.StringIO()
    table = StreamTable(["topic", "queue", "n"], out)
    table.write(ROWS)  # (one batch: a wider value in a later batch widens its column from there on)
    lines = out.getvalue().splitlines()
    _aligned(lines[2:])


def test_mq_topics_table_lines_up(tmp_path):
    root = tmp_path / "store"
    specs = [dict(topic=t, queue_id=0, body=b"x", store_timestamp=1_700_000_000_000 + i,
                  properties={"UNIQ_KEY": f"U{i}"}) for i, t in enumerate(["主题-ü", "TopicA", "トピック"])]
    write_broker_store(str(root), specs)
    r = CliRunner().invoke(app, ["mq", "topics", str(root)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = [line for line in r.stdout.splitlines() if any(t in line for t in ("主题-ü", "TopicA", "トピック"))]
    assert len(lines) == 3, r.stdout
    header = r.stdout.splitlines()[0].split()
    second = header[1]  # the column after the topic's
    starts = []
    for line in lines:
        topic = next(t for t in ("主题-ü", "TopicA", "トピック") if t in line)
        rest = line[line.index(topic) + len(topic):]
        starts.append(screen_width(line[:line.index(topic) + len(topic)]) + len(rest) - len(rest.lstrip()))
    assert len(set(starts)) == 1, f"{second}:\n" + "\n".join(lines)
