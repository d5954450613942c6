"""``controller check``: a controller's master epochs against the brokers' epoch files.

A broker in controller mode keeps ``<storePathRootDir>/epochFileCheckpoint``
(``MessageStoreConfig.getStorePathEpochFile``, unless ``storePathEpochFile`` names another
file; ``.bak`` beside it): the epochs of the
masters whose data it holds and the commit-log offset where each began
(``store/.../ha/autoswitch/EpochFileCache``, written by ``common/.../utils/CheckpointFile``:
a line with the number of entries, a line with the CRC32 of the entry lines, masked with
0x7fffffff as ``UtilAll.crc32`` does, then ``epoch-startOffset`` lines). A new master
appends the masterEpoch the controller gave it (``AutoSwitchHAService.changeToMaster``);
a slave copies its master's. Every epoch there is so one the controller's log reached for
that broker set, and one in which it elected a master.

Findings (rows): the controller log does not start at index 0 (its state cannot be rebuilt),
an entry the controller's apply fails on (it stops there: the epochs past it were never
reached), an epoch file that cannot be read (store.regular: a regular file only), epochs out
of order, an epoch the controller never reached (its masterEpoch is lower: the controller's
state was lost or replaced), an epoch in which the controller elected no master, a broker set
the controller does not know.
"""

from __future__ import annotations

import os

from .controller import ElectMaster, entries, require_controller_log
from .controller_state import ControllerState
from .epochs import BACKUP_SUFFIX, EPOCH_FILE, EpochEntry, EpochFileError, read_epochs

def read_epoch_file(store: str) -> tuple[list[EpochEntry], str]:
    """The entries of a broker's epoch file (``store``: the file, or the store root holding
    it), and which file gave them (the .bak when the file is empty or broken, as
    CheckpointFile.read falls back: epochs.read_epochs). EpochFileError when neither gives
    any, saying why."""
    got = read_epochs(store)
    if got.source is None:
        path = os.path.join(store, EPOCH_FILE) if os.path.isdir(store) else store
        raise EpochFileError("; ".join(got.problems) or f"{path}: no such file, nor {path}{BACKUP_SUFFIX}")
    return got.entries, got.source


def master_epochs(node_dir: str, **sizes) -> tuple[dict[str, dict[int, tuple]], int | None, tuple | None]:
    """Per broker set, each masterEpoch the log reached: epoch -> (master id or None, index,
    term) of the ElectMasterEvent that began it; the log's first index; and (index, term,
    why) of the entry the controller's apply fails on, where it stops (None: none)."""
    state = ControllerState()
    epochs: dict[str, dict[int, tuple]] = {}
    first = None
    for e in entries(node_dir, None, **sizes):
        if e.damage:
            continue
        first = e.index if first is None else first
        ev = e.decoded.event
        note, fails = state.apply(e.decoded)
        if fails:  # (the controller applies nothing past it: the epochs after it were never reached)
            return epochs, first, (e.index, e.term, note)
        if isinstance(ev, ElectMaster) and ev.broker_name in state.sync:
            sync = state.sync[ev.broker_name]
            epochs.setdefault(ev.broker_name, {})[sync.master_epoch] = (sync.master_broker_id, e.index, e.term)
    return epochs, first, None


FINDING_COLUMNS = ["finding", "broker_name", "broker_store", "epoch", "start_offset", "detail"]


def check(node_dir: str, broker_stores: list[tuple[str, str]], **sizes) -> list[dict]:
    """Findings for the controller at ``node_dir`` and ``(broker set, store root)`` pairs.
    controller.NotAControllerLog when the log at ``node_dir`` is no controller's."""
    require_controller_log(node_dir, **sizes)
    epochs, first, stop = master_epochs(node_dir, **sizes)
    out = []

    def finding(kind, name=None, store=None, epoch=None, start=None, detail=""):
        out.append({"finding": kind, "broker_name": name, "broker_store": store, "epoch": epoch,
                    "start_offset": start, "detail": detail})

    if first is None:
        finding("log-empty", detail=f"{node_dir}: no entries: the controller knows no broker set")
    elif first != 0:
        finding("log-head-missing", detail=f"{node_dir}: the log starts at index {first}, not 0 (its head files "
                "were deleted): the controller cannot rebuild its state, and these epochs lack what they held")
    if stop is not None:
        finding("apply-stops", detail=f"{node_dir}: index {stop[0]} (term {stop[1]}): {stop[2]}; the controller "
                "applies nothing past it (DLedger 0.3.1.2 tries it again at every commit): the epochs below are "
                "those it reached before it")
    for name, root in broker_stores:
        try:
            got, path = read_epoch_file(root)
        except EpochFileError as exc:
            finding("epoch-file-unreadable", name, root, detail=str(exc))
            continue
        known = epochs.get(name)
        if known is None:
            finding("broker-set-unknown", name, root, detail=f"the controller's log elects no master of {name}")
            continue
        top = max(known)
        prev = None
        for entry in got:
            if prev is not None and (entry.epoch <= prev.epoch or entry.start_offset < prev.start_offset):
                finding("epoch-order", name, root, entry.epoch, entry.start_offset,
                        f"after epoch {prev.epoch} from offset {prev.start_offset} ({os.path.basename(path)})")
            prev = entry
            if entry.epoch > top:
                finding("epoch-unknown", name, root, entry.epoch, entry.start_offset,
                        f"the controller's masterEpoch for {name} never passed {top}: its state was lost or "
                        "replaced after this broker served that epoch")
            elif entry.epoch in known and known[entry.epoch][0] is None:
                finding("epoch-without-master", name, root, entry.epoch, entry.start_offset,
                        f"the controller elected no master in epoch {entry.epoch} (index {known[entry.epoch][1]}, "
                        f"term {known[entry.epoch][2]})")
            elif entry.epoch not in known:
                finding("epoch-unknown", name, root, entry.epoch, entry.start_offset,
                        f"no ElectMasterEvent of the controller's log began epoch {entry.epoch}")
    return out
