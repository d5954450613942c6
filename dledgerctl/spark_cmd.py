"""``dledgerctl spark ...``: the PySpark jobs of dledgerctl.pipeline, for many nodes at once.

pyspark is an optional extra: it is imported (through dledgerctl.pipeline) only inside a
command, so the rest of the tool works without it and a ``spark`` command without it says
how to install it.
"""

from __future__ import annotations

import importlib
import logging
import sys
from contextlib import contextmanager
from enum import Enum
from typing import Annotated, Iterator, Optional

import typer

from store.rocketmq.message import MAX_MESSAGE_SIZE

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, MaxBodyOpt, errors_as_exit, fail, log
from .render import Format, render

app = typer.Typer(help="Audit, compare, summarise and export the logs of many nodes with PySpark.",
                  no_args_is_help=True)

INSTALL_HINT = "pyspark is not installed; install it with: pip install 'dledgerctl[spark]'"
_MISSING = ("pyspark", "pyarrow", "py4j")


class OutputFormat(str, Enum):
    parquet = "parquet"
    json = "json"
    csv = "csv"


PathsArg = Annotated[list[str], typer.Argument(
    help="Node directories (dledger-<id>), base directories holding them, or globs of either.", show_default=False)]
MqPathsArg = Annotated[list[str], typer.Argument(
    help="Node directories (dledger-<id>), broker store roots holding them, master-slave broker store roots "
         "(commitlog/, as mq migrate writes them), or globs of any; one run may mix both kinds.", show_default=False)]
MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", help="Spark master: local[*] (default), local[N], spark://HOST:PORT, yarn, k8s://...")]
ConfOpt = Annotated[Optional[list[str]], typer.Option(
    "--conf", metavar="KEY=VALUE", help="A Spark setting, e.g. spark.executor.memory=4g (repeatable).")]
ShipOpt = Annotated[Optional[bool], typer.Option(
    "--ship/--no-ship", help="Send dledgerctl's store and pipeline code to the executors as a zip (default: yes "
                             "for a cluster master, no for local[...]).", show_default=False)]
OutputOpt = Annotated[Optional[str], typer.Option(
    "--output", "-o", metavar="PATH", help="Also write the result rows with Spark to PATH (a directory; must not "
                                          "exist).")]
OutputFormatOpt = Annotated[OutputFormat, typer.Option(
    "--output-format", help="Format of --output: parquet, json or csv.", case_sensitive=False)]


def _pipeline():
    """The pipeline modules, or one error line when pyspark (or pyarrow) is missing."""
    try:
        return {name: importlib.import_module(f"dledgerctl.pipeline.{name}")
                for name in ("errors", "inputs", "session", "jobs", "audit", "messages", "alignment")}
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] in _MISSING:
            raise fail(INSTALL_HINT) from None
        raise


def _conf(pairs: list[str] | None) -> dict[str, str]:
    out = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--conf")
        out[key.strip()] = value.strip()
    return out


@contextmanager
def _spark(master: str | None, conf: list[str] | None, ship: bool | None, paths: list[str],
           job: str | None = None, plan=None) -> Iterator[tuple]:
    """The nodes PATHS name, a Spark session and the pipeline modules; every failure becomes
    one error line. The nodes are found first, on this machine (inputs.py): a wrong path or a
    store the job cannot read is refused in milliseconds, before a JVM starts. ``job``: one
    that reads DLedger logs only (audit, diverge, stats, export); None for the mq jobs.
    ``plan``: a function of the pipeline modules that reads the inputs instead (mq-align)."""
    settings = _conf(conf)
    mods = _pipeline()
    session = mods["session"]
    verbose = log.getEffectiveLevel() <= logging.INFO
    with errors_as_exit():
        try:
            nodes = (plan(mods) if plan else mods["jobs"].dledger_nodes(paths, job) if job
                     else mods["inputs"].resolve_nodes(paths))
            with session.spark_errors():
                with _starting(master):
                    spark, started = session.start_session(master, settings, ship=ship, verbose=verbose)
                try:
                    yield spark, mods, nodes
                finally:
                    if started:
                        spark.stop()
        except mods["errors"].PipelineError as exc:
            raise fail(str(exc)) from None


