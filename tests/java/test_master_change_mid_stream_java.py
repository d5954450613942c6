"""A master change mid-stream (issue 61): RocketMQ 5.3.3's own store in controller mode
(tests/support/javarocketmq5ha.py: three AutoSwitchHAService replicas, the test playing the
controller) with puts flowing all the time from a producer thread (the harness's ``put``)
while the master moves 1 -> 2 -> 3 -> 1 over masterEpochs 1..4, with
``allAckInSyncStateSet=true``.

At each change the controller elects an in-sync replica (it becomes master at the next
epoch, SyncStateSet {it}) and refuses the old master's alterSyncStateSet from then on, while
the old master, not told yet, takes more puts: they wait for the acks of a SyncStateSet that
still names the new master and return FLUSH_SLAVE_TIMEOUT (not acknowledged), leaving it a
tail in the old epoch that its slaves may have copied. Then the producer moves to the new
master, the old master and the other replicas crash (SIGKILL: a slave whose confirm offset
lags its log does not shut down, see test_rocketmq5_ha_java), and the new master's files are
copied while no put runs. ``mq epochs`` and ``mq align`` read those files and predict each
slave's next handshake; each then rejoins as the new master's slave, and RocketMQ's
``truncateOffset is N`` must be the predicted consistent point, the messages cut those the
producer put there (none acknowledged), and the bytes it keeps the master's. One replica is
stopped during epoch 2 and comes back only in epoch 3. At the end every message acknowledged
under allAckInSyncStateSet is read back from the final master at its queue offset and
physical offset, and every message there is one the producer put where its put said.

No timing is asserted; every wait is bounded; every process is killed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time

from store.rocketmq.replica import log_extent
from tests.java.test_rocketmq5_ha_java import commitlog_digest, group, java  # noqa: F401 (fixtures)
from tests.support.commands import invoke_clean
from tests.support.javarocketmq5ha import HaGroup

BODY = 200
TOPIC = "TopicMid"
# slaveTimeout: how long a put waits for the SyncStateSet's acks (3 s by default); heartbeats
# every second carry the master's confirm offset to its slaves
OPTIONS = {"allAckInSyncStateSet": "true", "slaveTimeout": 800, "haSendHeartbeatInterval": 1000}


class Producer:
    """Puts ``batch`` messages at a time on ``target`` (a replica and the master epoch the test
    gave it) in a thread, recording every message: the replica, the epoch, its key, status,
    physical offset, size and queue offset. ``held()`` waits for the put under way to return
    and keeps the next one back (the target changes there, or files are copied)."""

    def __init__(self, batch: int = 3) -> None:
        self.batch = batch
        self.records: list[dict] = []
        self.target = None  # (replica, epoch)
        self._hold = threading.Lock()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._n = 0

    def start(self, replica, epoch: int) -> None:
        self.target = (replica, epoch)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._hold:
                    replica, epoch = self.target
                    prefix = f"b{self._n}"
                    self._n += 1
                    r = replica.put(TOPIC, 0, self.batch, BODY, prefix)
                    for i, status in enumerate(r["statuses"]):
                        self.records.append({"broker": replica.broker_id, "epoch": epoch, "key": f"{prefix}-{i}",
                                             "status": status, "offset": r["offsets"][i], "size": r["sizes"][i],
                                             "queue_offset": r["queue_offsets"][i]})
                time.sleep(0.005)  # (lets the test take the hold between two puts)
        except BaseException as exc:  # (reported by stop())
            self.error = exc

    @contextlib.contextmanager
    def held(self):
        with self._hold:
            self._raise()
            yield

    def _raise(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error}") from self.error

    def wait_for(self, predicate, what: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self.records):
            self._raise()
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not in {timeout} s ({len(self.records)} messages put)")
            time.sleep(0.05)

    def count_on(self, broker_id: int, epoch: int) -> int:
        return sum(1 for r in self.records if r["broker"] == broker_id and r["epoch"] == epoch)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        assert not self._thread.is_alive(), "the producer did not stop"
        self._raise()


def mq(*args) -> tuple[int, list[dict]]:
    r = invoke_clean("mq", *map(str, args), "-f", "json")
    assert r.exit_code in (0, 1), (r.exit_code, r.output)
    return r.exit_code, json.loads(r.stdout)


def crash(replica) -> dict:
    """Its state, then SIGKILL."""
    s = replica.state()
    replica.kill()
    return s


def snapshot(replica, dest: str) -> str:
    """A copy of a running replica's store root, taken while nothing writes to it (the
    producer held, the replica a master without slaves)."""
    shutil.copytree(replica.root, dest, ignore=shutil.ignore_patterns("lock"))
    return dest


def check_epochs(root: str, state: dict) -> None:
    """``mq epochs`` on the files against RocketMQ's own epoch cache (its last state): the same
    epochs from the same offsets, the last ending at the log's max offset, no error."""
    code, rows = mq("epochs", root)
    assert code == 0 and not [r for r in rows if r["row"] == "error"], rows
    ours = [(r["epoch"], r["start_offset"]) for r in rows if r["row"] == "epoch"]
    assert ours == [(e["epoch"], e["start"]) for e in state["epochs"]], (ours, state["epochs"])
    log, = [r for r in rows if r["row"] == "log"]
    assert log["end_offset"] == state["max_phy_offset"] == log_extent(root)[1]
    assert [r["end_offset"] for r in rows if r["row"] == "epoch"][-1] == state["max_phy_offset"]


