"""Our own encoder of RocketMQ messages and consume-queue units, for tests only.

It writes the layout store/rocketmq/message.py documents (RocketMQ's CommitLog
serialization), V1 and V2 magic, IPv4 and IPv6 hosts, compressed bodies. The tests that
matter read stores RocketMQ's own message store wrote (tests/support/javarocketmq.py); this
encoder makes what that store cannot (RocketMQ 5's V2 magic here, damaged messages,
property-based round trips) and is itself checked against those stores.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib

from store.rocketmq.message import (
    BORNHOST_V6_FLAG,
    COMPRESSED_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
    body_crc,
    format_properties,
)


def _host(text: str) -> bytes:
    host, port = text.rsplit(":", 1)
    addr = ipaddress.ip_address(host.strip("[]"))
    return addr.packed + struct.pack(">i", int(port))


def encode_message(*, topic: str = "TopicTest", body: bytes = b"hello", queue_id: int = 0, flag: int = 0,
                   queue_offset: int = 0, phy_offset: int = 0, sys_flag: int = 0, born_timestamp: int = 1700000000000,
                   born_host: str = "10.0.0.1:50000", store_timestamp: int = 1700000000123,
                   store_host: str = "10.0.0.2:10911", reconsume_times: int = 0, prepared_tx_offset: int = 0,
                   properties: dict | None = None, v2: bool = False, compress: str | None = None,
                   body_crc_value: int | None = None) -> bytes:
    """One message as the commit log stores it. IPv6 hosts set their SYSFLAG bits;
    ``compress`` ("zlib", "lz4", "zstd") compresses ``body`` and sets the flags RocketMQ 5
    sets (RocketMQ 4 knows zlib only, with COMPRESSED_FLAG alone)."""
    born, store = _host(born_host), _host(store_host)
    if len(born) == 20:
        sys_flag |= BORNHOST_V6_FLAG
    if len(store) == 20:
        sys_flag |= STOREHOSTADDRESS_V6_FLAG
    if compress is not None:
        sys_flag |= COMPRESSED_FLAG
        if compress == "zlib":
            body = zlib.compress(body)
        elif compress == "lz4":
            import lz4.frame
            body, sys_flag = lz4.frame.compress(body), sys_flag | (1 << 8)
        elif compress == "zstd":
            import zstandard
            body, sys_flag = zstandard.ZstdCompressor().compress(body), sys_flag | (2 << 8)
        else:
            raise ValueError(compress)
    topic_b = topic.encode()
    props = format_properties(properties or {}).encode()
    topic_part = (struct.pack(">h", len(topic_b)) if v2 else struct.pack(">B", len(topic_b))) + topic_b
    rest = (struct.pack(">q", store_timestamp) + store + struct.pack(">iqi", reconsume_times, prepared_tx_offset,
                                                                     len(body))
            + body + topic_part + struct.pack(">h", len(props)) + props)
    size = 48 + len(born) + len(rest)
    head = struct.pack(">iiiiiqqiq", size, MESSAGE_MAGIC_CODE_V2 if v2 else MESSAGE_MAGIC_CODE,
                       body_crc(body) if body_crc_value is None else body_crc_value, queue_id, flag, queue_offset,
                       phy_offset, sys_flag, born_timestamp)
    out = head + born + rest
    assert len(out) == size
    return out


CQ_UNIT = struct.Struct(">qiq")


def cq_unit(phy_offset: int, size: int, tags_code: int) -> bytes:
    return CQ_UNIT.pack(phy_offset, size, tags_code)


def keyed_message(topic: str, k: int, uniq: str) -> bytes:
    """Message ``k`` of ``topic`` with a UNIQ_KEY, a tag and a key (what mq salvage matches)."""
    return encode_message(topic=topic, body=b"body-%s" % uniq.encode(), queue_offset=k,
                          properties={"UNIQ_KEY": uniq, "TAGS": "t", "KEYS": f"key-{uniq}"})
