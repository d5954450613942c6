"""Commands load lazily (issue 50): ``--version``, ``--help`` and shell completion import no
command group, and none of the heavy modules; a command imports its own group's module when
it runs. Not a timing test: it reads which modules a run loaded (``sys.modules`` at exit).

And the stand-ins ``--help`` and completion list instead of the groups (app.LAZY) say what
the groups themselves say."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import click
import pytest
import typer
from typer.testing import CliRunner

from dledgerctl import app as app_module
from dledgerctl.app import LAZY, app
from tests.support import paths

HEAVY = ("numpy", "pyspark", "pyarrow", "matplotlib", "cryptography", "uvloop", "prometheus_client", "msgspec",
         "isal", "tabulate", "cluster", "store")


RUN = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: json.dump(sorted(sys.modules), open(out, "w")))
sys.argv[0] = "dledgerctl"
from dledgerctl.__main__ import main
main()
"""


def imported(tmp_path, *args: str, env: dict | None = None) -> set[str]:
    """The modules loaded by a run of dledgerctl with ``args`` (read at exit)."""
    out = tmp_path / "modules.json"
    r = subprocess.run([sys.executable, "-c", RUN, str(out), *args], capture_output=True, text=True, timeout=120,
                       cwd=paths.ROOT, env={**os.environ, "PYTHONPATH": paths.ROOT, **(env or {})})
    assert r.returncode == 0, r.stderr[-2000:]
    return set(json.loads(out.read_text()))


def heavy_in(mods: set[str]) -> list[str]:
    return sorted(m for m in mods if m.split(".")[0] in HEAVY)


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["completion", "bash"]])
def test_light_commands_import_no_group_and_nothing_heavy(tmp_path, args):
    mods = imported(tmp_path, *args)
    assert heavy_in(mods) == []
    groups = sorted(m for m in mods if m.startswith("dledgerctl.") and m.split(".")[1] in
                    {module for module, _attr, _help in LAZY.values()})
    assert groups == []
    if args == ["--version"]:
        assert "rich" not in mods and "click_log" not in mods


def test_completing_a_command_name_loads_no_group(tmp_path):
    mods = imported(tmp_path, env={"_DLEDGERCTL_COMPLETE": "complete_bash", "COMP_WORDS": "dledgerctl c", "COMP_CWORD": "1"})
    assert heavy_in(mods) == []


def test_a_command_loads_its_own_group_only(tmp_path):
    mods = imported(tmp_path, "store", "--help")
    assert "dledgerctl.store_cmd" in mods
    assert not {"dledgerctl.spark_cmd", "dledgerctl.mq_app", "dledgerctl.controller_cmd", "pyspark"} & mods


def test_the_stand_ins_say_what_the_commands_say():
    root = typer.main.get_command(app)
    ctx = click.Context(root)
    listed = {name: root.get_command(ctx, name) for name in root.list_commands(ctx)}
    root.load_all()
    assert root.list_commands(ctx) == list(listed)  # (every command listed, in the order --help shows)
    for name, (_module, _attr, help) in LAZY.items():
        real = root.commands[name]
        first = " ".join(inspect.cleandoc(real.help or "").split("\n\n")[0].split())
        assert help == first, name
        assert isinstance(listed[name], click.Group) == isinstance(real, click.Group), name
    assert app_module.ORDER[:3] == ["append", "get", "completion"]


def test_a_mistyped_command_is_matched_against_every_command_not_only_those_loaded():
    r = CliRunner().invoke(app, ["clster"])
    assert r.exit_code == 2 and "No such command 'clster'. Did you mean 'cluster'?" in r.stderr, r.output
