"""Pictures from real stores: ``store verify --plot`` (damage along the files) and the
sparkline of ``peer watermarks --watch``. (``spark stats --plot`` is in test_spark_cli.py.)
Each PNG is checked to be whole, of the promised size, and to show what it should."""

from __future__ import annotations

import json
import os

import numpy as np
from matplotlib.image import imread

from dledgerctl.plots import HEIGHT, SPARKS, WIDTH, sparkline
from tests.support.commands import cli
from tests.support.pictures import png_size
from tests.support.stores import damaged_store

RED = np.array([0xD6, 0x27, 0x28]) / 255  # errors are drawn in this colour


def red_pixels(path: str) -> int:
    img = imread(path)[:, :, :3]
    return int((np.abs(img - RED).max(axis=2) < 0.05).sum())


def test_verify_plot_marks_the_damage(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node)
    out = tmp_path / "damage.png"
    r = cli("store", "verify", node, "--plot", str(out), "--format", "json")
    assert r.returncode == 1 and json.loads(r.stdout)["summary"]["verdict"] == "damaged"
    assert png_size(out) == (WIDTH, HEIGHT) and os.path.getsize(out) > 10_000
    assert red_pixels(out) > 200  # the mark, its label, the title and the shaded cut
    clean = tmp_path / "clean"
    os.makedirs(clean)
    from store.filestore import FileStore
    with FileStore.open(str(clean / "dledger-n0"), data_file_size=1 << 16, index_file_size=1 << 14) as s:
        s.append_leader([b"body-%03d" % i for i in range(300)], 1)
        s.set_committed(299)
    out2 = tmp_path / "clean.png"
    r = cli("store", "verify", str(clean / "dledger-n0"), "--plot", str(out2))
    assert r.returncode == 0, r.stdout
    assert png_size(out2) == (WIDTH, HEIGHT) and red_pixels(out2) == 0


def test_plot_to_an_unwritable_place_is_one_line(tmp_path):
    node = str(tmp_path / "dledger-n0")
    damaged_store(node)
    r = cli("store", "verify", node, "--plot", str(tmp_path / "no" / "such" / "dir.png"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("Error: cannot write ")


def test_sparkline_scales_to_the_largest():
    assert sparkline([0, 0, 0]) == SPARKS[0] * 3
    assert sparkline([0, 5, 10]) == SPARKS[0] + SPARKS[4] + SPARKS[7]
    assert sparkline([None, 1]) == " " + SPARKS[7]
    assert sparkline([]) == ""


def _history_rows():
    rows = []
    for n in ("n0", "n1", "n2"):
        rows += [dict(node=n, term=1, entries=1000, bytes=1_024_000, first_index=0, last_index=999),
                 dict(node=n, term=2, entries=2, bytes=2048, first_index=1000, last_index=1001),
                 dict(node=n, term=3, entries=1, bytes=16, first_index=1002, last_index=1002),
                 dict(node=n, term=4, entries=900, bytes=921_600, first_index=1003, last_index=1902)]
    return rows


def test_every_term_is_drawn_wide_enough_to_see_and_none_covers_another():
    from dledgerctl.plots import MIN_TERM_SHARE, term_layout

    rows = _history_rows()
    span = 1903
    for node in ("n0", "n1", "n2"):
        bars = list(term_layout(rows, node))
        assert [r["term"] for r, *_ in bars] == [1, 2, 3, 4]
        assert all(drawn >= span * MIN_TERM_SHARE - 1e-9 for _r, _left, drawn, _short in bars)
        assert [short for *_, short in bars] == [False, True, True, False]
        for (_a, left_a, drawn_a, _), (_b, left_b, _d, _) in zip(bars, bars[1:]):
            assert left_a + drawn_a <= left_b + 1e-9  # (side by side, in index order)


def test_leader_history_shows_a_two_entry_term_beside_a_thousand_entry_one(tmp_path):
    """The picture itself: term 2's colour (2 entries of 1,903) is on every node's row, a
    band of it about MIN_TERM_SHARE of the axis wide, not a sliver."""
    from dledgerctl.plots import _term_colours, leader_history

    path = str(tmp_path / "h.png")
    leader_history(_history_rows(), path, "t")
    assert png_size(path) == (WIDTH, HEIGHT)
    from matplotlib.colors import to_rgb

    colour = np.array(to_rgb(_term_colours([1, 2, 3, 4])[2]))
    img = imread(path)[:, :, :3]
    top = img[: HEIGHT // 2]
    cols = np.where((np.abs(top - colour).max(axis=2) < 0.02).any(axis=0))[0]
    assert cols.size >= 12, f"term 2 is {cols.size} pixels wide"