def new_master(g: HaGroup, producer: Producer, old: int, new: int, epoch: int, others: list[int], tmp: str,
               outcome: list, down: dict) -> tuple[int, dict]:
    """The controller elects ``new`` at ``epoch`` while the producer puts on ``old``; ``old``
    takes puts past the new master's start (its tail); then the producer moves, ``old`` and
    ``others`` (running slaves, or down already: ``down`` holds their last states) crash, and
    ``mq align`` over the files predicts each one's handshake with ``new``, which each then
    makes as its slave. Returns the new epoch's start and, per slave, the prediction and what
    RocketMQ did (also appended to ``outcome``)."""
    sse = g[old].state()["roles"]["sync_state_set_epoch"]
    g[old].auto_accept(False)  # (the controller refuses an old master's alterSyncStateSet)
    g[new].auto_accept(True)
    m = g[new].master(epoch, sse + 1, [new])
    assert m["changed"] and m["path"] == "changeToMaster", m
    start = m["epochs"][-1]["start"]
    assert m["epochs"][-1]["epoch"] == epoch and start == m["max_phy_offset"]
    # the old master, not told yet, takes puts past it: none is acknowledged
    before = len(producer.records)
    producer.wait_for(lambda recs: any(r["broker"] == old and r["epoch"] == epoch - 1 and r["offset"] >= start
                                       for r in recs[before:]), f"a put on {old} past {start}")
    states = dict(down)
    with producer.held():
        producer.target = (g[new], epoch)
        for i in [old, *others]:
            if g[i].alive():
                states[i] = crash(g[i])
        snap = snapshot(g[new], os.path.join(tmp, f"snap-epoch{epoch}"))
        master_state = g[new].state()
    assert master_state["max_phy_offset"] == start == log_extent(snap)[1]
    check_epochs(snap, master_state)
    slaves = [old, *others]
    for i in slaves:
        if i in states:
            check_epochs(g[i].root, states[i])
    code, rows = mq("align", snap, *(g[i].root for i in slaves), "--master", snap)
    predicted = {}
    for i in slaves:
        row, = [r for r in rows if r["row"] == "replica" and r["replica"] == g[i].root]
        cuts = [r for r in rows if r["row"] == "cut" and r["replica"] == g[i].root]
        point = row["truncate_to"] if row["truncate_to"] is not None else row["max_offset"]
        # every slave here last held the epoch the old master ended, which the new master holds from
        # the same offset up to its start: the consistent point is the smaller end
        assert point == min(row["max_offset"], start), (row, start)
        assert row["first_difference"] is None or row["first_difference"] >= point, row  # (nothing kept differs)
        truth = [r for r in producer.records if r["broker"] == old and r["epoch"] == epoch - 1
                 and point <= r["offset"] < row["max_offset"]]
        assert row["cut_bytes"] == row["max_offset"] - point == sum(r["size"] for r in truth)
        assert [(c["topic"], c["queue_id"], c["count"], c["first_queue_offset"], c["last_queue_offset"])
                for c in cuts] == ([(TOPIC, 0, len(truth), min(r["queue_offset"] for r in truth),
                                     max(r["queue_offset"] for r in truth))] if truth else [])
        assert all(r["status"] != "PUT_OK" for r in truth), truth  # (nothing acknowledged is cut)
        predicted[i] = {"point": point, "cut_bytes": row["cut_bytes"], "cut_messages": len(truth),
                        "max_offset": row["max_offset"]}
    assert code == (1 if any(p["cut_bytes"] for p in predicted.values()) else 0)
    # each rejoins as the new master's slave: RocketMQ's handshake cuts what was predicted
    for i in slaves:
        seen = len(g[i].truncate_offsets())
        g[i].start()
        assert g[i].state()["max_phy_offset"] == predicted[i]["max_offset"]  # (its recovery kept what mq read)
        g[i].slave(g[new], epoch)
        g[i].wait_until(lambda s: len(g[i].truncate_offsets()) > seen, f"{i}'s handshake with {new}")
        got = g[i].truncate_offsets()[seen]
        predicted[i]["rocketmq"] = got
        outcome.append({"epoch": epoch, "master": new, "slave": i, **predicted[i]})
        assert got == predicted[i]["point"], (i, predicted[i], g[i].log_tail())
        assert f"Truncate slave log to {got} success" in g[i].log_text()
    return start, predicted


