"""``dledgerctl controller watch``: the failover a live RocketMQ 5 controller failed to make
(dledgerctl/ops/controller_watch.py). Registered on the ``controller`` sub-app by
controller_cmd.py."""

from __future__ import annotations

import csv
import sys
import time
from typing import Annotated, List, Optional

import typer

from cluster.net.remoting import host_port
from dledgerctl.ops.controller_watch import HELD_BACK, WAITING, Watcher, finding_text, status_row

from .common import FormatOpt, TimeoutOpt, parse_duration, plural
from .basics import fail
from .render import Format, render, to_json

COLUMNS = ["broker_name", "state", "master_broker_id", "master_alive", "master_epoch", "sync_state_set",
           "in_sync_alive", "held_back_seconds"]
FINDING_COLUMNS = ["time", "broker_name", "master_broker_id", "master_epoch", "in_sync_alive", "held_back_seconds",
                   "finding"]


def _addresses(values: list[str]) -> list[str]:
    out = []
    for value in values:
        for part in value.split(";"):
            if part.strip():
                try:
                    host_port(part, "controller address")
                except ValueError as exc:
                    raise typer.BadParameter(str(exc), param_hint="--controller") from None
                out.append(part.strip())
    if not out:
        raise typer.BadParameter("give a controller's HOST:PORT", param_hint="--controller")
    return out


def _seconds(text: str, hint: str) -> float:
    try:
        value = parse_duration(text)
    except typer.BadParameter as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None
    return float(value)


def _table_cells(row: dict) -> dict:
    for k in ("sync_state_set", "in_sync_alive", "alive"):
        if isinstance(row.get(k), list):
            row[k] = ",".join(map(str, row[k]))
    return row


def watch_cmd(
    controller: Annotated[List[str], typer.Option("--controller", "-a", metavar="HOST:PORT", help="A controller "
                                                  "member's address (its controllerDLegerPeers port, as mqadmin -a "
                                                  "takes it); several with ';' or repeated. The leader is found "
                                                  "from any of them.", show_default=False)],
    broker: Annotated[Optional[List[str]], typer.Option("--broker", "-b", metavar="NAME", help="Only this broker set "
                                                        "(brokerName; repeatable). Default: every broker set the "
                                                        "controller's log names, read over the wire.",
                                                        show_default=False)] = None,
    bound: Annotated[str, typer.Option("--bound", metavar="DURATION", help="How long a broker set may have its master "
                                       "gone and an in-sync replica alive before the election counts as held back "
                                       "(90s, 2m; plain seconds).")] = "30s",
    interval: Annotated[str, typer.Option("--interval", metavar="DURATION", help="Time between looks.")] = "5s",
    once: Annotated[bool, typer.Option("--once", help="One verdict: look, and while a broker set waits for its "
                                                      "election, look again until it came or --bound passed; one "
                                                      "row per broker set, exit 1 when an election is held back.")]
    = False,
    run_for: Annotated[Optional[str], typer.Option("--for", metavar="DURATION", help="Without --once: stop after this "
                                                   "long (exit 1 if anything was found). Default: until "
                                                   "interrupted.", show_default=False)] = None,
    metrics_port: Annotated[Optional[int], typer.Option("--metrics-port", min=1, max=65535, help="Serve the broker "
                                                        "sets' series for Prometheus on this port (/metrics), "
                                                        "looking every --interval.", show_default=False)] = None,
    metrics_host: Annotated[str, typer.Option("--metrics-host", help="Address the metrics server listens on.")]
    = "127.0.0.1",
    timeout: TimeoutOpt = 3.0,
    fmt: FormatOpt = Format.table,
) -> None:
    """Watch a live RocketMQ 5 controller group for the failover it failed to make: a broker set whose master is
    gone while a replica of its SyncStateSet is alive, and no election followed within --bound (apache/rocketmq
    #9717, #10416, #10875). Each look asks the controller's leader (getControllerMetaData, then getSyncStateSet:
    master, SyncStateSet, each replica's liveness by the controller's heartbeats); the broker sets come from
    --broker or from the controller's own log, read over the wire. A master epoch that changes (an election
    followed) restarts the clock; a healthy failover stays quiet.

    --once prints one row per broker set and exits 1 when an election is held back. Without it, each finding is
    printed once as it appears (table: one line; json, jsonl: one object a line; csv: rows). --metrics-port serves
    the series of dledgerctl-controller(1), WATCH METRICS, while it runs."""
    addresses = _addresses(controller)
    bound_s, every = _seconds(bound, "--bound"), _seconds(interval, "--interval")
    if every <= 0:
        raise typer.BadParameter("must be more than 0 s", param_hint="--interval")
    stop_after = _seconds(run_for, "--for") if run_for is not None else None
    if once and stop_after is not None:
        raise typer.BadParameter("--for is for the watch loop; --once stops by itself", param_hint="--for")
    w = Watcher(addresses, bound_s, brokers=list(broker) if broker else None, timeout=timeout)
    server = None
    if metrics_port is not None:
        try:
            server = w.metrics.serve(metrics_host, metrics_port)
        except OSError as exc:
            raise fail(f"--metrics-port: cannot listen on {metrics_host}:{metrics_port}: {exc.strerror or exc}")
    try:
        if once:
            _once(w, every, bound_s, fmt)
        else:
            _loop(w, every, stop_after, fmt)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        if server is not None:
            server.shutdown()


def _once(w: Watcher, every: float, bound: float, fmt: Format) -> None:
    start = time.monotonic()
    while True:
        now = time.monotonic()
        _look, statuses, error = w.step(now)
        if error is not None:
            raise fail(error)
        if not any(s.state == WAITING for s in statuses) or now - start > bound + every:
            break
        time.sleep(min(every, max(0.1, bound - (now - start))))
    rows = [status_row(s) for s in statuses]
    if fmt in (Format.table, Format.csv):
        rows = [_table_cells(r) for r in rows]
    render(rows, fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    if w.log_stopped:
        typer.echo(f"Note: the controller's log stops at {w.log_stopped}", err=True)
    held = [s for s in statuses if s.state == HELD_BACK]
    typer.echo(f"{plural(len(statuses), 'broker set')}; {plural(len(held), 'election')} held back", err=True)
    if held:
        raise fail("; ".join(finding_text(s) for s in held))


def _loop(w: Watcher, every: float, stop_after: float | None, fmt: Format) -> None:
    start = time.monotonic()
    found = 0
    last_error = None
    writer = None
    while True:
        now = time.monotonic()
        _look, statuses, error = w.step(now)
        if error is not None and error != last_error:
            typer.echo(f"Note: {error}", err=True)  # (said once per outage; the loop keeps looking)
        last_error = error
        for s in statuses:
            if not s.new:
                continue
            found += 1
            row = status_row(s)
            row = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **row, "finding": finding_text(s)}
            if fmt == Format.table:
                typer.echo(f"{row['time']} {row['finding']}")
            elif fmt == Format.csv:
                if writer is None:
                    writer = csv.DictWriter(sys.stdout, fieldnames=FINDING_COLUMNS, extrasaction="ignore",
                                            lineterminator="\n")
                    writer.writeheader()
                writer.writerow(_table_cells(row))
            else:
                typer.echo(to_json(row))
            sys.stdout.flush()
        if stop_after is not None and time.monotonic() - start + every > stop_after:
            break
        time.sleep(max(0.0, every - (time.monotonic() - now)))
    if found:
        raise fail(f"{plural(found, 'election')} held back while watching")
