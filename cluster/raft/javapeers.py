"""What a Java DLedger 0.2.7 follower can take of a dledgerctl leader's log (split from
dispatcher.py): only normal entries. Its recovery stops at any other magic (a no-op, a
config entry), so a leader sends it none, and says why in the follower's row."""

from __future__ import annotations

from store.format import ENTRY_HEADER, MAGIC_NORMAL

NOOP_NOTE = ("entry {index} is a no-op (magic 2), which DLedger 0.2.7 cannot read back: {peer} is not sent it "
              "and cannot follow past it (start every dledgerctl member of a group with Java members with "
              "--dledger-peers, so that none is written)")


def readable_by_java(raw, count: int):
    """The entries of a push a Java DLedger 0.2.7 follower can keep: those before the first
    that is not a normal entry (magic 1). Its recovery stops at any other magic, so a no-op
    sent to it would cost it every entry after it at its next restart."""
    off = 0
    for k in range(count):
        if ENTRY_HEADER.unpack_from(raw, off)[0] != MAGIC_NORMAL:
            return raw[:off], k
        off += ENTRY_HEADER.unpack_from(raw, off)[1]
    return raw, count
