"""``node start --config FILE``: a member's settings in a TOML file, one key per ``node
start`` option (the long option's name: ``heartbeat-interval = 500``, ``peers = "..."``,
``read-lease = true``, ``peer-address = ["n1=10.0.0.2:20911"]``). Every option also reads
the environment variable ``DLEDGERCTL_`` + its name in capitals with ``_`` for ``-``
(``DLEDGERCTL_HEARTBEAT_INTERVAL``). The command line wins over the environment, which wins
over the file, which wins over the defaults. A key no option has, or a value its option
would refuse, is a one-line usage error (exit 2) naming the file and the key. ``--print-config``
shows the settings the node would run with, as such a file.
"""

from __future__ import annotations

import difflib
import os
import tomllib

import typer

from .common import fail

ENV_PREFIX = "DLEDGERCTL_"
NOT_KEYS = ("config", "print_config", "help")  # (parameters that are not settings)


def option_key(param) -> str:
    """The key of an option: its long name without the dashes (the first long one)."""
    return next((o[2:] for o in param.opts if o.startswith("--")), param.name)


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace("-", "_")


def settings(command) -> dict:
    """key -> option, for every option of ``command`` (a click command) that is a setting."""
    return {option_key(p): p for p in command.params
            if getattr(p, "param_type_name", "") == "option" and p.name not in NOT_KEYS}


def config_callback(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> str | None:
    """Eager: runs before the other options are read. Gives each option its environment
    variable, and makes the file's values the command's defaults (click's default_map: what
    the command line or the environment gives wins)."""
    options = settings(ctx.command)
    for key, p in options.items():
        if p.envvar is None:
            p.envvar = env_name(key)
    if value is None:
        return value
    try:
        with open(value, "rb") as fh:
            raw = tomllib.load(fh)
    except OSError as exc:
        raise fail(f"--config {value}: cannot read it: {exc.strerror or exc}", 2) from None
    except tomllib.TOMLDecodeError as exc:
        raise fail(f"--config {value}: not TOML: {exc}", 2) from None
    ctx.default_map = {**(ctx.default_map or {}), **from_file(ctx, param, value, raw, options)}
    return value


def from_file(ctx: typer.Context, param, path: str, raw: dict, options: dict) -> dict:
    """The file's values by parameter name, each checked as its option checks it."""
    out = {}

    def bad(why: str):
        return fail(f"--config {path}: {why}", 2)

    for key, value in raw.items():
        p = options.get(key)
        if p is None:
            near = difflib.get_close_matches(key, list(options), 1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise bad(f"unknown key {key!r}{hint}; the keys are node start's long options")
        if isinstance(value, dict):
            raise bad(f"{key}: a table is no value for --{key}")
        if p.multiple and not isinstance(value, list):
            value = [value]
        elif not p.multiple and isinstance(value, list):
            raise bad(f"{key}: one value, not a list")
        if p.is_flag and not isinstance(value, bool):
            raise bad(f"{key}: true or false, not {value!r}")
        try:
            p.process_value(ctx, value)  # (checked now, to name the file; converted again when read)
        except typer.BadParameter as exc:
            raise bad(f"{key}: {exc.message}") from None
        out[p.name] = value
    return out


def effective(ctx: typer.Context) -> dict:
    """The settings the command runs with, by key (options left unset are left out)."""
    out = {}
    for key, p in settings(ctx.command).items():
        value = ctx.params.get(p.name)
        if value is None or (p.multiple and not value):
            continue
        out[key] = list(value) if isinstance(value, (list, tuple)) else value
    return out


def render(values: dict, sources: str) -> str:
    import tomli_w

    return f"# dledgerctl node start settings, from {sources}\n" + tomli_w.dumps(values)


def sources_of(ctx: typer.Context) -> str:
    said = []
    if ctx.params.get("config"):
        said.append(os.path.abspath(ctx.params["config"]))
    kinds = {ctx.get_parameter_source(p.name).name for p in settings(ctx.command).values()}
    if "ENVIRONMENT" in kinds:
        said.append(f"{ENV_PREFIX}* variables")
    if "COMMANDLINE" in kinds:
        said.append("the command line")
    said.append("the defaults")
    return ", ".join(said)
