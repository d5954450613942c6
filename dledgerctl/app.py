"""The ``dledgerctl`` command: one typer app with one sub-app per command group."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from enum import Enum
from typing import Annotated

import click_log
import typer
from typer.completion import completion_init

from . import (certs_cmd, cluster_cmd, kv_cmd, log_cmd, mq_cmd, mq_consumers_cmd, mq_move_cmd, mq_rebuild_cmd,
               mq_salvage_cmd, node_cmd, peer_cmd, spark_cmd, store_cmd)
from . import controller_cmd
from .common import LogLabels, fail, log, quiet_closed_stdout, stdout_gone


# Usage errors as click prints them (usage, the help hint, then one "Error: ..." line), not
# in the rich panel typer draws, which wraps the reason over several lines: the same
# "Error:" line as every other failure, for people and for scripts. typer's own main takes
# the markup mode only to choose how it prints errors (help keeps its rich panels).
_typer_main = typer.core._main


def _plain_errors_main(*args, **kwargs):
    kwargs["rich_markup_mode"] = None
    return _typer_main(*args, **kwargs)


typer.core._main = _plain_errors_main


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
    """The root command: every command runs inside its ``invoke``. A reader of stdout that
    went away (``| head -1``) ends any command quietly with exit 0, in every format, as
    ``head`` got what it asked for; click alone would exit 1, and a command's own OSError
    handling would print "Error: Broken pipe". A broken pipe that is not stdout's (a
    connection) stays an error."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError as exc:
            if not stdout_gone():
                raise fail(f"{exc.filename + ': ' if exc.filename else ''}{exc.strerror or exc}") from None
            quiet_closed_stdout()
            raise typer.Exit(0) from None


app = typer.Typer(
    name="dledgerctl",
    cls=_Root,
    help="Operations toolkit for DLedger-compatible Raft commit logs (RocketMQ DLedger mode).",
    no_args_is_help=True,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(store_cmd.app, name="store")
app.add_typer(node_cmd.node_app, name="node")
app.add_typer(cluster_cmd.cluster_app, name="cluster")
app.add_typer(peer_cmd.app, name="peer")
app.add_typer(spark_cmd.app, name="spark")
app.add_typer(certs_cmd.app, name="certs")
app.add_typer(kv_cmd.app, name="kv")
app.add_typer(mq_cmd.app, name="mq")
mq_cmd.app.command("migrate")(mq_move_cmd.migrate_cmd)
mq_cmd.app.command("rebuild")(mq_rebuild_cmd.rebuild_cmd)
mq_cmd.app.command("salvage")(mq_salvage_cmd.salvage_cmd)
app.add_typer(controller_cmd.app, name="controller")
mq_cmd.app.command("consumers")(mq_consumers_cmd.consumers_cmd)
app.command("append")(log_cmd.append_cmd)
app.command("get")(log_cmd.get_cmd)


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


def _json_handler() -> logging.Handler:
    from pythonjsonlogger.json import JsonFormatter

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter("{levelname}{name}{message}", style="{", timestamp="time",
                                       rename_fields={"levelname": "level", "name": "logger", "message": "msg"}))
    return handler


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            mine = version("dledgerctl")
        except PackageNotFoundError:  # (run from a source tree that was never installed)
            mine = "unknown (not installed)"
        typer.echo(f"dledgerctl {mine} (DLedger 0.2.7 store format and wire; Python "
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
    root = logging.getLogger()
    if ctx.get_parameter_source("log_format").name == "COMMANDLINE":  # (nodes cluster up starts log the same way)
        os.environ["DLEDGERCTL_LOG_FORMAT"] = log_format.value
    if not any(getattr(h, "dledgerctl", False) for h in root.handlers):
        if log_format == LogFormat.json:
            handler = _json_handler()
        else:
            handler = click_log.ClickHandler()
            handler.formatter = click_log.ColorFormatter()
        handler.dledgerctl = True
        handler.addFilter(LogLabels())
        root.addHandler(handler)
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    root.setLevel(level)
    log.setLevel(level)
