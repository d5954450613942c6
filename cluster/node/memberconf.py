"""The config files ``cluster up`` starts its members with (``node start --config FILE``,
read by dledgerctl/nodeconf.py): one TOML file per member in ``<base-dir>/config/<id>.toml``,
one key per ``node start`` option, so a member runs from its file as it would on a server,
and an operator can read, edit and restart it (``cluster start ID``)."""

from __future__ import annotations

import os
import re
import sys

import tomli_w

_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?[0-9]+\.[0-9]+")
REPEATED = ("peer-address",)  # options given more than once: a list in the file


def settings_from_args(args: list[str]) -> dict:
    """``node start`` arguments (``--name value`` pairs and flags) as a config file's keys:
    numbers as numbers (not ones with a leading zero: ``delete-when = "04"`` stays text),
    flags as true (``--no-name``: name = false), repeated options as lists."""
    out: dict = {}
    k = 0
    while k < len(args):
        tok = args[k]
        if not tok.startswith("--"):
            raise ValueError(f"not an option: {tok!r}")
        name = tok[2:]
        if k + 1 < len(args) and not args[k + 1].startswith("--"):
            value, k = typed(args[k + 1]), k + 2
        else:
            value, k = (False, k + 1) if name.startswith("no-") else (True, k + 1)
            name = name[3:] if name.startswith("no-") else name
        if name in REPEATED:
            out.setdefault(name, []).append(value)
        else:
            out[name] = value
    return out


def typed(text: str):
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    return text


def path_of(base_dir: str, node_id: str) -> str:
    return os.path.join(os.path.abspath(base_dir), "config", f"{node_id}.toml")


def write(base_dir: str, node_id: str, settings: dict) -> str:
    """Write a member's file (atomically: a restart never reads half of one); its path."""
    path = path_of(base_dir, node_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(f"# dledgerctl node start --config {path}: member {node_id}, written by 'cluster up'\n")
        fh.write(tomli_w.dumps(settings))
    os.replace(tmp, path)
    return path


def command(path: str) -> list[str]:
    """The command line of a member started from its file."""
    return [sys.executable, "-m", "dledgerctl", "-v", "node", "start", "--config", path]
