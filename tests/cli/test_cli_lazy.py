"""Commands load lazily (issue 50): ``--version``, ``--help`` and shell completion import no
command group, and none of the heavy modules; a command imports its own group's module when
it runs; and the short-lived client commands (append, get, cluster status, peer watermarks,
kv get/put) against a running group import none of what they do not use (:data:`NOT_FOR_CLIENTS`).
Not a timing test: it reads which modules a run loaded (``sys.modules`` at exit).

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
from tests.support.commands import cli

HEAVY = ("numpy", "pyspark", "pyarrow", "matplotlib", "cryptography", "uvloop", "prometheus_client", "msgspec",
         "isal", "tabulate", "cluster", "store")

# What a client command against a running group does without (issue 50): the data tools (numpy, pyarrow,
# pyspark, matplotlib), TLS's certificates (cryptography: only with --tls), the nodes' event loop and
# metrics (uvloop, prometheus_client), typer's pydantic conversion of options (app.py converts the options
# these commands take), the decoders of get --decode (store.rocketmq), rich (progress bars on a terminal) and
# click_log (loaded by the first log line: basics.ClickLogHandler)
NOT_FOR_CLIENTS = ("numpy", "pyarrow", "pyspark", "matplotlib", "cryptography", "uvloop", "prometheus_client",
                   "pydantic", "pydantic_core", "rich", "store.rocketmq", "dledgerctl.log_decode", "click_log")


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


def heavy_in(mods: set[str], heavy=HEAVY) -> list[str]:
    """The names of ``heavy`` that ``mods`` holds (a package, or a module of it)."""
    return sorted(h for h in heavy if any(m == h or m.startswith(h + ".") for m in mods))


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["completion", "bash"]])
def test_light_commands_import_no_group_and_nothing_heavy(tmp_path, args):
    mods = imported(tmp_path, *args)
    assert heavy_in(mods) == []
    groups = sorted(m for m in mods if m.startswith("dledgerctl.") and m.split(".")[1] in
                    {module for module, _attr, _help in LAZY.values()})
    assert groups == []
    if args != ["completion", "bash"]:  # (the log is set up when a command runs: loglines.py)
        assert "logging" not in mods
    if args == ["--version"]:
        assert "rich" not in mods and "click_log" not in mods
    if args == ["--help"]:  # (help draws no markdown, no traceback, no meta, no ratios, no emoji: help_layout.py)
        assert heavy_in(mods, ("pydantic", "markdown_it", "pygments", "rich.markdown", "rich.traceback", "pickle",
                               "fractions", "decimal", "rich._emoji_codes")) == []


HELP_STAND_INS = """
import sys
from dledgerctl import help_layout
later = ("rich.markdown", "rich.traceback", "pickle", "fractions", "rich._emoji_codes")
assert not [m for m in later if m in sys.modules], [m for m in later if m in sys.modules]
from rich.markdown import Markdown
from rich.traceback import Traceback
assert type(help_layout.rich_utils.Markdown("*x*")) is Markdown
try:
    1 / 0
except ZeroDivisionError as exc:
    tb = help_layout.rich_utils.Traceback.from_exception(type(exc), exc, exc.__traceback__)
assert type(tb) is Traceback
import rich.style, rich._ratio
assert rich.style.Style(meta={"k": [1, 2]}).meta == {"k": [1, 2]}  # (pickle, through the stand-in)
assert rich._ratio.ratio_distribute(10, [1, 2, 2]) == [2, 4, 4]  # (fractions.Fraction, through the stand-in)
import fractions, pickle
assert type(fractions.Fraction(1, 3)) is fractions.Fraction and pickle.loads(pickle.dumps(3)) == 3
from rich.text import Text
assert "rich._emoji_codes" not in sys.modules
assert Text.from_markup("no code here: 127.0.0.1:20911 x").plain == "no code here: 127.0.0.1:20911 x"
assert "rich._emoji_codes" not in sys.modules
assert Text.from_markup("a :thumbs_up: b :no_such_code: c").plain == "a \N{THUMBS UP SIGN} b :no_such_code: c"
print("ok")
"""


def test_the_help_codes_stand_ins_build_the_real_ones():
    """typer's help code and rich load with stand-ins for rich.markdown, rich.traceback, pickle
    and fractions, which call or build the real ones if ever used, and rich's emoji codes load
    at the first text that may have one; the real modules import as usual afterwards."""
    _prints_ok(HELP_STAND_INS)


STAND_IN_IN_PLACE = """
import sys
from dledgerctl import help_layout
assert "calendar" not in sys.modules
stand_in = sys.modules["calendar"] = help_layout._stand_in("calendar", ("isleap",))
assert stand_in.isleap(2024) is True  # (used while still in place: the real module takes its place)
import calendar
assert calendar is not stand_in and sys.modules["calendar"] is calendar and calendar.isleap(2023) is False
print("ok")
"""


def test_a_stand_in_used_while_in_place_hands_over_to_the_real_module():
    _prints_ok(STAND_IN_IN_PLACE)


def _prints_ok(script: str) -> None:
    """``script`` run in a fresh interpreter (nothing imported yet) ends printing "ok"."""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=paths.ROOT, env={**os.environ, "PYTHONPATH": paths.ROOT})
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr[-2000:]


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


@pytest.fixture(scope="module")
def shared_group(module_group):
    """One local group of three members (with the kv state machine) for every client command below."""
    return module_group(3, "--state-machine", "kv")


CLIENT_COMMANDS = [
    ["append", "-d", "x"],
    ["append", "-d", "x", "-d", "y", "--format", "json"],
    ["get", "-i", "0", "-c", "2"],
    ["get", "-i", "0", "--format", "jsonl"],
    ["cluster", "status"],
    ["cluster", "status", "--format", "json"],
    ["peer", "watermarks"],
    ["kv", "put", "k", "v"],
    ["kv", "get", "k"],
]


@pytest.mark.parametrize("args", CLIENT_COMMANDS, ids=" ".join)
def test_client_commands_import_only_what_they_use(tmp_path, shared_group, args):
    if args[:2] == ["kv", "get"]:  # (its key, put here: a parallel run may give "kv put" another group)
        assert cli("kv", "put", "k", "v", "--base-dir", shared_group).returncode == 0
    mods = imported(tmp_path, *args, "--base-dir", shared_group)
    assert heavy_in(mods, NOT_FOR_CLIENTS) == []
    if "--format" in args:  # (tabulate draws tables only)
        assert heavy_in(mods, ("tabulate",)) == []
    assert not {f"dledgerctl.{m}" for m in ("spark_cmd", "store_cmd", "mq_app", "controller_cmd", "certs_cmd",
                                            "node_cmd")} & mods
