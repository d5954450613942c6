"""How ``--help`` lays out a command's options: typer's rich panels, with every option name
whole at any terminal width.

typer (rich_utils) gives an option's long names, short names, negative long and short
names, type and help a column each. At 80 columns those cannot all fit beside the help,
and rich cuts the names (``--store-base-d…``), the one thing a reader must copy whole.
:class:`OptionsTable` puts a row's names in one column, one name per line, as wide as the
longest name; the help wraps beside it, and a word too long for its column folds onto the
next line instead of being cut. Loaded only when help is shown (app.py): rich's table and
typer's help code take longer to import than most commands take to run.
"""

from __future__ import annotations

import importlib
import sys
import types


class _OnFirstUse(type):
    """The class of a stand-in for a name of a module not imported yet: calling the stand-in,
    or asking it for an attribute (a class method), imports the module and hands the call to
    the real name (a class or a function)."""

    def __call__(cls, *args, **kwargs):
        return cls.real()(*args, **kwargs)

    def __getattr__(cls, attr: str):
        return getattr(cls.real(), attr)


def _stand_in(module: str, names: tuple[str, ...]) -> types.ModuleType:
    stand_in = types.ModuleType(module)

    def real(name: str):
        if sys.modules.get(module) is stand_in:  # (used while the stand-in is still in place: the real one now)
            del sys.modules[module]
        return getattr(importlib.import_module(module), name)

    for name in names:
        setattr(stand_in, name, _OnFirstUse(name, (), {"real": staticmethod(lambda name=name: real(name))}))
    return stand_in


# What typer's help code and rich import at their tops for what help here never draws, each
# with the names they take from it. typer.rich_utils: rich.markdown (help in rich_markup_mode
# "markdown", with markdown_it and pygments) and rich.traceback (a crash's pretty traceback),
# which took longer to import than all the rest of --help. rich.style: pickle, for a style's
# meta (help sets none). rich._ratio: fractions, and with it decimal, for columns sized by
# ratio (help's tables have none).
LATER = (("rich.markdown", ("Markdown",)), ("rich.traceback", ("Traceback",)),
         ("pickle", ("dumps", "loads")), ("fractions", ("Fraction",)))


def _emoji_codes_on_first_code() -> None:
    """rich's table of emoji codes (``:smile:``, a 4,000-entry dict) loaded by the first text that
    has something like a code in it, not by any text: rich's markup replaces the codes in
    every text it draws, and imports the table to do it. Help's texts rarely have one; their
    output is the same either way. Set before rich.console and rich.markup take the function."""
    import re

    from rich import _emoji_replace as module

    if "rich.markup" in sys.modules or getattr(module._emoji_replace, "lazy", False):
        return
    replace, code = module._emoji_replace, re.compile(r":\S*?:").search  # (every code rich replaces has this shape)

    def emoji_replace(text: str, default_variant: str | None = None) -> str:
        return replace(text, default_variant) if code(text) else text

    emoji_replace.lazy = True
    module._emoji_replace = emoji_replace


def _rich_utils() -> types.ModuleType:
    """typer's help code (and rich), loaded without the modules of :data:`LATER`. While they
    load, each is a stand-in module whose names build or call the real ones on first use
    (:class:`_OnFirstUse`); the stand-ins are taken out of sys.modules right after, so any
    later import gets the real modules."""
    if "typer.rich_utils" in sys.modules:
        return sys.modules["typer.rich_utils"]
    stood_in = {}
    for module, names in LATER:
        if module not in sys.modules:
            sys.modules[module] = stood_in[module] = _stand_in(module, names)
    try:
        _emoji_codes_on_first_code()
        from typer import rich_utils
        import rich.columns  # noqa: F401 (for OptionsTable, below)
        import rich.table  # noqa: F401
    finally:
        for module, stand_in in stood_in.items():
            if sys.modules.get(module) is stand_in:  # (not already replaced by the real one: _stand_in)
                del sys.modules[module]
    return rich_utils


rich_utils = _rich_utils()

from rich.columns import Columns  # noqa: E402 (loaded by _rich_utils)
from rich.table import Table  # noqa: E402
from rich.text import Text  # noqa: E402

_OPTION_CELLS = 6  # typer's option row: long, short, negative long, negative short, type, help (+ required first)


def _names(long: Text, short: Text) -> Text:
    if long.plain and short.plain:
        return Text.assemble(long, ", ", short)
    return long if long.plain else short


def _folding(cell):
    """A help cell whose words longer than its column fold instead of being cut."""
    texts = cell.renderables if isinstance(cell, Columns) else [cell]
    for text in texts:
        if isinstance(text, Text):
            text.overflow = "fold"
    return cell


class OptionsTable(Table):
    """typer's options table with one column of names (see the module's docstring). Other
    tables (the commands panel: two cells a row) are left as typer makes them."""

    def add_row(self, *cells, **kwargs) -> None:
        if not self.show_header and len(cells) in (_OPTION_CELLS, _OPTION_CELLS + 1) \
                and all(isinstance(c, Text) for c in cells[-_OPTION_CELLS:-1]):
            required = cells[:-_OPTION_CELLS]
            long, short, neg_long, neg_short, types, help_cell = cells[-_OPTION_CELLS:]
            names = [t for t in (_names(long, short), _names(neg_long, neg_short)) if t.plain]
            cells = (*required, Text("\n").join(names), types, _folding(help_cell))
            if not self.columns:  # (the names never wrap nor shrink: the type and help columns give way)
                for i in range(len(cells)):
                    self.add_column(no_wrap=i <= len(required))
        super().add_row(*cells, **kwargs)


def install() -> None:
    """Make typer's help draw its options with :class:`OptionsTable`."""
    rich_utils.Table = OptionsTable