@contextmanager
def _starting(master: str | None):
    """A spinner while Spark starts, on a terminal only."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(f"starting Spark ({master or 'local[*]'})"):
        yield


@contextmanager
def _progress(spark, mods, description: str):
    """A bar of Spark tasks done (one task per data file while reading), on a terminal only."""
    if not sys.stderr.isatty():
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(), "tasks",
                  TimeElapsedColumn(), console=Console(stderr=True), transient=True) as prog:
        task = prog.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            prog.update(task, completed=done, total=total)

        with mods["session"].watch_tasks(spark, update):
            yield


def _write(df, output: str | None, fmt: OutputFormat) -> None:
    if not output:
        return
    from pyspark.sql import functions as F  # noqa: F401 - pyspark is present: a session runs

    if fmt == OutputFormat.csv:
        nested = [f.name for f in df.schema.fields if f.dataType.typeName() in ("array", "struct", "map")]
        for name in nested:
            df = df.withColumn(name, F.to_json(name))
        df.write.option("header", "true").option("escape", '"').csv(output)  # RFC 4180 quotes
    elif fmt == OutputFormat.json:
        df.write.json(output)
    else:
        df.write.parquet(output)
    typer.echo(f"wrote {output} ({fmt.value})", err=True)


AUDIT_TABLE = ["node", "verdict", "entries", "bytes", "begin_index", "end_index", "terms", "end_term", "crc_failures",
               "index_gaps", "index_disagreements", "unreadable", "errors", "warnings"]
PROBLEM_TABLE = ["node", "severity", "code", "file", "offset", "index", "message"]


@app.command("audit")
def audit_cmd(
    paths: PathsArg,
    no_crc: Annotated[bool, typer.Option("--no-crc", help="Skip checksum verification (faster).")] = False,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    fmt: FormatOpt = Format.table,
) -> None:
    """Check every node's files as 'store verify' does; exit 1 when a node has a problem.

    One row per node: entries, bytes, index range, terms, CRC failures, index gaps,
    disagreements with the index file, unreadable records, and a verdict (ok or damaged)."""
    with _spark(master, conf, ship, paths, "audit") as (spark, mods, nodes):
        with _progress(spark, mods, "audit"):
            rows = mods["audit"].audit_rows(spark, nodes, data_file_size=data_file_size,
                                            index_file_size=index_file_size, check_crc=not no_crc)
        if output:
            _write(mods["audit"].as_dataframe(spark, rows), output, output_format)
    if fmt in (Format.json, Format.jsonl):
        render(rows, fmt)
    elif fmt == Format.csv:
        render(rows, fmt, columns=["node", "node_dir"] + [c for c in rows[0] if c not in ("node", "node_dir", "problems")]
               if rows else None)
    else:
        problems = [{"node": r["node"], **p} for r in rows for p in r["problems"]]
        if problems:
            render(problems, fmt, columns=PROBLEM_TABLE)
            typer.echo("")
        render(rows, fmt, columns=AUDIT_TABLE)
    if any(r["verdict"] != "ok" for r in rows):
        raise typer.Exit(1)


@app.command("diverge")
def diverge_cmd(
    paths: PathsArg,
    all_pairs: Annotated[bool, typer.Option("--all-pairs", help="Compare every pair of nodes given, not only nodes "
                                                                "under one base directory.")] = False,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    fmt: FormatOpt = Format.table,
) -> None:
    """For each pair of replicas: last common index and first index where they differ.

    Replicas are the nodes under one base directory (a group), unless --all-pairs. Exit 0
    when every pair is identical, 1 when one differs."""
    with _spark(master, conf, ship, paths, "diverge") as (spark, mods, nodes):
        with _progress(spark, mods, "diverge"):
            df = mods["jobs"].diverge(spark, nodes, all_pairs=all_pairs)
        rows = [r.asDict() for r in df.collect()]
        _write(df, output, output_format)
    render(rows, fmt)
    if any(not r["identical"] for r in rows):
        raise typer.Exit(1)


@app.command("stats")
def stats_cmd(
    paths: PathsArg,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    plot: Annotated[Optional[str], typer.Option("--plot", metavar="FILE.png", help="Also draw the leader history "
                                                "(each node's term per index range) and bytes per term, as a "
                                                "PNG.")] = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Entries and bytes per term per node, with each term's first and last index (leader history)."""
    with _spark(master, conf, ship, paths, "stats") as (spark, mods, nodes):
        with _progress(spark, mods, "stats"):
            df = mods["jobs"].stats(spark, nodes).cache()
            rows = [r.asDict() for r in df.collect()]
        _write(df, output, output_format)
    if plot is not None:
        from .plots import PlotError, leader_history
        try:
            leader_history(rows, plot)
        except PlotError as exc:
            raise fail(str(exc)) from None
    render(rows, fmt)