def test_master_moves_three_times_while_puts_flow(group, tmp_path):
    """1 master at epoch 1 (slaves 2, 3, SyncStateSet {1, 2, 3}), puts flowing; then 2 at epoch
    2, 3 at epoch 3 (1 stopped during epoch 2, back in epoch 3), 1 at epoch 4; each old
    master's tail past the new epoch's start is cut on it and on every slave that copied it,
    at the offset ``mq align`` predicted; nothing acknowledged is lost."""
    g = group
    for r in g.replicas.values():
        r.options.update(OPTIONS)
    outcome: list[dict] = []
    producer = Producer()
    try:
        g.start_master_and_slaves(master_id=1, epoch=1)
        g[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "SyncStateSet {1,2,3}")
        producer.start(g[1], 1)
        producer.wait_for(lambda recs: sum(r["status"] == "PUT_OK" for r in recs) >= 30, "30 acknowledged on 1")

        # 1 -> 2: 1's tail is cut on 1, and on 3 as far as 3 copied it
        s2, p2 = new_master(g, producer, 1, 2, 2, [3], str(tmp_path), outcome, {})
        assert p2[1]["cut_bytes"] > 0
        g[2].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "2's SyncStateSet {1,2,3}")
        n = producer.count_on(2, 2)
        producer.wait_for(lambda recs: producer.count_on(2, 2) >= n + 15, "puts on 2 in sync with 1 and 3")
        with producer.held():  # (1 stopped during epoch 2, caught up: back only in epoch 3)
            top = g[2].state()["max_phy_offset"]
            g[1].wait_until(lambda s: s["max_phy_offset"] == top, f"1 at 2's end {top}")
            down = {1: crash(g[1])}
        g[2].wait_until(lambda s: s["local_sync_state_set"] == [2, 3], "2's SyncStateSet {2,3}")
        n = producer.count_on(2, 2)
        producer.wait_for(lambda recs: producer.count_on(2, 2) >= n + 15, "puts on 2 that 1 misses")

        # 2 -> 3: 2's tail is cut on 2; 1 (down since epoch 2) keeps all it holds
        s3, p3 = new_master(g, producer, 2, 3, 3, [1], str(tmp_path), outcome, down)
        assert p3[2]["cut_bytes"] > 0 and p3[1]["cut_bytes"] == 0
        g[3].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "3's SyncStateSet {1,2,3}", timeout=60)
        n = producer.count_on(3, 3)
        producer.wait_for(lambda recs: producer.count_on(3, 3) >= n + 15, "puts on 3 in sync with 1 and 2")

        # 3 -> 1
        s4, p4 = new_master(g, producer, 3, 1, 4, [2], str(tmp_path), outcome, {})
        assert p4[3]["cut_bytes"] > 0
        g[1].wait_until(lambda s: s["local_sync_state_set"] == [1, 2, 3], "1's SyncStateSet {1,2,3}", timeout=60)
        n = producer.count_on(1, 4)
        producer.wait_for(lambda recs: producer.count_on(1, 4) >= n + 15, "puts on 1 in sync with 2 and 3")
        producer.stop()

        end = g.wait_caught_up(1)
        final = g[1].wait_until(lambda s: s["confirm_offset"] == end and s["dispatch_behind"] == 0, "1 dispatched")
        top = final["queues"][f"{TOPIC}/0"]
        messages = g[1].read_queue(TOPIC, 0, 0, top)
        assert [m["queue_offset"] for m in messages] == list(range(top))
        by_key = {}
        for r in producer.records:
            if r["offset"] >= 0:
                by_key.setdefault(r["key"], r)
        for m in messages:  # (every message the final master serves was put, where its put said)
            r = by_key[m["keys"]]
            assert (m["phy_offset"], m["size"]) == (r["offset"], r["size"]), (m, r)
            assert m["body"] == ((m["keys"] + " ") * BODY)[:BODY]
        acked = [r for r in producer.records if r["status"] == "PUT_OK"]
        served = {m["queue_offset"]: m for m in messages}
        lost = [r for r in acked if served.get(r["queue_offset"], {}).get("keys") != r["key"]
                or served[r["queue_offset"]]["phy_offset"] != r["offset"]]
        assert not lost, lost[:5]
        assert len(acked) >= 100 and len(messages) >= len(acked)

        for i in (2, 3):
            g[i].wait_until(lambda s: s["confirm_offset"] == end, f"{i}'s confirm offset at {end}")
        for i in (1, 2, 3):
            assert g[i].quit() == 0
        assert len({commitlog_digest(g[i].root, end) for i in (1, 2, 3)}) == 1
        assert all(g[i].epoch_file()["entries"] == [(1, 0), (2, s2), (3, s3), (4, s4)] for i in (1, 2, 3))
        code, rows = mq("align", *(g[i].root for i in (1, 2, 3)), "--master", g[1].root)
        assert code == 0 and all(r["cut_bytes"] == 0 for r in rows if r["row"] == "replica"), rows
    finally:
        producer._stop.set()
        print(json.dumps(outcome))
