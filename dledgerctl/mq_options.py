"""Options and checks the mq commands that write RocketMQ files share (migrate, rebuild): the
index/ files' shape and RocketMQ's largest mapped file."""

from __future__ import annotations

from typing import Annotated

import typer

from store.rocketmq.index import MAX_HASH_SLOT_NUM, MAX_INDEX_NUM
from store.rocketmq.lookup import IndexShape, index_file_bytes, index_shape

MAX_FILE_SIZE = (1 << 31) - 1  # MappedFile.fileSize is an int
# the broker's index/ files' shape (both must match the broker's: it maps the files by them)
MaxHashSlotOpt = Annotated[int | None, typer.Option(
    "--max-hash-slot-num", min=1, show_default=False,
    help="Hash slots per index/ file: the broker's maxHashSlotNum (it must match: the broker maps the files by it). "
         "Default: the shape of the index/ files there are (RocketMQ's 5000000 when they are of its default shape "
         "or there are none).")]
MaxIndexNumOpt = Annotated[int | None, typer.Option(
    "--max-index-num", min=2, show_default=False,
    help="Entries per index/ file: the broker's maxIndexNum (it must match). Default: as for --max-hash-slot-num "
         "(RocketMQ's 20000000); with only one of the two given, the other is what the index/ files' length leaves "
         "for it.")]


def check_index_shape(max_hash_slot_num: int, max_index_num: int) -> None:
    """A usage error when index files of that shape would not fit a Java int's bytes."""
    if index_file_bytes(max_hash_slot_num, max_index_num) > MAX_FILE_SIZE:
        raise typer.BadParameter(f"index files of {max_hash_slot_num} slots and {max_index_num} entries pass "
                                 f"RocketMQ's {MAX_FILE_SIZE} bytes (a Java int)", param_hint="--max-index-num")


def index_shape_for(root: str, max_hash_slot_num: int | None, max_index_num: int | None) -> IndexShape:
    """The index files' shape for the broker at ``root`` (store.rocketmq.lookup.index_shape:
    the options when given, else read off its index/ files), checked to fit a Java int;
    its note, when there is one, is said on stderr."""
    shape = index_shape(root, max_hash_slot_num, max_index_num, (MAX_HASH_SLOT_NUM, MAX_INDEX_NUM))
    check_index_shape(shape.slots, shape.index_num)
    if shape.note:
        typer.echo(f"note: {shape.note}", err=True)
    return shape
