"""The leader's data file size, learned from where it puts an entry. Pure: numbers in, a number out.

Every replica stores each entry at the leader's ``pos`` (DESIGN.md section 2): an entry that
does not fit in the rest of a data file with 8 bytes to spare (a BLANK header) starts the
next file, and the rest of the file is BLANK padding. Members whose data files differ in size
therefore place entries differently from the first file roll on. A member started without
the group's data file size runs on DLedger's 1 GiB default; the RocketMQ brokers of its group
write ``mappedFileSizeCommitLog`` files (often smaller). At the brokers' first roll it sees an
entry at ``pos`` past its own next position ``write_pos``: the leader padded
``[write_pos, pos)`` and began a file at ``pos``.

Rule (:func:`leader_file_size`). This member's log lies in one data file, its first entry at
``start`` (a log begins a data file: position 0, or the leader's first entry when the log was
cut back to it); the log ends at ``write_pos``; the pushed entry of ``size`` bytes is at
``pos``. Then the leader's files are ``pos - start`` bytes when all of these hold, and
nothing can be learned otherwise:

- ``pos > write_pos``, with room for the BLANK header between (the leader padded there);
- ``write_pos + size + 8 > pos``: the entry did not fit before ``pos`` (the leader had to roll);
- ``start`` is a multiple of ``pos - start``, which is smaller than this member's file size
  and holds the entry.

Why the answer is the only one: the entries from ``start`` to ``write_pos`` are the leader's
(compared with it, or appended from it) and lie back to back, so the leader began no file
inside ``(start, write_pos]`` (an entry may neither cross a file's start nor end within 8
bytes of it); ``start`` begins one of its files, and the next one begins at ``pos``. The store
checks its own side when it takes the size (``LogStore.adopt_data_file_size``: the log is in
one file, which fits). A member whose files are smaller than the leader's (it rolls where
the leader does not), or whose log already spans several files, cannot learn: it refuses the
entry and says which ``--data-file-size`` it needs (cluster/raft/follower.py).
"""

from __future__ import annotations

from store.format import MIN_BLANK_LEN


def leader_file_size(own_size: int, start: int, write_pos: int, pos: int, size: int) -> int | None:
    """The leader's data file size shown by an entry of ``size`` bytes it put at ``pos``,
    where this member's log (``own_size``-byte files) runs from ``start`` to ``write_pos``;
    None when the entry shows none (see the module's rule)."""
    if not 0 <= start < write_pos < pos or pos - write_pos < MIN_BLANK_LEN:
        return None
    if write_pos + size + MIN_BLANK_LEN <= pos:
        return None  # the entry fitted before pos: not a roll, the logs differ otherwise
    found = pos - start
    if found >= own_size or start % found or size + MIN_BLANK_LEN > found:
        return None
    return found


def fix_hint(size: int | None, own_files: int | None = None) -> str:
    """What the operator does about a refused position: start with the leader's size, on a
    store moved aside when this one holds files of ``own_files`` bytes (they cannot change)."""
    if size is not None:
        out = f"start this member with --data-file-size {size}, the leader's"
    else:
        out = ("start this member with --data-file-size N, the leader's data file size (a RocketMQ broker's "
               "mappedFileSizeCommitLog)")
    if own_files is not None:
        out += f", its store moved aside (its files are {own_files} bytes)"
    return out