@app.command("export")
def export_cmd(
    paths: PathsArg,
    to: Annotated[str, typer.Option("--to", metavar="DIR", help="Directory to write Parquet into (node=NAME/ "
                                                                "below it); must not exist or be empty.",
                                    show_default=False)],
    committed_only: Annotated[bool, typer.Option("--committed-only", help="Only entries up to each node's committed "
                                                                          "index (from its checkpoint).")] = False,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Write entries with their bodies to Parquet, partitioned by node; print what was written."""
    with _spark(master, conf, ship, paths, "export") as (spark, mods, nodes):
        with _progress(spark, mods, "export"):
            df = mods["jobs"].export(spark, nodes, to, committed_only=committed_only)
            rows = [r.asDict() for r in df.collect()]
    render(rows, fmt)


@app.command("mq-topics")
def mq_topics_cmd(
    paths: MqPathsArg,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    fmt: FormatOpt = Format.table,
) -> None:
    """Per node, topic and queue of RocketMQ brokers' logs: messages, bytes, first/last queue offset and store time.

    DLedger-mode and master-slave stores alike (one Spark task per data or commit-log file): the rows mq topics
    gives of each."""
    with _spark(master, conf, ship, paths) as (spark, mods, nodes):
        with _progress(spark, mods, "mq-topics"):
            df = mods["messages"].mq_topics(spark, nodes).cache()
            rows = [r.asDict() for r in df.collect()]
        _write(df, output, output_format)
    render(rows, fmt)


@app.command("mq-find")
def mq_find_cmd(
    paths: MqPathsArg,
    key: Annotated[Optional[list[str]], typer.Option("--key", help="A key among a message's KEYS (repeat: any of "
                                                                   "them).")] = None,
    msg_id: Annotated[Optional[str], typer.Option("--msg-id", help="A message id: RocketMQ's offset msgId (store "
                                                                    "host and commit-log offset, in hex) or the "
                                                                    "producer's UNIQ_KEY, as mqadmin queryMsgById "
                                                                    "takes either; the 'matched' column says "
                                                                    "which.")] = None,
    uniq_key: Annotated[Optional[str], typer.Option("--uniq-key", help="A message's UNIQ_KEY (the id a producer "
                                                                        "gives it).")] = None,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    fmt: FormatOpt = Format.table,
) -> None:
    """Which nodes hold a RocketMQ message, at which index: one row per copy found. Exit 1 when none is found.

    With several options, a message must match them all. On a master-slave store, as in mq messages, index is the
    message's ordinal in the commit log and pos its offset - 48."""
    with _spark(master, conf, ship, paths) as (spark, mods, nodes):
        with _progress(spark, mods, "mq-find"):
            df = mods["messages"].mq_find(spark, nodes, key=tuple(key or ()) or None, msg_id=msg_id,
                                                   uniq_key=uniq_key).cache()
            rows = [r.asDict() for r in df.collect()]
        _write(df, output, output_format)
    render(rows, fmt)
    if not rows:
        raise typer.Exit(1)


@app.command("mq-export")
def mq_export_cmd(
    paths: MqPathsArg,
    to: Annotated[str, typer.Option("--to", metavar="DIR", help="Directory to write Parquet into (node=NAME/ "
                                                                "below it); must not exist or be empty.",
                                    show_default=False)],
    committed_only: Annotated[bool, typer.Option("--committed-only", help="Only messages up to each node's "
                                                                          "committed index (from its checkpoint; a "
                                                                          "master-slave store has none: all its "
                                                                          "messages).")]
    = False,
    max_body: MaxBodyOpt = MAX_MESSAGE_SIZE,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Write RocketMQ messages with their columns (topic, queue, msg id, tags, keys, properties, times, hosts) and
    bodies (uncompressed) to Parquet, partitioned by node; print what was written.

    On a master-slave store, as in mq messages, index is the message's ordinal in the commit log, pos its offset - 48,
    term null and file its commitlog/ file."""
    with _spark(master, conf, ship, paths) as (spark, mods, nodes):
        with _progress(spark, mods, "mq-export"):
            df = mods["messages"].mq_export(spark, nodes, to, committed_only=committed_only,
                                                 max_body=max_body)
            rows = [r.asDict() for r in df.collect()]
    render(rows, fmt)


def _groups(specs: list[str] | None) -> list[tuple[str, list[str]]]:
    out = []
    for spec in specs or []:
        name, sep, paths = spec.partition("=")
        members = [p for p in paths.split(",") if p]
        if not sep or not name.strip() or not members:
            raise typer.BadParameter(f"{spec!r} is not NAME=PATH[,PATH...]", param_hint="--group")
        out.append((name.strip(), members))
    return out


@app.command("mq-align")
def mq_align_cmd(
    paths: Annotated[Optional[list[str]], typer.Argument(
        help="Replicas of broker groups: store roots (stopped, on storage the executors share) or digest files (mq "
             "digest --out), or globs; each grouped by the brokerName of its brokerIdentity.", show_default=False)]
    = None,
    group: Annotated[Optional[list[str]], typer.Option(
        "--group", metavar="NAME=PATH,PATH...", help="A group's replicas named here, identity or not (repeatable).")]
    = None,
    master_replica: Annotated[Optional[list[str]], typer.Option(
        "--master-replica", metavar="PATH", help="The replica that is (or will be) its group's master (repeatable: one "
                                                 "per group); default: the newest last epoch, then the longest "
                                                 "log.")] = None,
    master_epoch: Annotated[Optional[int], typer.Option(
        "--master-epoch", min=0, help="Predict with each master's epochs after it becomes master at this epoch (1 for "
                                      "a new broker set).")] = None,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    ship: ShipOpt = None,
    output: OutputOpt = None,
    output_format: OutputFormatOpt = OutputFormat.parquet,
    fmt: FormatOpt = Format.table,
) -> None:
    """mq align for a fleet: one row per (group, slave), where it first differs from its master and what its next
    handshake does; exit 1 when a group is not aligned.

    One Spark task per commit-log file: store roots are compared to the byte, a digest to the chunk."""
    named = _groups(group)
    if not paths and not named:
        raise typer.BadParameter("give replicas (store roots or digest files) or --group", param_hint="PATHS")

    def plan(mods):
        return mods["alignment"].plan_groups(paths or [], named, master_replica or [], master_epoch)

    with _spark(master, conf, ship, [], plan=plan) as (spark, mods, groups):
        with _progress(spark, mods, "mq-align"):
            rows = mods["alignment"].align_rows(spark, groups)
        if output:
            _write(mods["alignment"].as_dataframe(spark, rows), output, output_format)
        columns = {Format.table: mods["alignment"].MQ_ALIGN_TABLE, Format.csv: mods["alignment"].MQ_ALIGN_COLUMNS[:-1]}
    render(rows, fmt, columns=columns.get(fmt))
    bad = sorted({r["group"] for r in rows if not r["aligned"]})
    alone = [g.name for g in groups if len(g.inputs) < 2]
    typer.echo(f"{len(groups)} groups, {sum(len(g.inputs) for g in groups)} replicas: "
               + (f"{len(bad)} not aligned ({', '.join(bad)})" if bad else "every group aligned")
               + (f"; one replica only, nothing compared: {', '.join(alone)}" if alone else ""), err=True)
    if bad:
        raise typer.Exit(1)
