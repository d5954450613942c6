"""``dledgerctl kv``: the built-in key-value state machine (``node start --state-machine kv``)."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Optional

import typer

from cluster.net.client import ClientError

from .cluster_cmd import DEFAULT_BASE_DIR, DEFAULT_GROUP, _peers, _with_client
from .common import (BaseDirOpt, ClientGroupOpt, ConsistencyOpt, FormatOpt, PeersOpt, TimeoutOpt, complete_members,
                     fail, read_consistency, tls_options)
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
    if not key or "=" in key:
        raise fail(f"a key may be neither empty nor hold '=': {key!r}", 2)
    parsed, rec_group = _peers(peers, base_dir)

    async def work(c):
        md = await c.metadata(await c.find_leader(asyncio.get_running_loop().time() + c.timeout))
        if md.get("state_machine") != "kv":  # (nothing would apply the entry: refuse before appending it)
            sm = md.get("state_machine")
            raise ClientError(f"the group's state machine is {sm!r}, not kv" if sm else
                              "the group runs no state machine (start its members with --state-machine kv)")
        resp = await c.append([f"{key}={value}".encode()])
        index, term, _pos, _size = resp["entries"][0]
        return [{"key": key, "value": value, "index": index, "term": term}]

    render(_with_client(parsed, group or rec_group or DEFAULT_GROUP, timeout, work), fmt)


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
    parsed, rec_group = _peers(peers, base_dir)
    if node is not None and node not in parsed:
        raise fail(f"--node {node!r} is not a member ({', '.join(parsed)})", 2)
    level = read_consistency(consistency, node)

    async def work(c):
        rows = []
        for key in keys:
            resp = await c.query(key.encode(), node, consistency=level)
            try:
                value = json.loads(resp["result"])["value"]
            except (ValueError, KeyError, TypeError):
                raise ClientError("the nodes' state machine is not kv (start them with --state-machine kv)") from None
            rows.append({"key": key, "value": value, "applied_index": resp.get("appliedIndex")})
        return rows

    rows = _with_client(parsed, group or rec_group or DEFAULT_GROUP, timeout, work)
    render(rows, fmt)
    if rows and all(r["value"] is None for r in rows):
        raise typer.Exit(1)
