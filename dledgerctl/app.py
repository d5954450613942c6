"""The ``dledgerctl`` command: one typer app with one sub-app per command group.

The groups and the top-level commands that need more than typer load lazily (:data:`LAZY`):
``--version``, ``--help`` and shell completion import this module, basics.py and typer
only, and a command imports its own group's module (and what that needs) when it runs.
``--help`` and completion list the lazy ones by the name and first help paragraph kept
here (tests/cli/test_cli_lazy.py keeps them equal to the commands' own).
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from enum import Enum
from typing import Annotated

import typer
from typer.completion import completion_init

try:  # (typer's own copy of click since 0.24; click itself before)
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import UsageError

from . import __version__, option_values
from .basics import fail, quiet_closed_stdout, stdout_gone

# name -> (module of dledgerctl, its typer app or command function, first paragraph of its help), in the
# order --help lists them after 'completion' (which is defined below)
LAZY = {
    "append": ("log_cmd", "append_cmd",
               "Append entries on the leader (following NOT_LEADER), a batch at a time; prints index, term and pos of "
               "each entry as its batch commits. Stopped early (a failure, Ctrl-C), it says on stderr how many "
               "committed, at which indexes, and where to resume."),
    "get": ("log_cmd", "get_cmd",
            "Read committed entries from the leader: exactly --count (or up to --to-index), paging through a node's "
            "per-answer limit; fewer only when the log is not committed that far, which is said on stderr. "
            "Linearizable by default: an entry committed before the command began is there."),
    "store": ("store_app", "app", "Inspect, verify and repair a node's files offline."),
    "node": ("node_cmd", "node_app", "Run a node."),
    "cluster": ("cluster_app", "app", "Start, stop and look at a local cluster of node processes."),
    "peer": ("peer_cmd", "app", "Operator requests to a running cluster: replication watermarks, forced compare and "
                                "truncation of a follower, leadership transfer, membership changes."),
    "spark": ("spark_cmd", "app", "Audit, compare, summarise and export the logs of many nodes with PySpark."),
    "certs": ("certs_cmd", "app", "Certificates for mutual TLS: a CA and one certificate per member, operator and "
                                  "client."),
    "kv": ("kv_cmd", "app", "A key-value table kept by the nodes' built-in state machine (node start --state-machine "
                            "kv): put appends key=value entries, get reads the latest values."),
    "mq": ("mq_app", "app", "RocketMQ messages in a broker's DLedger log, and its consume queues (offline)."),
    "controller": ("controller_app", "app", "A RocketMQ 5 DLedger controller's log: its events and the broker sets' "
                                            "state (offline); a live controller group watched for elections it "
                                            "holds back."),
}
ORDER = ["append", "get", "completion", *(n for n in LAZY if n not in ("append", "get"))]


# Usage errors as click prints them (usage, the help hint, then one "Error: ..." line), not
# in the rich panel typer draws, which wraps the reason over several lines: the same
# "Error:" line as every other failure, for people and for scripts. typer's own main takes
# the markup mode only to choose how it prints errors (help keeps its rich panels).
_typer_main = typer.core._main


def _plain_errors_main(*args, **kwargs):
    kwargs["rich_markup_mode"] = None
    return _typer_main(*args, **kwargs)


typer.core._main = _plain_errors_main
option_values.install()  # (values converted without pydantic: option_values.py)


def _with_whole_option_names(format_help):
    def format_help_whole(self, ctx, formatter):
        # (function-level import: rich's table and typer's help code load only when help is
        # shown; they take longer to import than most commands take to run)
        from . import help_layout

        help_layout.install()
        return format_help(self, ctx, formatter)
    return format_help_whole


# --help draws every option name whole at any width (help_layout.py)
for _cls in (typer.core.TyperCommand, typer.core.TyperGroup):
    _cls.format_help = _with_whole_option_names(_cls.format_help)


class _Root(typer.core.TyperGroup):
    """The root command: every command runs inside its ``invoke``, and the lazy ones load
    here (:meth:`get_command`).

    A reader of stdout that went away (``| head -1``) ends any command quietly with exit 0,
    in every format, as ``head`` got what it asked for; click alone would exit 1, and a
    command's own OSError handling would print "Error: Broken pipe". A broken pipe that is
    not stdout's (a connection) stays an error."""

    _listing = False  # while help or completion only lists the commands: stand-ins, nothing loaded

    def list_commands(self, ctx) -> list[str]:
        return ORDER + [n for n in self.commands if n not in ORDER]

    def get_command(self, ctx, name: str):
        cmd = self.commands.get(name)
        if cmd is not None or name not in LAZY:
            return cmd
        module, attr, help = LAZY[name]
        if self._listing:
            kind = typer.core.TyperCommand if name in ("append", "get") else typer.core.TyperGroup
            return kind(name=name, help=help)
        cmd = self.commands[name] = _load(name, getattr(importlib.import_module(f"{__package__}.{module}"), attr))
        return cmd

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except UsageError as exc:  # (typer's suggestions know only the commands loaded: made again from all)
            from difflib import get_close_matches

            matches = get_close_matches(args[0], self.list_commands(ctx)) if args else []
            if matches:
                exc.message = (f"{exc.message.split('. Did you mean')[0].rstrip('.')}. Did you mean "
                               f"{', '.join(repr(m) for m in matches)}?")
            raise

    def load_all(self) -> "_Root":
        """Every command loaded (for tests that read the whole tree)."""
        for name in LAZY:
            self.get_command(None, name)
        return self

    def format_help(self, ctx, formatter):
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def shell_complete(self, ctx, incomplete: str):
        self._listing = True
        try:
            return super().shell_complete(ctx, incomplete)
        finally:
            self._listing = False

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            if not stdout_gone():
                raise fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from None
            quiet_closed_stdout()
            raise typer.Exit(0) from None


