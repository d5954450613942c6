"""store/rocketmq/brokerconf.py reads a broker's configuration file as the broker does, checked
against RocketMQ's own code (tests/support/java/rocketmq/RocketMQConfigRead.java: Java's
Properties.load, MixAll.properties2Object onto a MessageStoreConfig, then
getMappedFileSizeConsumeQueue): for crafted and seeded random files, whether the file loads,
the value loaded, and the consume-queue file size the broker takes (its default when it skips
the value). Skipped, saying why, when Java or a mirror is missing."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

from tests.support import javarocketmq
from store.rocketmq.brokerconf import (
    KEY_CQ_FILE_SIZE,
    BrokerConfError,
    java_parse_int,
    parse_properties,
    rounded_queue_file_size,
)
from store.rocketmq.consumequeue import CQ_FILE_SIZE

CRAFTED = [
    "mappedFileSizeConsumeQueue=6000\n",
    "mappedFileSizeConsumeQueue=6010\n",
    "mappedFileSizeConsumeQueue = 6000 \n",
    "mappedFileSizeConsumeQueue:  +6001",
    "  mappedFileSizeConsumeQueue\t6002\r\nother=1",
    "mappedFileSizeConsumeQueue=60\\\n   00\n",
    "mappedFileSizeConsumeQueue=60\\\\\n00\n",
    "#mappedFileSizeConsumeQueue=6000\n",
    "! mappedFileSizeConsumeQueue=6000\nmappedFileSizeConsumeQueue=7000\n",
    "mappedFileSizeConsumeQueue=6000\nmappedFileSizeConsumeQueue=8000\n",
    "mappedFileSizeConsume\\u0051ueue=\\u0036000\n",
    "mappedFileSizeConsumeQueue=\\u00zz\n",
    "mappedFileSizeConsumeQueue=2147483647\n",
    "mappedFileSizeConsumeQueue=2147483640\n",
    "mappedFileSizeConsumeQueue=2147483648\n",
    "mappedFileSizeConsumeQueue=-20\n",
    "mappedFileSizeConsumeQueue=0\n",
    "mappedFileSizeConsumeQueue=1\n",
    "mappedFileSizeConsumeQueue==6000\n",
    "mappedFileSizeConsumeQueue = : 6000\n",
    "mappedFileSizeConsumeQueue\\ =6000\n",
    "mappedFileSizeConsumeQueue=6e3\n",
    "mappedFileSizeConsumeQueue=0x1770\n",
    "mappedFileSizeConsumeQueue=00006000\n",
    "mappedFileSizeConsumeQueue=\n",
    "mappedFileSizeConsumeQueue",
    "mappedFileSizeConsumeQueue=6000\\",
]


def random_files(n: int, seed: int = 58) -> list[str]:
    rnd = random.Random(seed)
    pieces = ["mappedFileSizeConsumeQueue", "mappedFileSizeConsumeQueue", "brokerName", "#", "!", "=", ":", " ",
              "\t", "\f", "\\", "\\\\", "\n", "\r\n", "\r", "6000", "-1", "+", "20", "\\u0036", "\\n", "x", "é"]
    return ["".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 14))) for _ in range(n)]


def ours(text: str) -> dict:
    try:
        props = parse_properties(text)
    except BrokerConfError:
        return {"loaded": False}
    raw = props.get(KEY_CQ_FILE_SIZE)
    value = java_parse_int(raw) if raw is not None else None
    return {"loaded": True, "raw": raw,
            "cq_file_size": CQ_FILE_SIZE if value is None else rounded_queue_file_size(value)}


@pytest.fixture(scope="module")
def rocketmq_built():
    try:
        return javarocketmq.build("4.9.4")
    except javarocketmq.Unavailable as exc:
        pytest.skip(str(exc))


def test_the_broker_reads_its_configuration_as_we_do(rocketmq_built, tmp_path):
    texts = CRAFTED + random_files(400)
    paths = []
    for k, text in enumerate(texts):
        p = tmp_path / f"{k}.conf"
        p.write_bytes(text.encode("latin-1"))
        paths.append(str(p))
    proc = subprocess.run(rocketmq_built.command("RocketMQConfigRead", *paths), capture_output=True,
                          encoding="utf-8", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    java = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(java) == len(texts)
    for text, j in zip(texts, java):
        want = {"loaded": j["loaded"]} if not j["loaded"] else \
            {"loaded": True, "raw": j.get("raw"), "cq_file_size": j["cq_file_size"]}
        assert ours(text) == want, (text, j)
