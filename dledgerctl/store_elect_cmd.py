"""``dledgerctl store elect``: before restarting a stopped group, who can lead and what each
choice cuts (DLedger's vote rules over the members' files: store/elect.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, List, Optional

import typer

from store.elect import elect
from store.kinds import NOT_DLEDGER, refuse

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, errors_as_exit, fail
from .render import Format, render

ElectDirsArg = Annotated[List[str], typer.Argument(
    help="Each member's node directory (dledger-<id>), or a base directory holding several.",
    show_default=False)]
ElectPeersOpt = Annotated[Optional[str], typer.Option(
    "--peers", "-p", help="All members ('n0-HOST:PORT;n1-HOST:PORT;...' or 'n0,n1,n2'); default: the members "
    "whose directories are given. A majority of these must vote for a leader.")]

COLUMNS = ["row", "member", "term", "vote", "end_term", "end_index", "committed", "electable", "votes_from",
           "cut", "committed_cut", "note"]


def elect_cmd(
    dirs: ElectDirsArg,
    peers: ElectPeersOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """Who can win an election among stopped members, by whose votes, and what every other member would lose if
    it led (DLedger's vote rules, offline). Exits 1 when no member can win or every one that can cuts committed
    entries."""
    with errors_as_exit():
        for d in dirs:  # (a master-slave store's index/ once read as a node's: "nothing is cut")
            refuse(d, NOT_DLEDGER, "store elect reads DLedger members' node directories (dledger-<id>) or "
                   "directories holding them")
        plan = elect(dirs, peers, data_file_size=data_file_size, index_file_size=index_file_size)
    rows = list(_rows(plan))
    render(rows, fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    if not plan["verdict"]["ok"]:
        raise fail(plan["verdict"]["text"])


def _rows(plan: dict):
    for m in plan["members"]:
        note = "; ".join(([m.problem] if m.problem else []) + m.notes)
        yield {"row": "member", "member": m.id, "term": m.term, "vote": m.vote_for or "", "end_term": m.end_term,
               "end_index": m.end_index, "committed": m.committed_index, "electable": None, "votes_from": None,
               "cut": None, "committed_cut": None, "note": note or ("cannot take part" if m.problem else "")}
    for c in plan["candidates"]:
        if c["problem"]:
            note = "cannot run: its files cannot be read"
        else:
            first = ", ".join(f"{v}: {a}" for v, a in c["first_round"].items())
            rejected = ", ".join(f"{v}: {a}" for v, a in c["rejected_by"].items())
            note = (f"needs {c['majority']} of {len(plan['peers'])} votes; "
                    + (f"rejected by {rejected}; " if rejected else "") + f"first round: {first}")
        yield {"row": "candidate", "member": c["candidate"], "term": None, "vote": None, "end_term": None,
               "end_index": None, "committed": None, "electable": c["electable"],
               "votes_from": ",".join(c["votes_from"]), "cut": c["indexes_cut"], "committed_cut": c["committed_cut"],
               "entries_cut": c["entries_cut"], "members_losing": c["members_losing"],
               "note": note, "first_round": c["first_round"], "rejected_by": c["rejected_by"]}
    for loss in plan["losses"]:
        if not loss["entries_cut"]:
            continue
        yield {"row": "loss", "member": loss["member"], "term": None, "vote": None, "end_term": None,
               "end_index": None, "committed": None, "electable": None, "votes_from": None,
               "cut": loss["entries_cut"], "committed_cut": loss["committed_cut"],
               "note": _loss_note(loss), "leader": loss["leader"], "cut_from": loss["cut_from"],
               "cut_to": loss["cut_to"], "last_common_index": loss["last_common_index"], "messages": loss["messages"]}
    v = plan["verdict"]
    yield {"row": "verdict", "member": ",".join(v["leaders"]), "term": None, "vote": None, "end_term": None,
           "end_index": None, "committed": None, "electable": None, "votes_from": None, "cut": None,
           "committed_cut": None, "note": v["text"], "ok": v["ok"], "leaders": v["leaders"]}


def _loss_note(loss: dict) -> str:
    out = f"if {loss['leader']} leads: entries {loss['cut_from']}..{loss['cut_to']} cut"
    msgs = loss["messages"]
    if msgs:
        topics = ", ".join(f"{t} {n}" for t, n in sorted(msgs["topics"].items()))
        out += (f"; {msgs['messages']} messages ({topics}) stored {_when(msgs['first_store_time'])}"
                f"..{_when(msgs['last_store_time'])}")
    return out


def _when(ms: int) -> str:
    try:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError):
        return str(ms)