def _load(name: str, obj):
    """The click command of a lazy entry: a typer app (a group) or a command function."""
    if isinstance(obj, typer.Typer):
        _unwrap_help(obj)
        cmd = typer.main.get_group(obj)
    else:
        if obj.__doc__:
            obj.__doc__ = _unwrap(obj.__doc__)
        one = typer.Typer(add_completion=False)
        one.command(name)(obj)
        cmd = typer.main.get_command(one)
    cmd.name = name
    return cmd


app = typer.Typer(
    name="dledgerctl",
    cls=_Root,
    help="Operations toolkit for DLedger-compatible Raft commit logs (RocketMQ DLedger mode).",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.command("completion")
def completion_cmd(shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish.", show_default=False)]) -> None:
    """Print the shell completion script for SHELL: it completes commands, options, and member ids (from --peers or
    the cluster recorded in --base-dir). bash: 'source <(dledgerctl completion bash)' in ~/.bashrc; zsh: write it to
    a file named _dledgerctl in a directory of $fpath; fish: write it to ~/.config/fish/completions/dledgerctl.fish."""
    from typer._completion_shared import get_completion_script

    typer.echo(get_completion_script(prog_name="dledgerctl", complete_var="_DLEDGERCTL_COMPLETE", shell=shell.value))


def _unwrap(text: str) -> str:
    """A docstring's paragraphs with their source line breaks joined, so ``--help`` wraps
    them to the terminal instead of breaking lines where the source did."""
    return "\n\n".join(" ".join(line.strip() for line in para.splitlines())
                        for para in inspect.cleandoc(text).split("\n\n"))


def _unwrap_help(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        if info.callback is not None and info.callback.__doc__:
            info.callback.__doc__ = _unwrap(info.callback.__doc__)
    for group in typer_app.registered_groups:
        _unwrap_help(group.typer_instance)


_unwrap_help(app)
completion_init()  # (typer's bash, zsh and fish protocols, which the scripts of 'completion' speak)


class LogFormat(str, Enum):
    text = "text"
    json = "json"


def _json_handler():
    import logging

    from pythonjsonlogger.json import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter("{levelname}{name}{message}", style="{", timestamp="time",
                                       rename_fields={"levelname": "level", "name": "logger", "message": "msg"}))
    return handler


def _version(value: bool) -> None:
    if value:
        typer.echo(f"dledgerctl {__version__} (DLedger 0.2.7 store format and wire; Python "
                   f"{'.'.join(map(str, sys.version_info[:3]))})")
        raise typer.Exit()


@app.callback()
def main_options(
    ctx: typer.Context,
    _show_version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_version,
                             help="Print dledgerctl's version and exit.")] = False,
    verbose: Annotated[int, typer.Option("--verbose", "-v", count=True, help="More log output (-v info, -vv debug).")] = 0,
    log_format: Annotated[LogFormat, typer.Option("--log-format", envvar="DLEDGERCTL_LOG_FORMAT", help="text: "
                          "readable lines; json: one JSON object per line (time, level, logger, msg, and a node's "
                          "state changes with their numbers as fields).", case_sensitive=False)] = LogFormat.text,
) -> None:
    """Operations toolkit for DLedger-compatible Raft commit logs."""
    import logging  # (a command runs: --version and --help ended before this)

    from .loglines import ClickLogHandler, LogLabels, log

    root = logging.getLogger()
    if ctx.get_parameter_source("log_format").name == "COMMANDLINE":  # (nodes cluster up starts log the same way)
        os.environ["DLEDGERCTL_LOG_FORMAT"] = log_format.value
    if not any(getattr(h, "dledgerctl", False) for h in root.handlers):
        if log_format == LogFormat.json:
            handler = _json_handler()
        else:
            handler = ClickLogHandler()
        handler.dledgerctl = True
        handler.addFilter(LogLabels())
        root.addHandler(handler)
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root.setLevel(level)
    log.setLevel(level)
