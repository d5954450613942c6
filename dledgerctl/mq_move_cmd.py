"""``dledgerctl mq migrate``: leave DLedger mode, a broker store rewritten as a master-slave
one (store/rocketmq/migrate.py). Registered on the ``mq`` sub-app by app.py."""

from __future__ import annotations

from typing import Annotated

import typer

from store.rocketmq.commitlog import MAPPED_FILE_SIZE_COMMIT_LOG
from store.rocketmq.divided import log_bytes
from store.rocketmq.index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM
from store.rocketmq.layout import resolve_broker
from store.rocketmq.migrate import check_source, migrate

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, SelfIdOpt, errors_as_exit, parse_size, plural, progress_bar
from .mq_options import MAX_FILE_SIZE, MaxHashSlotOpt, MaxIndexNumOpt, check_index_shape, index_shape_for
from .render import Format, render

SUMMARY_COLUMNS = ["dest", "messages", "bytes", "queues", "units", "files", "left_out", "note"]


def migrate_cmd(
    src: Annotated[str, typer.Argument(help="A stopped broker's store root in DLedger mode (holding dledger-<id>/, "
                                            "consumequeue/ and config/), or its node directory. Only read.",
                                       show_default=False)],
    dest: Annotated[str, typer.Argument(help="The new master-slave store root: a directory that does not exist, "
                                             "or an empty one.", show_default=False)],
    commitlog_file_size: Annotated[int, typer.Option(
        "--commitlog-file-size", parser=parse_size, metavar="SIZE",
        help="Commit-log file size of the new store: the broker's mappedFileSizeCommitLog (default 1GiB).")
    ] = MAPPED_FILE_SIZE_COMMIT_LOG,
    include_uncommitted: Annotated[bool, typer.Option(
        "--include-uncommitted", help="Move the entries past the committed index too (a follower's may be cut by "
                                      "the leader; by default they are left out, and said). Entries a consume queue "
                                      "or the index points at count as committed whatever the checkpoint says.")
    ] = False,
    cut: Annotated[int | None, typer.Option(
        "--cut", min=-1, help="Move the entries up to this index: the group's committed index, the same for "
                              "every replica of a group (store elect shows each member's). Refused when this "
                              "replica proves an entry past it committed.")
    ] = None,
    controller_mode: Annotated[bool, typer.Option(
        "--controller-mode", help="Also write epochFileCheckpoint for a controller-mode broker (RocketMQ 5): one "
                                  "epoch, 0, from the log's first offset, so that each replica's first handshake "
                                  "keeps what it holds (docs/rocketmq.md, 'Into controller mode').")
    ] = False,
    skip_damaged: Annotated[bool, typer.Option(
        "--skip-damaged", help="Leave out entries whose own DLedger bodyCrc fails (changed since written) and list "
                               "them, their units kept as blank units; by default such an entry stops the move.")
    ] = False,
    max_hash_slot_num: MaxHashSlotOpt = None,
    max_index_num: MaxIndexNumOpt = None,
    id_map: Annotated[str | None, typer.Option(
        "--id-map", metavar="FILE", help="Also write FILE (CSV, a new file) with a row per message moved: its old and "
                                         "new offset message ids (store host + commit-log offset) and its UNIQ_KEY "
                                         "(columns old_msg_id, new_msg_id, uniq_key).")
    ] = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Write a master-slave broker store from a DLedger-mode one: commitlog/ (each message at its new offset),
    consumequeue/ with the same queue offsets (consumer offsets stay valid), index/ rebuilt (queries by key and
    UNIQ_KEY), checkpoint, config/ and RocketMQ 5's compaction/ copied, its timerlog/ at the new offsets (a store
    with batchconsumequeue/ is refused).

    Only committed entries unless --include-uncommitted: the checkpoint's committed index, or further what a
    consume queue or the index points at (the broker dispatches only committed entries). An entry whose own bodyCrc
    fails stops the move unless --skip-damaged. DEST appears only when complete. One summary row: messages, bytes,
    queues, units, commit-log files, messages left out."""
    if cut is not None and include_uncommitted:
        raise typer.BadParameter("it moves the entries up to the cut only: not with --include-uncommitted",
                                 param_hint="--cut")
    if max_hash_slot_num is not None or max_index_num is not None:
        check_index_shape(max_hash_slot_num or MAX_HASH_SLOT_NUM, max_index_num or MAX_INDEX_NUM)
    if commitlog_file_size > MAX_FILE_SIZE:
        raise typer.BadParameter(f"{commitlog_file_size} bytes: RocketMQ's mapped files hold at most {MAX_FILE_SIZE} "
                                 "(a Java int)", param_hint="--commitlog-file-size")
    with errors_as_exit():
        broker = resolve_broker(src, self_id)
        check_source(broker)  # (before the index/ files' shape: a node directory's index/ is DLedger's own)
        shape = index_shape_for(broker.root or broker.node_dir, max_hash_slot_num, max_index_num)
        with progress_bar("migrating messages", log_bytes(broker.node_dir)) as advance:
            summary = migrate(broker, dest, commitlog_file_size=commitlog_file_size,
                              include_uncommitted=include_uncommitted, data_file_size=data_file_size,
                              index_file_size=index_file_size, progress=advance,
                              max_hash_slot_num=shape.slots, max_index_num=shape.index_num, id_map=id_map,
                              skip_damaged=skip_damaged, cut=cut, controller_mode=controller_mode)
    row = summary.row()
    render([row], fmt, columns=SUMMARY_COLUMNS if fmt in (Format.table, Format.csv) else None)
    left = (f"; left out {plural(summary.left_out, 'message')} past the committed index {summary.committed_index}"
            if summary.left_out else "")
    if summary.damaged:
        left += (f"; left out {plural(len(summary.damaged), 'damaged entry', 'damaged entries')}: "
                 + ", ".join(f"{i} (offset {o})" for i, o in summary.damaged))
    if summary.epochs:
        left += "; epochFileCheckpoint: " + ", ".join(f"epoch {e} from offset {o}" for e, o in summary.epochs)
    typer.echo(f"{summary.dest}: {plural(summary.messages, 'message')} in {plural(summary.files, 'commit-log file')}, "
               f"{plural(summary.units, 'unit')} in {plural(summary.queues, 'consume queue')}, "
               f"{plural(summary.index_keys, 'key')} in {plural(summary.index_files, 'index file')}{left}", err=True)
