"""The options that select entries of a log on disk (store, mq and controller commands):
--from-index, --to-index, and the Selection they make with --index and --pos."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from store.reading import Selection


FromOpt = Annotated[Optional[int], typer.Option("--from-index", min=0, help="First entry index to show.")]
ToOpt = Annotated[Optional[int], typer.Option("--to-index", min=0, help="Last entry index to show.")]


def selection(index, from_index, to_index, pos) -> Selection:
    """The entries --index, --from-index/--to-index and --pos select (a usage error when they
    contradict each other)."""
    if index is not None and (from_index is not None or to_index is not None):
        raise typer.BadParameter("--index cannot be combined with --from-index/--to-index")
    if from_index is not None and to_index is not None and from_index > to_index:
        raise typer.BadParameter("--from-index is greater than --to-index")
    return Selection(index, from_index, to_index, pos)
