"""Compressed RocketMQ bodies from a hostile producer (issue 45, items 1 and 8): a body that
inflates past the limit (RocketMQ's maxMessageSize, 4 MiB, or ``--max-body``) is a note,
never memory, in ``mq messages``, ``get --decode rocketmq`` and ``spark mq-export``; a
truncated body is a note too; frames back to back are one body.

The peak memory of a command is read from its own process (``os.wait4``'s rusage of that
child), never timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import zlib

import lz4.frame
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from store.rocketmq.message import (COMPRESSED_FLAG, MAX_MESSAGE_SIZE, BodyTooLarge, NotAMessage, body_of, decode,
                                    decompress)
from tests.support.paths import ROOT, SUPPORT
from tests.support.rmq_encode import encode_message
from tests.support.rmq_store import write_broker_store

ZLIB, LZ4, ZSTD = COMPRESSED_FLAG, COMPRESSED_FLAG | 1 << 8, COMPRESSED_FLAG | 2 << 8
RSS_LIMIT_KB = 200 * 1024


def zstd_bomb(gib: float = 1.5) -> bytes:
    """About 49 KB of zstd that inflates to ``gib`` GiB of zeros (made a MiB at a time)."""
    z = zstandard.ZstdCompressor().compressobj()
    zeros = bytes(1 << 20)
    return b"".join([z.compress(zeros) for _ in range(int(gib * 1024))] + [z.flush()])


def bomb_message() -> bytes:
    """A message whose stored body is the zstd bomb, flagged as RocketMQ 5 flags ZSTD."""
    return encode_message(body=zstd_bomb(), sys_flag=ZSTD, properties={"TAGS": "boom", "KEYS": "k-bomb"})


@pytest.mark.parametrize("kind, flag, make", [
    ("zlib", ZLIB, lambda b: zlib.compress(b, 9)),
    ("lz4", LZ4, lz4.frame.compress),
    ("zstd", ZSTD, lambda b: zstandard.ZstdCompressor().compress(b)),
])
def test_each_compression_stops_at_the_limit(kind, flag, make):
    raw = make(bytes(5 << 20))
    with pytest.raises(BodyTooLarge, match=f"{kind} body inflates past {MAX_MESSAGE_SIZE} bytes"):
        decompress(raw, flag)
    assert decompress(raw, flag, 6 << 20) == bytes(5 << 20)  # (a higher limit, asked for)
    assert decompress(make(b"x" * MAX_MESSAGE_SIZE), flag) == b"x" * MAX_MESSAGE_SIZE  # (exactly the limit: kept)


def test_the_zstd_bomb_is_refused_without_inflating_it():
    bomb = zstd_bomb()
    assert len(bomb) < 60_000
    with pytest.raises(BodyTooLarge, match="inflates past 4194304 bytes"):
        decompress(bomb, ZSTD)


@pytest.mark.parametrize("kind, flag, make", [
    ("zlib", ZLIB, zlib.compress),
    ("lz4", LZ4, lz4.frame.compress),
    ("zstd", ZSTD, lambda b: zstandard.ZstdCompressor().compress(b)),
])
@pytest.mark.parametrize("cut", [1, 5, 0.5])
def test_a_truncated_body_is_a_note_not_an_empty_body(kind, flag, make, cut):
    full = make(b"hello, world " * 400)
    raw = full[:-cut] if isinstance(cut, int) else full[:int(len(full) * cut)]
    with pytest.raises(NotAMessage, match=f"{kind} body is truncated|does not inflate"):
        decompress(raw, flag)


@pytest.mark.parametrize("flag, make", [
    (LZ4, lz4.frame.compress), (ZSTD, lambda b: zstandard.ZstdCompressor().compress(b))])
def test_frames_back_to_back_are_one_body(flag, make):
    assert decompress(make(b"first ") + make(b"second ") + make(b"third"), flag) == b"first second third"
    with pytest.raises(NotAMessage, match="truncated"):
        decompress(make(b"first ") + make(b"second " * 100)[:-4], flag)


def test_body_of_takes_the_limit():
    raw = encode_message(body=b"y" * (1 << 20), compress="zstd")
    with pytest.raises(BodyTooLarge, match="past 65536 bytes"):
        body_of(raw, decode(raw), limit=65536)
    assert body_of(raw, decode(raw)) == b"y" * (1 << 20)


def test_mq_messages_shows_every_frame_and_says_when_a_body_is_truncated(tmp_path):
    from typer.testing import CliRunner

    from dledgerctl.app import app

    z = zstandard.ZstdCompressor()
    two = z.compress(b"first frame, ") + z.compress(b"second frame")
    cut = z.compress(b"hello " * 200)[:-6]
    root = tmp_path / "store"
    write_broker_store(str(root), [dict(body=two, sys_flag=ZSTD), dict(body=cut, sys_flag=ZSTD)])
    r = CliRunner().invoke(app, ["mq", "messages", str(root), "--body", "utf8", "--format", "jsonl"])
    assert r.exit_code == 0, r.output
    first, second = [json.loads(line) for line in r.stdout.splitlines()]
    assert first["body"] == "first frame, second frame"
    assert second["body"] is None and "the zstd body is truncated" in second["note"]


_MAKERS = {ZLIB: zlib.compress, LZ4: lz4.frame.compress, ZSTD: lambda b: zstandard.ZstdCompressor().compress(b)}


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([ZLIB, LZ4, ZSTD]), st.binary(max_size=3000), st.integers(0, 3000), st.binary(max_size=8),
       st.integers(1, 1 << 16), st.integers(1, 64))
def test_any_compressed_bytes_inflate_within_the_limit_or_say_why(flag, plain, cut, junk, limit, repeat):
    """Bodies made of real frames (repeated, cut, with bytes after them) and bombs small
    enough to run often: the answer is the bytes, at most ``limit`` of them, or NotAMessage."""
    make = _MAKERS[flag]
    frame = make(plain * repeat)
    for raw in (frame, frame[:cut], frame + junk, frame[:cut] + frame, make(bytes(limit + 1))):
        try:
            out = decompress(raw, flag, limit)
        except NotAMessage:
            continue
        assert len(out) <= limit


# --- the commands, as processes: their peak memory ---------------------------------------------

# The child is started by a small Python of its own, which waits for it with os.wait4 and
# writes its peak RSS: a process's ru_maxrss also counts what it was before its exec, and a
# child forked straight from this test process would start from the test process's own
# resident size (hundreds of MB late in a full run), not from what the command used.
_MEASURE = """
import os, subprocess, sys
p = subprocess.Popen(sys.argv[2:])
_pid, status, usage = os.wait4(p.pid, 0)
with open(sys.argv[1], "w") as fh:
    fh.write(str(usage.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_measured(tmp_path, *args, timeout=300) -> tuple[int, str, str, int]:
    """Run ``dledgerctl ARGS`` as a grandchild; its exit code, stdout, stderr and peak RSS in
    KiB (its own, from ``os.wait4`` in the small parent that started it; a timer kills both at
    the deadline)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(SUPPORT, "sm")]), COLUMNS="200")
    out_path, err_path, rss_path = tmp_path / "measured.out", tmp_path / "measured.err", tmp_path / "measured.rss"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        p = subprocess.Popen([sys.executable, "-c", _MEASURE, str(rss_path), sys.executable, "-m", "dledgerctl",
                              *map(str, args)], stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                             start_new_session=True)
    killer = threading.Timer(timeout, lambda: os.killpg(p.pid, 9))
    killer.start()
    try:
        code = p.wait()
    finally:
        killer.cancel()
    return code, out_path.read_text(), err_path.read_text(), int(rss_path.read_text())


@pytest.fixture(scope="module")
def bomb_store(tmp_path_factory):
    root = tmp_path_factory.mktemp("bomb") / "store"
    specs = [dict(body=b"before"), dict(body=zstd_bomb(), sys_flag=ZSTD, properties={"TAGS": "boom"}),
             dict(body=b"after " * 10, compress="zstd")]
    written = write_broker_store(str(root), specs)
    return root, written


@pytest.mark.parametrize("body", ["utf8", "hex"])
def test_mq_messages_on_the_bomb_stays_small_and_says_why(tmp_path, bomb_store, body):
    root, written = bomb_store
    code, out, err, rss = run_measured(tmp_path, "mq", "messages", root, "--body", body, "--format", "jsonl")
    assert code == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["kind"] for r in rows] == ["message"] * 3
    assert rows[1]["body"] is None and "zstd body inflates past 4194304 bytes" in rows[1]["note"]
    assert rows[2]["body"] == ("after " * 10 if body == "utf8" else (b"after " * 10).hex())
    assert rss < RSS_LIMIT_KB, f"peak RSS {rss} KiB"


def test_mq_messages_max_body_raises_the_limit(tmp_path):
    root = tmp_path / "store"
    write_broker_store(str(root), [dict(body=b"q" * (5 << 20), compress="zlib")], data_file_size=16 << 20)
    args = ("mq", "messages", root, "--body", "utf8", "--format", "jsonl")
    code, out, err, _rss = run_measured(tmp_path, *args)
    assert code == 0 and "inflates past 4194304 bytes" in json.loads(out)["note"], err
    code, out, err, _rss = run_measured(tmp_path, *args, "--max-body", "6MiB")
    assert code == 0 and json.loads(out)["body"] == "q" * (5 << 20), err
    code, out, err, _rss = run_measured(tmp_path, *args, "--max-body", "lots")
    assert code == 2 and "Error" in err and "Traceback" not in err


def test_get_decode_rocketmq_on_the_bomb_stays_small(group, tmp_path):
    base = group(1)
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "append", "--base-dir", base, "--file", "-",
                        "--format", "json"], input=bomb_message(), capture_output=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stderr
    index = json.loads(r.stdout)[0]["index"]
    for extra in ([], ["--format", "jsonl"], ["--body", "hex", "--format", "json"]):
        code, out, err, rss = run_measured(tmp_path, "get", "--base-dir", base, "-i", index, "--decode",
                                           "rocketmq", *extra, timeout=120)
        assert code == 0, err
        assert "inflates past" in out and "Traceback" not in err
        assert rss < RSS_LIMIT_KB, f"get {extra}: peak RSS {rss} KiB"


def test_spark_mq_export_reads_bodies_through_the_same_bound(spark, tmp_path):
    import pyarrow.parquet as pq
    from typer.testing import CliRunner

    from dledgerctl.app import app

    root = tmp_path / "n0"
    write_broker_store(str(root), [dict(body=zstd_bomb(0.25), sys_flag=ZSTD), dict(body=b"q" * (5 << 20),
                                                                                   compress="lz4"),
                                   dict(body=b"small", compress="zstd")], data_file_size=16 << 20)

    def export(*extra):
        to = tmp_path / f"out{len(extra)}"
        r = CliRunner().invoke(app, ["spark", "mq-export", str(root), "--to", str(to), "--format", "json", *extra])
        assert r.exit_code == 0, r.output
        (summary,) = json.loads(r.stdout)
        return sorted(pq.read_table(summary["path"]).to_pylist(), key=lambda x: x["index"])

    rows = export()
    assert [x["msg_body"] for x in rows] == [None, None, b"small"]
    assert all("inflates past 4194304 bytes" in x["msg_note"] for x in rows[:2])
    rows = export("--max-body", "6MiB")
    assert rows[0]["msg_body"] is None and "inflates past 6291456 bytes" in rows[0]["msg_note"]
    assert rows[1]["msg_body"] == b"q" * (5 << 20) and rows[2]["msg_body"] == b"small"
