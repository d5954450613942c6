"""Compressed bodies made of many frames (issue 59, item 9): N empty zstd or lz4 frames back
to back inflate to nothing, and must cost work linear in the body, with one decompressor
per body and a bound on frames (store/rocketmq/message.py, MAX_FRAMES).

No timings: the decompressors the inflaters build are counted, and so are the bytes fed to
them (a body fed again from each frame's end is quadratic work)."""

from __future__ import annotations

import json

import lz4.frame
import pytest
import zstandard
from typer.testing import CliRunner

from dledgerctl.app import app
from store.rocketmq import message
from store.rocketmq.message import COMPRESSED_FLAG, NotAMessage, decompress
from tests.support.rmq_store import write_broker_store

LZ4, ZSTD = COMPRESSED_FLAG | 1 << 8, COMPRESSED_FLAG | 2 << 8
EMPTY = {"zstd": zstandard.ZstdCompressor().compress(b""), "lz4": lz4.frame.compress(b"")}
FLAG = {"zstd": ZSTD, "lz4": LZ4}


class Counts:
    def __init__(self) -> None:
        self.made = 0  # decompressors constructed (ZstdDecompressor, LZ4FrameDecompressor)
        self.fed = 0  # bytes handed to their decompress calls


@pytest.fixture
def counts(monkeypatch) -> Counts:
    """Count what the inflaters build and feed, through wrappers of the libraries' classes."""
    c = Counts()
    real_zstd, real_lz4 = zstandard.ZstdDecompressor, lz4.frame.LZ4FrameDecompressor

    class Fed:
        def __init__(self, obj) -> None:
            self._obj = obj

        def decompress(self, data, *args, **kwargs):
            c.fed += len(data)
            return self._obj.decompress(data, *args, **kwargs)

        def __getattr__(self, name):
            return getattr(self._obj, name)

    class Zstd:
        def __init__(self, *args, **kwargs) -> None:
            c.made += 1
            self._d = real_zstd(*args, **kwargs)

        def decompressobj(self, *args, **kwargs):
            return Fed(self._d.decompressobj(*args, **kwargs))

    def lz4_decompressor(*args, **kwargs):
        c.made += 1
        return Fed(real_lz4(*args, **kwargs))

    monkeypatch.setattr(zstandard, "ZstdDecompressor", Zstd)
    monkeypatch.setattr(lz4.frame, "LZ4FrameDecompressor", lz4_decompressor)
    return c


@pytest.mark.parametrize("kind", ["zstd", "lz4"])
def test_many_empty_frames_take_one_decompressor_and_linear_input(kind, counts):
    raw = EMPTY[kind] * message.MAX_FRAMES
    assert decompress(raw, FLAG[kind]) == b""
    assert counts.made == 1
    # (each byte fed once, plus at most a first step again at each frame's end: not the rest of the body per frame)
    assert counts.fed <= len(raw) + message._FIRST_STEP * message.MAX_FRAMES


@pytest.mark.parametrize("kind", ["zstd", "lz4"])
def test_frames_past_the_bound_are_refused(kind, counts):
    raw = EMPTY[kind] * (message.MAX_FRAMES + 1) + EMPTY[kind] * 50_000  # (a 4 MiB body is ~460,000 of them)
    with pytest.raises(NotAMessage, match=f"the {kind} body holds more than {message.MAX_FRAMES} frames"):
        decompress(raw, FLAG[kind])
    assert counts.made == 1
    assert counts.fed <= (len(EMPTY[kind]) + message._FIRST_STEP) * (message.MAX_FRAMES + 1)  # (stops at the bound)


@pytest.mark.parametrize("kind, make", [("zstd", zstandard.ZstdCompressor().compress), ("lz4", lz4.frame.compress)])
def test_frames_around_empty_ones_still_make_one_body(kind, make, counts):
    big = bytes(range(256)) * 2000
    raw = make(b"head ") + EMPTY[kind] * 100 + make(big) + EMPTY[kind] * 3 + make(b" tail")
    assert decompress(raw, FLAG[kind]) == b"head " + big + b" tail"
    assert counts.made == 1
    with pytest.raises(NotAMessage, match="truncated"):
        decompress(raw[:-3], FLAG[kind])


def test_mq_messages_says_why_such_a_body_is_not_shown(tmp_path):
    root = str(tmp_path / "store")
    write_broker_store(root, [dict(body=EMPTY["zstd"] * (1 << 17), sys_flag=ZSTD),  # (1.1 MiB of empty frames)
                              dict(body=zstandard.ZstdCompressor().compress(b"fine"), sys_flag=ZSTD)])
    r = CliRunner().invoke(app, ["mq", "messages", root, "--body", "utf8", "--format", "jsonl"])
    assert r.exit_code == 0, r.output
    bomb, fine = [json.loads(line) for line in r.stdout.splitlines()]
    assert bomb["body"] is None and f"more than {message.MAX_FRAMES} frames" in bomb["note"]
    assert fine["body"] == "fine"


@pytest.mark.parametrize("cmd", [["mq", "messages", "{root}", "--body", "hex"], ["mq", "salvage", "{root}",
                                                                                 "--against", "{root}"]])
def test_max_body_past_2gib_is_refused_when_parsed(tmp_path, cmd):
    """issue 59 item 11: 2^63 bytes reached the inflaters, and every compressed body was
    'does not inflate (zlib): Python int too large to convert to C ssize_t'."""
    root = str(tmp_path / "store")
    write_broker_store(root, [dict(body=zstandard.ZstdCompressor().compress(b"fine"), sys_flag=ZSTD)])
    args = [a.format(root=root) for a in cmd]
    r = CliRunner().invoke(app, [*args, "--max-body", "8388608T"])
    assert r.exit_code == 2 and "more than 2GiB" in r.output, r.output
    if cmd[1] == "messages":
        r = CliRunner().invoke(app, [*args, "--max-body", "2GiB", "--format", "json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)[0]["body"] == b"fine".hex()
