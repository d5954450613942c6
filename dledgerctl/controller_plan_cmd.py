"""``dledgerctl controller elect-plan``: whom a RocketMQ 5 controller may make master of a
broker set, and what each choice cuts from the other replicas (store/rocketmq/electplan.py).
Registered on the ``controller`` sub-app by controller_cmd.py."""

from __future__ import annotations

from typing import Annotated, List, Optional

import typer

from store.rocketmq.electplan import LogDifference, controller_state, local_messages, plan, read_brokers

from .common import DataSizeOpt, FormatOpt, IndexSizeOpt, SelfIdOpt, errors_as_exit, fail, plural
from .render import Format, render

COLUMNS = ["row", "broker", "candidate", "may_elect", "last_epoch", "max_offset", "truncate_to", "cut_bytes",
           "acked_bytes", "messages", "acked_messages", "note"]
NOTE_QUEUES = 3  # queues a loss row's note names (json and jsonl: every one, in "cut")


def _id_pair(spec: str, hint: str) -> tuple[int, str]:
    bid, sep, rest = spec.partition("=")
    try:
        if not sep or not rest:
            raise ValueError
        return int(bid), rest
    except ValueError:
        raise typer.BadParameter(f"{spec!r} is not ID=VALUE (a broker id, a number)", param_hint=hint) from None


def elect_plan_cmd(
    dir: Annotated[str, typer.Argument(help="The controller's node directory (dledger-<selfId> under its "
                                            "controllerStorePath), or a base directory holding one.",
                                       show_default=False)],
    stores: Annotated[Optional[List[str]], typer.Argument(
        help="The broker set's replicas: each a controller-mode broker's store root (its brokerIdentity gives its "
             "broker id) or its digest file (mq digest --out).", show_default=False)] = None,
    store: Annotated[Optional[List[str]], typer.Option("--store", metavar="ID=DIR", help="A replica with its broker "
                                                       "id given (a store root or digest file). Repeatable.",
                                                       show_default=False)] = None,
    broker: Annotated[Optional[str], typer.Option("--broker", help="The broker set (brokerName); default: the "
                                                                   "only one in the controller's state.")] = None,
    down: Annotated[Optional[List[int]], typer.Option("--down", metavar="ID", help="A broker the controller does not "
                                                      "see alive (every replica given is taken as alive "
                                                      "otherwise). Repeatable.", show_default=False)] = None,
    unclean: Annotated[bool, typer.Option("--unclean", help="The controller runs with enableElectUncleanMaster: "
                                                            "brokers outside the SyncStateSet may be elected.")]
    = False,
    prefer: Annotated[Optional[int], typer.Option("--prefer", metavar="ID", help="The election designates this broker "
                                                  "(mqadmin electMaster -b ID).")] = None,
    priority: Annotated[Optional[List[str]], typer.Option("--priority", metavar="ID=N", help="A broker's "
                                                          "brokerElectionPriority (lower first; default "
                                                          "2147483647). Repeatable.", show_default=False)] = None,
    self_id: SelfIdOpt = None,
    data_file_size: DataSizeOpt = None,
    index_file_size: IndexSizeOpt = None,
    fmt: FormatOpt = Format.table,
) -> None:
    """For each broker of a broker set: whether the controller may make it master (alive and in the SyncStateSet,
    or only as unclean master), and what electing it would cut from every other replica given (each one's next
    handshake against the new master's epochs: bytes, messages), by RocketMQ 5.3.3's rules (ReplicasInfoManager,
    DefaultElectPolicy, EpochFileCache). The broker the controller itself would elect is marked. Acknowledged
    bytes: those below the smallest max offset among the SyncStateSet members' stores (held by every in-sync
    replica, so acknowledged whatever the ack mode). The verdict names the broker that cuts nothing, or the least
    and nothing acknowledged; exits 1 when no broker may be elected or every choice cuts acknowledged messages."""
    named = [_id_pair(s, "--store") for s in store or ()]
    prio = {}
    for spec in priority or ():
        bid, n = _id_pair(spec, "--priority")
        try:
            prio[bid] = int(n)
        except ValueError:
            raise typer.BadParameter(f"{spec!r}: the priority is not a number", param_hint="--priority") from None
    if not stores and not named:
        raise typer.BadParameter("give the broker set's replicas (store roots or digests), or --store ID=DIR",
                                 param_hint="STORES")
    sizes = dict(data_file_size=data_file_size, index_file_size=index_file_size)
    with errors_as_exit():
        s, notes = controller_state(dir, broker, self_id=self_id, **sizes)
        brokers = read_brokers(s, list(stores or ()), named, down=down or (), priorities=prio)
        p = plan(s, brokers, unclean=unclean, prefer=prefer, messages=local_messages, difference=LogDifference())
    rows = list(_rows(s, brokers, p))
    if fmt in (Format.table, Format.csv):
        for row in rows:
            for k in ("sync_state_set", "losing", "diverging"):
                if isinstance(row.get(k), list):
                    row[k] = ",".join(map(str, row[k]))
    render(rows, fmt, columns=COLUMNS if fmt in (Format.table, Format.csv) else None)
    for note in notes:
        typer.echo(f"Note: {note}", err=True)
    if s.master_epoch == 0:  # (ReplicasInfoManager.electMaster: isFirstTimeForElect)
        typer.echo(f"Note: {s.name} never had a master: the first broker whose own election request reaches the "
                   "controller becomes master, whatever the policy says", err=True)
    strangers = [b.broker_id for b in brokers if b.broker_id not in s.registered]
    if strangers:
        typer.echo(f"Note: broker {', '.join(map(str, strangers))} not registered for {s.name} in the controller's "
                   "state: the controller cannot elect it", err=True)
    typer.echo(f"{s.name}: master {s.master if s.master is not None else 'none'}, masterEpoch {s.master_epoch}, "
               f"SyncStateSet {sorted(s.sync_state_set)}; {plural(len(brokers), 'replica')} given", err=True)
    if not p["verdict"]["ok"]:
        raise fail(p["verdict"]["text"])


