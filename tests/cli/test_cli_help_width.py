"""``--help`` on an 80-column terminal (and a narrower one) shows every option name whole:
none cut short with an ellipsis (``--store-base-d…``), every one of the command's names
there to copy. Every command of the real app (CliRunner)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from dledgerctl.app import app

runner = CliRunner()
ROOT = typer.main.get_command(app).load_all()  # (every command group loaded)


def _commands(cmd, path=()):
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


COMMANDS = list(_commands(ROOT))


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "dledgerctl" for p, _ in COMMANDS])
def test_help_shows_every_option_name_whole(path, cmd):
    _check(path, cmd, 80)


@pytest.mark.parametrize("path", [("node", "start"), ("cluster", "up"), ("store", "truncate")])
def test_and_on_a_narrower_terminal(path):
    _check(path, ROOT.commands[path[0]].commands[path[1]], 60)


def _check(path, cmd, columns: int) -> None:
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    assert "…" not in r.output, r.output
    words = set(re.findall(r"(?<![\w-])-{1,2}[\w-]+", r.output))
    for param in cmd.params:
        for name in (*param.opts, *param.secondary_opts):
            if name.startswith("-"):
                assert name in words, f"{name} is not shown whole:\n{r.output}"
    assert max(len(line) for line in r.output.splitlines()) <= columns


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=[" ".join(p) or "dledgerctl" for p, _ in COMMANDS])
def test_no_word_of_an_option_help_is_broken_at_80_columns(path, cmd):
    """A word longer than the help column is folded mid-word (``uniq_ke`` / ``y`` in mq migrate's
    --id-map, issue 58): every word of every option's help shows whole."""
    r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    shown = set(re.findall(r"[^\s│╭╮╰╯─]+", r.output))
    for param in cmd.params:
        for word in re.findall(r"\S+", getattr(param, "help", None) or ""):
            if "[" not in word and "]" not in word:
                assert word in shown, f"{word!r} of {param.name}'s help is broken:\n{r.output}"
