"""cluster.net._frames, the compiled frame splitter, against frames.split_frames, its Python
reference: the same frames, the same stopping points, the same errors, for headers in
every form a peer may send (the plain one frame_head writes, JSON with spaces, escapes,
unicode, nulls, unknown or repeated keys, numbers out of range) and for arbitrary bytes.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil
import struct
import sysconfig

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.net import appends as appends_mod
from cluster.net.api_client import decode_append_answer, pack_bodies
from cluster.net import frames as frames_mod
from store.base import AppendedRun

from cluster.net.frames import Frame, FrameReceiver, ProtocolError, decode_frame_body, encode_frame, split_frames
from cluster.net.wire import APPEND

try:
    from cluster.net import _frames
except ImportError:  # a build without a C compiler
    _frames = None

compiled = pytest.mark.skipif(_frames is None, reason="cluster.net._frames is not built")


def test_the_frame_splitter_is_built_where_there_is_a_compiler():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip("no C compiler: frames are cut by frames.split_frames")
    assert _frames is not None, "cluster.net._frames was not built: see the output of pip install -e ."
    assert frames_mod._split is _frames.split


def _outcome(split, data: bytes, start: int = 0, max_frame: int = 1 << 20):
    buf = bytearray(data)
    view = memoryview(buf)
    try:
        frames, pos, error, length = split(buf, view, start, len(buf), max_frame, Frame, decode_frame_body)
    except ProtocolError as exc:
        return "raised", type(exc).__name__, str(exc)
    return [msgspec.structs.astuple(f) for f in frames], pos, error, length


def _same(data: bytes, start: int = 0, max_frame: int = 1 << 20):
    want = _outcome(split_frames, data, start, max_frame)
    got = _outcome(_frames.split, data, start, max_frame)
    assert got == want
    return want


def _frame(header: bytes, body: bytes = b"", kind: int = 0) -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body


_names = st.sampled_from(["code", "flag", "opaque", "remark", "extFields", "language", "version",
                          "serializeTypeCurrentRPC", "other", "Code", ""])
_texts = st.one_of(st.text(max_size=12), st.sampled_from(["", "PYTHON", "JAVA", "g", "1", 'a"b', "a\\b", "é", "\n"]))
_ints = st.one_of(st.integers(-3, 70000), st.integers(-(1 << 70), 1 << 70),
                  st.sampled_from([0, -1, 10 ** 17, 10 ** 18 - 1, 10 ** 18, -(10 ** 18) + 1, 1 << 63, (1 << 63) - 1]))
_values = st.one_of(_ints, _texts, st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False),
                    st.dictionaries(_texts, _texts, max_size=3), st.dictionaries(_texts, _ints, max_size=2),
                    st.lists(_ints, max_size=2))


@st.composite
def _headers(draw) -> bytes:
    """Header JSON: mostly near the plain form, often a step away from it."""
    pairs = []
    if draw(st.integers(0, 9)):
        pairs.append(("code", draw(st.one_of(_ints, _values)) if not draw(st.integers(0, 7)) else draw(_ints)))
    for name in draw(st.lists(_names, max_size=6)):
        kind = draw(st.integers(0, 5))
        if name in ("code", "flag", "opaque", "version") and kind:
            value = draw(_ints)
        elif name in ("remark", "language", "serializeTypeCurrentRPC") and kind:
            value = draw(st.one_of(_texts, st.none()))
        elif name == "extFields" and kind:
            value = draw(st.one_of(st.dictionaries(_texts, _texts, max_size=3), st.none()))
        else:
            value = draw(_values)
        pairs.append((name, value))
    body = "{" + ",".join(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":"), ensure_ascii=draw(st.booleans()))
                          for k, v in pairs) + "}"
    form = draw(st.integers(0, 9))
    if form == 0:
        body = body.replace(",", ", ").replace(":", ": ")
    elif form == 1:
        body = " " + body + "\n"
    elif form == 2 and len(body) > 2:
        cut = draw(st.integers(0, len(body) - 1))
        body = body[:cut] + draw(st.sampled_from(["", "x", "}", "{", '"', ",", "\\", "0", "-"])) + body[cut + 1:]
    return body.encode("utf-8", "surrogatepass")


@compiled
@settings(max_examples=1500, deadline=None)
@given(headers=st.lists(_headers(), min_size=1, max_size=4), body=st.binary(max_size=40),
       kind=st.sampled_from([0, 0, 0, 1]), tail=st.binary(max_size=6))
def test_headers_in_any_form_give_what_the_python_loop_gives(headers, body, kind, tail):
    data = b"".join(_frame(h, body, kind) for h in headers) + tail
    _same(data)


EDGES = [
    b'{"code":1}', b'{}', b'{"flag":1}', b'', b'{', b'{"code":1', b'{"code":1}}', b'{"code":1} ', b' {"code":1}',
    b'{"code":01}', b'{"code":-0}', b'{"code":-}', b'{"code":+1}', b'{"code":1.0}', b'{"code":1e3}', b'{"code":"1"}',
    b'{"code":true}', b'{"code":null}', b'{"code":999999999999999999}', b'{"code":-999999999999999999}',
    b'{"code":1000000000000000000}', b'{"code":9223372036854775808}', b'{"code":1,"code":2}',
    b'{"code":2147483647,"opaque":-2147483648}', b'{"code":2147483648}', b'{"code":1,"opaque":-2147483649}',
    b'{"code":1,"flag":4294967296}', b'{"code":1,"version":2147483648}',
    b'{"code":1,"remark":null}', b'{"code":1,"remark":""}', b'{"code":1,"remark":"a\\"b"}', b'{"code":1,"remark":"\x7f"}',
    b'{"code":1,"remark":"\t"}', b'{"code":1,"remark":"\xc3\xa9"}', b'{"code":1,"remark":"\xff"}', b'{"code":1,"remark":1}',
    b'{"code":1,"language":null}', b'{"code":1,"language":"JAVA"}', b'{"code":1,"language":""}',
    b'{"code":1,"serializeTypeCurrentRPC":null}', b'{"code":1,"serializeTypeCurrentRPC":"JSON"}',
    b'{"code":1,"extFields":null}', b'{"code":1,"extFields":{}}', b'{"code":1,"extFields":{"a":"1","a":"2"}}',
    b'{"code":1,"extFields":{"a":1}}', b'{"code":1,"extFields":{"a":null}}', b'{"code":1,"extFields":{"a":"1",}}',
    b'{"code":1,"extFields":{"a":"1"}', b'{"code":1,"extFields":[]}', b'{"code":1,"extFields":{"":""}}',
    b'{"code":1,"version":0,"opaque":5,"flag":3}', b'{"code":1,"other":1}', b'{"code":1,}', b'{,"code":1}',
    b'{"code":1,"flag":null}', b'{"code":1 ,"flag":1}', b'{"code"  :1}', b'{"co\\u0064e":1}', b'[{"code":1}]',
    b'{"code":1,"opaque":-7,"version":-1}', b'{"code"1}', b'{"code":1"flag":1}', b'{"code":1,"extFields":{"a""1"}}',
    b'{"code":1,"extFields":{"a":"1""b":"2"}}', b'{"code":1,"extFields":{"a":"1","b":"2"}}', b'{"code":1}\x00', b'{"code":1,"remark":"x","remark":"y"}',
]


@compiled
@pytest.mark.parametrize("header", EDGES)
def test_headers_at_the_edges_of_the_plain_form(header):
    for body in (b"", b"body"):
        _same(_frame(header, body))
        _same(_frame(header, body) + _frame(b'{"code":2,"opaque":9}', body))


@compiled
@settings(max_examples=300, deadline=None)
@given(opaques=st.lists(st.integers(0, (1 << 31) - 1), min_size=1, max_size=5), remark=_texts,
       ext=st.dictionaries(_texts, _texts, max_size=3), code=st.integers(-(1 << 31), (1 << 31) - 1),
       flag=st.integers(0, 3),
       body=st.binary(max_size=64))
def test_what_frame_head_writes_is_decoded_by_the_plain_path(opaques, remark, ext, code, flag, body):
    stream = b"".join(encode_frame(Frame(code, o, flag, remark, ext, body)) for o in opaques)
    frames, pos, error, length = _same(stream)
    assert (pos, error, length) == (len(stream), 0, -1)
    assert [f[:6] for f in frames] == [(code, o, flag, remark, ext, body) for o in opaques]


def test_the_plain_path_takes_the_headers_that_frame_head_writes(monkeypatch):
    """A check that the fast path is the one taken: a decoder that fails shows which
    frames went to it (an escaped string goes there, the plain ones do not)."""
    if _frames is None:
        pytest.skip("cluster.net._frames is not built")
    calls = []

    def python_decoder(view):
        calls.append(bytes(view))
        return decode_frame_body(view)

    plain = encode_frame(Frame(APPEND, 7, 0, "", {"group": "g", "count": "1"}, b"xyz"))
    escaped = encode_frame(Frame(APPEND, 8, 0, 'say "hi"', {}, b""))
    buf = bytearray(plain + escaped + plain)
    frames, pos, error, length = _frames.split(buf, memoryview(buf), 0, len(buf), 1 << 20, Frame, python_decoder)
    assert [f.opaque for f in frames] == [7, 8, 7] and frames[1].remark == 'say "hi"'
    assert calls == [escaped[4:]]
    assert (pos, error, length) == (len(buf), 0, -1)


@compiled
@settings(max_examples=500, deadline=None)
@given(data=st.binary(max_size=200), start=st.integers(0, 8), max_frame=st.sampled_from([4, 16, 100, 1 << 20]))
def test_arbitrary_bytes_give_what_the_python_loop_gives(data, start, max_frame):
    _same(data, min(start, len(data)), max_frame)


@compiled
def test_damaged_streams_give_what_the_python_loop_gives():
    rng = random.Random(5)
    good = b"".join(encode_frame(Frame(code, i, i % 2, "" if i % 3 else "err", {"group": "g", "count": str(i)},
                                       bytes(rng.randrange(256) for _ in range(i % 9))))
                    for i, code in enumerate([APPEND, 50000, 51004, 0, 1, 2] * 3))
    _same(good)
    for _ in range(3000):
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.choice([0, 0x20, 0x22, 0x2C, 0x3A, 0x5C, 0x7B, 0x7D, 0xFF,
                                                          rng.randrange(256)])
        _same(bytes(data[:rng.randint(0, len(data))]), 0, rng.choice([64, 1 << 20]))


@compiled
def test_the_receiver_gives_the_same_frames_with_either_splitter(monkeypatch):
    """FrameReceiver over a stream fed in pieces of every size, with big frames (which get
    buffers of their own) among small ones, once per splitter."""
    rng = random.Random(9)
    frames = [Frame(APPEND if i % 2 else 51004, i + 1, 0, "", {"group": "g"},
                    bytes(rng.randrange(256) for _ in range(rng.choice([0, 10, 1000, FrameReceiver.BIG + 100]))))
              for i in range(40)]
    stream = b"".join(map(encode_frame, frames))
    seen = {}
    for name, split in (("python", split_frames), ("compiled", _frames.split)):
        monkeypatch.setattr(frames_mod, "_split", split)
        r, got, k = FrameReceiver(), [], 0
        while k < len(stream):
            step = rng.choice([1, 3, 7, 100, 5000, 70000])
            got += r.feed(stream[k:k + step])
            k += step
        seen[name] = [(f.code, f.opaque, f.remark, f.ext, bytes(f.body)) for f in got]
    assert seen["compiled"] == seen["python"] == [(f.code, f.opaque, f.remark, f.ext, f.body) for f in frames]


@compiled
def test_framing_errors_are_those_of_the_python_loop():
    ok = encode_frame(Frame(APPEND, 1, 0, "", {}, b"abc"))
    for data, max_frame in [(ok + struct.pack(">i", 1 << 21), 1 << 20), (ok + struct.pack(">i", 3), 1 << 20),
                            (ok + struct.pack(">i", -5), 1 << 20), (ok + ok[:6], 1 << 20), (ok, 4)]:
        _same(data, 0, max_frame)
    r = FrameReceiver(max_frame=100)
    with pytest.raises(frames_mod.FrameTooLarge, match="frame of 101 bytes is above the 100-byte limit"):
        r.feed(ok + struct.pack(">i", 101))
    with pytest.raises(frames_mod.MalformedFrame, match="frame length 2 is too small"):
        FrameReceiver().feed(struct.pack(">i", 2) + b"\0\0")
    with pytest.raises(frames_mod.MalformedFrame, match="serialize type 1"):
        FrameReceiver().feed(_frame(b'{"code":1}', b"", 1))


@st.composite
def _runs(draw):
    sizes = draw(st.lists(st.integers(48, 1 << 20), min_size=1, max_size=40))
    ends = list(itertools.accumulate(sizes))
    cuts = sorted(draw(st.lists(st.integers(0, len(ends)), max_size=6)))
    bounds = [0, *cuts, len(ends)]
    waiters = [(None, draw(st.integers(0, (1 << 31) - 1)), a, b - a) for a, b in zip(bounds, bounds[1:])]
    first = draw(st.integers(0, (1 << 62)))
    term = draw(st.one_of(st.integers(0, 5), st.integers(0, (1 << 63) - 1)))
    pos = draw(st.integers(0, 1 << 62))
    return AppendedRun(first, pos, ends, term), waiters


@compiled
@settings(max_examples=400, deadline=None)
@given(run_waiters=_runs(), remark=_texts)
def test_append_answers_are_the_python_ones(run_waiters, remark):
    run, waiters = run_waiters
    head = frames_mod.json_body({"code": 200, "term": run.terms, "leaderId": "n0", "remark": remark})[:-1] + b',"entries":'
    got = appends_mod.append_answers(head, waiters, run)
    saved, appends_mod._frames = appends_mod._frames, None
    try:
        want = appends_mod.append_answers(head, waiters, run)
    finally:
        appends_mod._frames = saved
    assert got == want
    for data, (_r, opaque, start, n) in zip(got, waiters):
        (f,) = FrameReceiver().feed(data)
        assert f.opaque == opaque and f.is_response
        rows = [list(r) for r in run.rows()[start:start + n]]
        assert msgspec.json.decode(f.body)["entries"] == rows
        answer = decode_append_answer(f)  # what a client reads
        assert (answer.code, answer.term, answer.leader_id, answer.remark) == (200, run.terms, "n0", remark)
        assert answer.entries == rows and list(answer.entries) == rows and len(answer.entries) == n


@compiled
def test_append_answers_refuse_waiters_outside_the_run():
    run = AppendedRun(0, 0, [100, 200], 1)
    with pytest.raises(ValueError, match="outside the run"):
        _frames.append_answers(b"", b"", b"{", [(None, 1, 1, 2)], 0, 1, 0, run.ends)
    with pytest.raises(TypeError, match="waiter"):
        _frames.append_answers(b"", b"", b"{", [(None, 1, 1)], 0, 1, 0, run.ends)


def _unpacked(data, count):
    try:
        return [bytes(b) for b in appends_mod.unpack_bodies(data, count)]
    except frames_mod.BadMessage as exc:
        return "refused", str(exc)


def _checked(data, count):
    try:
        return appends_mod.check_bodies(data, count)
    except frames_mod.BadMessage as exc:
        return "refused", str(exc)


@compiled
@settings(max_examples=600, deadline=None)
@given(bodies=st.lists(st.binary(max_size=20), min_size=0, max_size=12), extra=st.integers(-3, 3),
       damage=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3), as_view=st.booleans())
def test_batched_bodies_are_unpacked_and_checked_as_the_python_loop_does(bodies, extra, damage, as_view):
    """unpack_bodies, and check_bodies (a leader's hot path: it hands the frame to the
    store as it is), compiled or not, refuse the same frames with the same words;
    check_bodies otherwise gives the largest body."""
    data = bytearray(pack_bodies(bodies) if bodies else b"")
    for at, value in damage:
        if at < len(data):
            data[at] = value
    data = bytes(data)
    for count in {len(bodies) + extra, len(bodies), 1, 2}:
        got = _unpacked(memoryview(data) if as_view else data, count)
        checked = _checked(memoryview(data) if as_view else data, count)
        saved, appends_mod._frames = appends_mod._frames, None
        try:
            want = _unpacked(data, count)
            assert _checked(data, count) == checked
        finally:
            appends_mod._frames = saved
        assert got == want
        assert checked == (max(map(len, want)) if isinstance(want, list) else want)
    if not damage and len(bodies) > 1:
        assert _unpacked(data, len(bodies)) == bodies
        assert _frames.check_bodies(data, len(bodies)) == max(map(len, bodies))  # (the compiled path answered)


@compiled
@pytest.mark.parametrize("sizes, rest", [([-1, 2], b"x"), ([3, -3], b""), ([1, 1], b"x"), ([1, 1], b"xyz"),
                                         ([0, 0], b""), ([-2147483648, 5], b"abcde"), ([2, 2], b"abcd")])
def test_batched_bodies_with_sizes_that_do_not_fit(sizes, rest):
    data = struct.pack(f">{len(sizes)}i", *sizes) + rest
    got = _unpacked(data, len(sizes))
    checked = _checked(data, len(sizes))
    assert checked == (max(map(len, got)) if isinstance(got, list) else got)
    saved, appends_mod._frames = appends_mod._frames, None
    try:
        assert got == _unpacked(data, len(sizes))
        assert checked == _checked(data, len(sizes))
    finally:
        appends_mod._frames = saved
