"""render.aligned draws a table exactly as tabulate does (its "simple" table with headers,
"plain" without, numbers not parsed, widths by render.display_width): render() and
render_object() drew theirs with tabulate before, and the command line no longer imports
it (tests/cli/test_cli_lazy.py). Checked over any text a cell can hold once render.shown has
escaped its control characters: spaces around it, empty cells, wide and combining characters,
text that looks like a number or a bool."""

from __future__ import annotations

import pytest
import tabulate as tabulate_module
from hypothesis import given, settings
from hypothesis import strategies as st

from dledgerctl.render import aligned, display_width, shown


@pytest.fixture(autouse=True, scope="module")
def _tabulate_measures_as_render():
    """tabulate pads by render.display_width, as render() had it do (its wcwidth hook)."""
    saved = tabulate_module.wcwidth, tabulate_module.WIDE_CHARS_MODE
    tabulate_module.wcwidth = type("Widths", (), {"wcswidth": staticmethod(display_width)})
    tabulate_module.WIDE_CHARS_MODE = True
    yield
    tabulate_module.wcwidth, tabulate_module.WIDE_CHARS_MODE = saved


def tabulated(rows, headers=None) -> str:
    if headers is None:
        return tabulate_module.tabulate(rows, tablefmt="plain", disable_numparse=True)
    return tabulate_module.tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


TEXT = st.one_of(st.sampled_from(["", " ", "  x ", "True", "False", "1", "-2.5", "1e3", "None", "主题", "e\u0301",
                                  "トピック名前", "\u00a0a\u00a0", "a  b", "\u3000", "\u2028x\u2029", "\x1b[31mred",
                                  "a\tb\nc", "\u200b", "\ufeff"]),
                 st.text(max_size=12)).map(shown)
NAMES = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7e), min_size=1, max_size=10)


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(st.lists(NAMES, min_size=n, max_size=n),
                                                     st.lists(st.lists(TEXT, min_size=n, max_size=n), min_size=1,
                                                              max_size=6))))
def test_a_table_with_headers_is_tabulates_simple(table):
    headers, rows = table
    assert aligned(rows, headers=headers) == tabulated(rows, headers)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(NAMES, TEXT).map(list), max_size=6))
def test_a_table_without_headers_is_tabulates_plain(rows):
    assert aligned(rows) == tabulated(rows)


def test_examples():
    assert aligned([["a ", " bb"], ["", "c"]], headers=["x", "long"]) == "x    long\n---  ------\na    bb\n     c"
    assert aligned([[" k", "v  "], ["kk", ""]]) == "k   v\nkk"
    assert aligned([["日本", "x"]], headers=["a", "b"]) == "a     b\n----  ---\n日本  x"
    assert aligned([]) == ""
