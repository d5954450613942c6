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

import datetime
import difflib
import math
import os
import tomllib

import typer

from .common import fail

ENV_PREFIX = "DLEDGERCTL_"
MAX_FILE_BYTES = 1 << 20  # a member's settings are a few hundred bytes
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
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise fail(f"--config {value}: cannot read it: {exc.strerror or exc}", 2) from None
    if len(data) > MAX_FILE_BYTES:
        raise fail(f"--config {value}: larger than {MAX_FILE_BYTES // 1024} KiB; not a member's settings", 2)
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise fail(f"--config {value}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                   "TOML files are UTF-8", 2) from None
    except tomllib.TOMLDecodeError as exc:
        raise fail(f"--config {value}: not TOML: {exc}", 2) from None
    except RecursionError:  # (tomllib parses nested arrays and tables by recursion)
        raise fail(f"--config {value}: arrays or tables nest too deep", 2) from None
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
        for item in value if p.multiple else [value]:
            problem = type_problem(p, item)
            if problem is not None:
                raise bad(f"{key}: {problem}")
        try:
            p.process_value(ctx, value)  # (checked now, to name the file; converted again when read)
        except typer.BadParameter as exc:
            raise bad(f"{key}: {exc.message}") from None
        out[p.name] = value
    return out


def kind(p) -> str:
    """What option ``p`` takes: flag, size (a parser of sizes), int, float or text."""
    if p.is_flag:
        return "flag"
    described = getattr(p, "type_descriptor", None)
    info = getattr(described, "parameter_info", None)
    if getattr(info, "parser", None) is not None:
        return "size"  # (node start's only parsers are parse_size's)
    annotation = getattr(described, "annotation", str)
    annotation = next(iter(getattr(annotation, "__args__", ())), annotation)  # (list[str]: str)
    return {int: "int", float: "float"}.get(annotation, "text")


def type_problem(p, value) -> str | None:
    """Why a TOML value cannot be option ``p``'s (text, as the command line gives, is checked
    by the option itself after this), or None. TOML has booleans, floats, dates and nested
    arrays the command line has not: a flag takes true or false only; a whole-number option
    neither a bool (``true`` is not 1) nor a float (``1.5`` is not 1); a number option a
    finite one; a size text ("64KiB") or a whole number of bytes; a text option text, or a
    whole number written bare (``group = 7``, as 'cluster up' writes numbers)."""
    shown, what = _shown(value), kind(p)
    if what == "flag":
        return None if isinstance(value, bool) else f"true or false, not {shown}"
    if isinstance(value, str):
        return None
    whole = isinstance(value, int) and not isinstance(value, bool)
    if what == "float":
        try:
            finite = (whole or isinstance(value, float)) and math.isfinite(value)
        except OverflowError:  # (an int past any float)
            finite = False
        return None if finite else f"a finite number, not {shown}"
    if whole:
        return None
    return {"int": "a whole number", "size": "a size ('64KiB', or a whole number of bytes)"}.get(what, "text") + \
        f", not {shown}"


def _shown(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (datetime.date, datetime.time)):
        return f"a date or time ({value.isoformat()})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return repr(value)


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