def _rows(s, brokers, p):
    acked = p["acked_end"]
    for b in brokers:
        role = ("master" if b.broker_id == s.master else "in-sync" if b.broker_id in s.sync_state_set else "replica")
        yield {"row": "member", "broker": b.broker_id, "candidate": None, "may_elect": None, "last_epoch": b.epoch,
               "max_offset": b.max_offset, "truncate_to": None, "cut_bytes": None, "acked_bytes": None,
               "messages": None, "acked_messages": None,
               "note": f"{role}, {'alive' if b.alive else 'down'}; {b.source}", "role": role, "alive": b.alive,
               "source": b.source, "min_offset": b.replica.min_offset, "priority": b.priority}
    for c in p["candidates"]:
        note = c.why + (f"; {c.problem}" if c.problem else "")
        if c.controller_choice:
            note += "; the controller " + ("keeps it as master" if c.kept else "would elect it")
        elif c.kept:
            note += "; the old master"
        if c.new_epoch is not None and c.may != "no":
            note += f"; master at epoch {c.new_epoch}"
        yield {"row": "candidate", "broker": c.broker_id, "candidate": c.broker_id, "may_elect": c.may,
               "last_epoch": None, "max_offset": None, "truncate_to": None, "cut_bytes": c.cut_bytes,
               "acked_bytes": c.acked_bytes, "messages": c.messages, "acked_messages": c.acked_messages, "note": note,
               "controller_choice": c.controller_choice, "new_epoch": c.new_epoch, "losing": c.losing,
               "diverging": c.diverging,
               "problem": c.problem}
    for loss in p["losses"]:
        if not loss.cut_bytes and loss.diverged_at is None:
            continue
        if loss.refused:
            note = (f"if {loss.candidate} is master: no consistent point, {loss.broker_id}'s handshake refuses "
                    "(its log must be cleared to rejoin)")
        elif loss.truncate_to is not None:
            note = f"if {loss.candidate} is master: truncated to {loss.truncate_to}"
        else:
            note = f"if {loss.candidate} is master: nothing truncated"
        if loss.diverged_at is not None:
            note += (f"; keeps bytes from offset {loss.diverged_at} that differ from {loss.candidate}'s (the handshake "
                     "compares epochs only: a divergence it does not repair)")
        if loss.acked_bytes:
            note += f", {loss.acked_bytes} acknowledged bytes (below {acked})"
        note += "".join(f"; {c.topic} queue {c.queue_id}: {plural(c.count, 'message')}, queue offsets "
                        f"{c.first_queue_offset}..{c.last_queue_offset}" for c in loss.cut[:NOTE_QUEUES])
        if len(loss.cut) > NOTE_QUEUES:
            note += f"; {plural(len(loss.cut) - NOTE_QUEUES, 'more queue')} (json: cut)"
        yield {"row": "loss", "broker": loss.broker_id, "candidate": loss.candidate, "may_elect": None,
               "last_epoch": None, "max_offset": None, "truncate_to": loss.truncate_to, "cut_bytes": loss.cut_bytes,
               "acked_bytes": loss.acked_bytes, "messages": loss.messages, "acked_messages": loss.acked_messages,
               "note": note, "refused": loss.refused, "diverged_at": loss.diverged_at,
               "cut": [{"topic": c.topic, "queue_id": c.queue_id, "count": c.count,
                        "first_queue_offset": c.first_queue_offset, "last_queue_offset": c.last_queue_offset}
                       for c in loss.cut]}
    v = p["verdict"]
    yield {"row": "verdict", "broker": ",".join(map(str, v["brokers"])) or None, "candidate": None,
           "may_elect": None, "last_epoch": None, "max_offset": None, "truncate_to": None, "cut_bytes": None,
           "acked_bytes": None, "messages": None, "acked_messages": None, "note": v["text"], "ok": v["ok"],
           "brokers": v["brokers"], "controller_choice": p["choice"], "acked_end": acked,
           "master": s.master, "master_epoch": s.master_epoch, "sync_state_set": sorted(s.sync_state_set)}
