"""``dledgerctl kv``: the built-in key-value state machine (``node start --state-machine kv``)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from cluster.node.launcher import DEFAULT_BASE_DIR

from . import clients
from .common import (BaseDirOpt, ClientGroupOpt, ConsistencyOpt, FormatOpt, PeersOpt, TimeoutOpt, complete_members,
                     read_consistency, tls_options)
from .ops import kv
from .ops.targets import row
from .render import Format, render

app = typer.Typer(help="A key-value table kept by the nodes' built-in state machine (node start --state-machine kv): "
                       "put appends key=value entries, get reads the latest values.", no_args_is_help=True)


@app.command("put")
@tls_options
def put_cmd(
    key: Annotated[str, typer.Argument(help="The key (no '=').", show_default=False)],
    value: Annotated[str, typer.Argument(help="Its new value.", show_default=False)],
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0, fmt: FormatOpt = Format.table,
) -> None:
    """Set KEY to VALUE: appends the entry KEY=VALUE and waits until it is committed."""
    with clients.failures():
        kv.check_key(key)
        found = clients.target(peers, base_dir, group, timeout)
        render([row(kv.put(found, key, value))], fmt)


@app.command("get")
@tls_options
def get_cmd(
    keys: Annotated[list[str], typer.Argument(help="Keys to read.", show_default=False)],
    node: Annotated[Optional[str], typer.Option("--node", help="Ask this member instead of the leader: it answers "
                                                "once it has applied what it knew to be committed, which may be "
                                                "behind the leader (serializable; with --consistency linearizable "
                                                "it first asks the leader for a read index).",
                                                autocompletion=complete_members)] = None,
    consistency: ConsistencyOpt = None,
    peers: PeersOpt = None, group: ClientGroupOpt = None, base_dir: BaseDirOpt = DEFAULT_BASE_DIR,
    timeout: TimeoutOpt = 5.0, fmt: FormatOpt = Format.table,
) -> None:
    """The latest value of each KEY, from the leader once it has confirmed with a majority that it still leads and
    applied everything committed then (linearizable: a get sees every put acknowledged before it began). A key never
    set has the value null; exit 1 if none is set."""
    found = clients.target(peers, base_dir, group, timeout)
    with clients.failures():
        values = kv.get(found, keys, node, read_consistency(consistency, node))
    render([row(v) for v in values], fmt)
    if values and all(v.value is None for v in values):
        raise typer.Exit(1)
