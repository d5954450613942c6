"""Controller log entries as RocketMQ 5's ``EventSerializer`` writes them, for tests only:
the type id as a big-endian i16, then the event as fastjson writes it by default (its
getters' properties in name order, null ones left out, ``eventType`` as the enum's name,
sets of Long as JSON arrays). tests/support/javarocketmq5.py has RocketMQ's own classes write them
(tests/java/test_rocketmq_controller_java.py); this one needs no JDK."""

from __future__ import annotations

import json
import os
import zlib

from store.filestore import FileStore

ENUM = {1: "ALTER_SYNC_STATE_SET_EVENT", 2: "APPLY_BROKER_ID_EVENT", 3: "ELECT_MASTER_EVENT", 4: "READ_EVENT",
        5: "CLEAN_BROKER_DATA_EVENT", 6: "UPDATE_BROKER_ADDRESS"}


def _event(tid: int, props: dict) -> bytes:
    props = {k: v for k, v in {**props, "eventType": ENUM[tid]}.items() if v is not None}
    text = json.dumps(dict(sorted(props.items())), separators=(",", ":"), ensure_ascii=False)
    return tid.to_bytes(2, "big") + text.encode("utf-8")


def alter_sync_state_set(broker: str, ids) -> bytes:
    return _event(1, {"brokerName": broker, "newSyncStateSet": sorted(ids)})


def apply_broker_id(cluster: str, broker: str, address: str, broker_id: int, code: str) -> bytes:
    return _event(2, {"clusterName": cluster, "brokerName": broker, "brokerAddress": address,
                      "newBrokerId": broker_id, "registerCheckCode": code})


def elect_master(broker: str, master: int | None, elected: bool = True) -> bytes:
    return _event(3, {"brokerName": broker, "newMasterElected": elected, "newMasterBrokerId": master})


def clean_broker_data(broker: str, ids=()) -> bytes:
    return _event(5, {"brokerName": broker, "brokerIdSetToClean": sorted(ids)})


def update_broker_address(cluster: str, broker: str, address: str, broker_id: int) -> bytes:
    return _event(6, {"clusterName": cluster, "brokerName": broker, "brokerAddress": address, "brokerId": broker_id})


def write_epoch_file(root: str, epochs: list[tuple[int, int]], *, crc: int | None = None, name: str =
                     "epochFileCheckpoint") -> str:
    """A broker's epoch file as RocketMQ's CheckpointFile writes it: the number of entries,
    the CRC32 of the entry lines (masked with 0x7fffffff; ``crc`` overrides it), then
    ``epoch-startOffset`` lines."""
    body = "".join(f"{e}-{o}\n" for e, o in epochs)
    if crc is None:
        crc = zlib.crc32(body.encode()) & 0x7FFFFFFF
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, name)
    with open(path, "w") as fh:
        fh.write(f"{len(epochs)}\n{crc}\n{body}")
    return path


def write_controller_log(base: str, entries: list[tuple[int, bytes]], *, self_id: str = "n0",
                         data_file_size: int = 1 << 20) -> str:
    """Append ``(term, body)`` entries to ``base/dledger-<id>``, all committed; return the
    node directory."""
    node = os.path.join(base, f"dledger-{self_id}")
    with FileStore.open(node, data_file_size=data_file_size, index_file_size=1 << 20) as store:
        for term, body in entries:
            store.append(body, term)
        store.set_committed(store.end_index)
        store.persist_checkpoint()
    return node
