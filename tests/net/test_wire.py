"""The frame codec (cluster/net/frames.py, wire.py, api.py, api_client.py): exact layout, round trips, streaming, limits, fuzz."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from cluster.raft.rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    PushRequest,
    PushResponse,
    PushType,
    VoteRequest,
    VoteResponse,
    VoteResult,
    split_entries,
)
from cluster.net.answers import AppendAnswer
from cluster.net.appends import unpack_bodies
from cluster.net.api_client import append_ext, append_request, decode_append_answer, pack_bodies
from cluster.net.frames import (
    FLAG_RESPONSE,
    BadMessage,
    Frame,
    FrameReceiver,
    FrameTooLarge,
    MalformedFrame,
    ProtocolError,
    encode_frame,
    response_bytes,
)
from cluster.net.wire import (
    APPEND,
    PUSH,
    VOTE,
    decode_request,
    decode_response,
    request_code_of,
    request_frame,
    response_frame,
)
from store.format import encode_entry

ENTRIES = b"".join(encode_entry(b"body%d" % i * i, index=5 + i, term=2, pos=1000 + 60 * i) for i in range(3))
REQUESTS = [
    VoteRequest("g", "n1", 7, 41, 6, pre_vote=True),
    VoteRequest("g", "n2", 8, -1, -1, take_leadership=True),
    HeartBeatRequest("g", "n0", 3),
    PushRequest("g", "n0", 4, PushType.APPEND, 3, 5, 3, ENTRIES),
    PushRequest("g", "n0", 4, PushType.COMMIT, 9),
    PushRequest("g", "n0", 4, PushType.COMPARE, 9, -1, 0, b""),
    LeadershipTransferRequest("g", "n0", "n2", 4, take=True),
    InstallSnapshotRequest("g", "n0", 4, 40, 3, 10, 0xDEADBEEF, 4, b"\x00chunk",
                           encode_entry(b"first", index=5, term=2, pos=0)),
    InstallSnapshotRequest("g", "n0", 4, 40, 3, 10, 7, 0, b"", b""),
]
RESPONSES = [
    (VoteRequest, VoteResponse(7, VoteResult.REJECT_ALREADY_VOTED)),
    (HeartBeatRequest, HeartBeatResponse(3, Code.EXPIRED_TERM, "n2")),
    (HeartBeatRequest, HeartBeatResponse(3, Code.SUCCESS, "n0", lease=True)),
    (PushRequest, PushResponse(4, Code.INCONSISTENT_STATE, 5, 3, 0, 11, 2, 4, "why")),
    (LeadershipTransferRequest, LeadershipTransferResponse(4, Code.NOT_LEADER, "leader is n1")),
    (InstallSnapshotRequest, InstallSnapshotResponse(4, Code.INSTALL_SNAPSHOT_ERROR, 512, False, 3, 9, "crc")),
    (InstallSnapshotRequest, InstallSnapshotResponse(4, Code.SUCCESS, 10, True, 41, 41)),
]


def test_frame_layout_is_rocketmq_remoting():
    raw = encode_frame(Frame(51002, opaque=7, body=b"xyz"))
    length, mark = struct.unpack_from(">ii", raw)
    header_len = mark & 0xFFFFFF
    assert mark >> 24 == 0  # JSON header
    assert length == len(raw) - 4 == 4 + header_len + 3
    header = json.loads(raw[8 : 8 + header_len])
    assert header["code"] == 51002 and header["opaque"] == 7 and header["flag"] == 0
    assert raw[8 + header_len :] == b"xyz"


@pytest.mark.parametrize("req", REQUESTS, ids=lambda r: f"{type(r).__name__}")
def test_requests_round_trip(req):
    frames = FrameReceiver().feed(encode_frame(request_frame(req, 42)))
    assert len(frames) == 1 and frames[0].opaque == 42 and frames[0].code == request_code_of(req)
    assert decode_request(frames[0]) == req


@pytest.mark.parametrize("kind,resp", RESPONSES, ids=lambda r: getattr(r, "__name__", type(r).__name__))
def test_responses_round_trip(kind, resp):
    code = request_code_of(next(r for r in REQUESTS if type(r) is kind))
    f = FrameReceiver().feed(encode_frame(response_frame(resp, 9, code)))[0]
    assert f.is_response and f.opaque == 9
    assert decode_response(f, code) == resp


def test_a_heartbeat_answer_says_read_lease_only_when_it_keeps_the_promise():
    code = request_code_of(REQUESTS[2])
    plain = response_frame(HeartBeatResponse(3, Code.SUCCESS, "n0"), 9, code)
    assert "readLease" not in json.loads(plain.body)  # (what DLedger's members see, byte for byte)
    for bad in (1, "yes", None):
        f = Frame(code, 9, FLAG_RESPONSE, body=json.dumps({"term": 3, "code": 0, "readLease": bad}).encode())
        with pytest.raises(BadMessage):
            decode_response(f, code)


def test_an_install_chunk_whose_length_does_not_fit_is_refused():
    f = request_frame(REQUESTS[-2], 1)
    for n in ("-1", str(len(f.body) + 1), "x"):
        with pytest.raises(BadMessage):
            decode_request(Frame(f.code, 1, ext={**f.ext, "dataLength": n}, body=f.body))


def test_push_body_is_raw_entries():
    f = request_frame(REQUESTS[3], 1)
    assert f.code == PUSH and f.body == ENTRIES and f.ext["firstEntryIndex"] == "5"
    assert [s[2] for s in split_entries(f.body)] == [5, 6, 7]
    for bad in (ENTRIES[:-1], ENTRIES + b"\0" * 10, ENTRIES[:48 * 2] + ENTRIES[60:]):
        with pytest.raises(ValueError):
            split_entries(bad)


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(cuts=st.lists(st.integers(1, 400), max_size=30))
def test_streaming_any_split(cuts):
    stream = b"".join(encode_frame(request_frame(r, i)) for i, r in enumerate(REQUESTS))
    dec, got, pos = FrameReceiver(), [], 0
    for c in cuts + [len(stream)]:
        got += dec.feed(stream[pos : pos + c])
        pos += c
    got += dec.feed(stream[pos:])
    assert [decode_request(f) for f in got] == REQUESTS


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(sizes=st.lists(st.sampled_from([0, 1, 100, FrameReceiver.BIG - 200, FrameReceiver.BIG + 1, 3 * FrameReceiver.BIG,
                                       FrameReceiver.CHUNK + 7]), min_size=1, max_size=8),
       reads=st.lists(st.integers(1, 3 * FrameReceiver.CHUNK), min_size=1, max_size=40))
@example(sizes=[FrameReceiver.BIG - 200] * 6, reads=[100_000])  # the partial frame is moved to the front
@example(sizes=[100, FrameReceiver.CHUNK + 7, 1], reads=[5000, 3])  # a big frame started in the chunk
def test_receiver_lends_buffers_for_frames_small_and_large(sizes, reads):
    """Receiving the way a socket does (into the buffer lent, no more than it offers),
    in reads of any size: small frames come out of the shared chunk, frames above BIG out
    of a buffer of their own, with the partial frame moved when room runs short; every
    frame comes out whole and in order."""
    frames = [Frame(PUSH, opaque=i, ext={"k": str(n)}, body=bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    stream = memoryview(b"".join(encode_frame(f) for f in frames))
    rx, got, pos, k = FrameReceiver(), [], 0, 0
    while pos < len(stream):
        space = rx.buffer()
        assert len(space) > 0
        n = min(len(space), reads[k % len(reads)], len(stream) - pos)
        space[:n] = stream[pos : pos + n]
        pos, k = pos + n, k + 1
        got += rx.received(n)
    assert [(f.opaque, f.ext, bytes(f.body)) for f in got] == [(f.opaque, f.ext, f.body) for f in frames]


def test_oversized_frame_refused_from_its_length_alone():
    dec = FrameReceiver(max_frame=1024)
    with pytest.raises(FrameTooLarge):
        dec.feed(struct.pack(">i", 1025))
    with pytest.raises(MalformedFrame):
        FrameReceiver().feed(struct.pack(">i", 2) + b"xx")


def test_client_append_bodies():
    bodies = [b"", b"a", b"x" * 300]
    assert unpack_bodies(pack_bodies(bodies), 3) == bodies
    for data, n in ((pack_bodies(bodies), 2), (pack_bodies(bodies)[:-1], 3), (b"\xff\xff\xff\xff", 1), (b"\0\0", 1)):
        with pytest.raises(BadMessage):
            unpack_bodies(data, n)


@given(opaque=st.integers(-(1 << 31), (1 << 31) - 1), group=st.text(max_size=20),
       sizes=st.lists(st.sampled_from([0, 1, 100, 1024, 16 << 10, 40 << 10]), max_size=70),
       kind=st.sampled_from([bytes, bytearray, memoryview]))
@settings(max_examples=150, deadline=None)
def test_append_request_parts_equal_an_encoded_append_frame(opaque, group, sizes, kind):
    """appends.append_request (the client's hot path) writes the bytes the Frame path writes,
    for one body, many, small and large ones (joined, or left as they are), any group."""
    bodies = [kind(bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    ext = {"group": group, "count": str(len(bodies))}
    parts = append_request(opaque, append_ext(group, len(bodies)), bodies)
    frame = Frame(APPEND, opaque, ext=ext, body=pack_bodies([bytes(b) for b in bodies]))
    assert b"".join(bytes(p) for p in parts) == encode_frame(frame)
    assert len(parts) == (1 if sum(sizes) < 16 << 10 else 2 if len(bodies) > 64 else 1 + len(bodies))
    got = FrameReceiver().feed(b"".join(bytes(p) for p in parts))[0]
    assert (got.code, got.opaque, got.ext) == (APPEND, opaque, ext)
    if bodies:
        assert [bytes(b) for b in unpack_bodies(got.body, len(bodies))] == [bytes(b) for b in bodies]


@given(opaque=st.integers(-(1 << 31), (1 << 31) - 1), entries=st.lists(st.lists(st.integers(0, 1 << 40),
       min_size=4, max_size=4), max_size=5), leader=st.sampled_from(["n0", None, 'x"\\y']))
def test_response_bytes_equal_an_encoded_response_frame(opaque, entries, leader):
    body = {"code": 200, "term": 3, "leaderId": leader, "remark": "", "entries": entries}
    frame = response_frame(body, opaque, 50001)
    assert response_bytes(opaque, frame.body) == encode_frame(frame)
    got = FrameReceiver().feed(response_bytes(opaque, frame.body))[0]
    assert (got.opaque, got.is_response, json.loads(got.body)) == (opaque, True, body)


@given(code=st.integers(0, 60000), opaque=st.integers(-(1 << 31), (1 << 31) - 1), flag=st.integers(0, 3),
       remark=st.sampled_from(["", 'bad "input"\n']), ext=st.dictionaries(st.text(max_size=5), st.text(max_size=5),
       max_size=3), body=st.binary(max_size=20))
def test_frame_head_is_the_header_dict_encoded(code, opaque, flag, remark, ext, body):
    f = Frame(code, opaque, flag, remark, ext, body)
    h = {"code": code, "flag": flag, "opaque": opaque, "language": "PYTHON", "version": 0}
    if remark:
        h["remark"] = remark
    if ext:
        h["extFields"] = ext
    header = json.dumps(h, separators=(",", ":"), ensure_ascii=False).encode()
    assert encode_frame(f) == struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


def _decode_everything(data: bytes) -> None:
    for f in FrameReceiver(max_frame=1 << 16).feed(data):
        try:
            decode_request(f)
        except BadMessage:
            pass
        for code in (VOTE, PUSH, 51002, 51005, 50000):
            try:
                decode_response(f, code)
            except BadMessage:
                pass


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=300))
def test_random_bytes_raise_only_protocol_errors(data):
    try:
        _decode_everything(data)
    except ProtocolError:
        pass


VALID = b"".join(encode_frame(request_frame(r, i)) for i, r in enumerate(REQUESTS)) + b"".join(
    encode_frame(response_frame(r, 5, request_code_of(next(q for q in REQUESTS if type(q) is k)))) for k, r in RESPONSES)


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(edits=st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=6))
def test_mutated_frames_raise_only_protocol_errors(edits):
    data = bytearray(VALID)
    for where, value in edits:
        data[where] = value
    try:
        _decode_everything(bytes(data))
    except ProtocolError:
        pass


def _answer(body: bytes, code: int = 0) -> Frame:
    return Frame(code, 9, 1, body=body)


def test_an_append_answer_reads_its_rows_when_they_are_used():
    a = decode_append_answer(_answer(b'{"code":200,"term":3,"leaderId":"n1","remark":"",'
                                     b'"entries":[[5,3,0,60],[6,3,60,52]],"extra":1}'))
    assert (a.code, a.term, a.leader_id, a.remark) == (200, 3, "n1", "")
    rows = a.entries
    assert rows == [[5, 3, 0, 60], [6, 3, 60, 52]] and rows[1][2] == 60 and len(rows) == 2
    assert [i for i, _t, _p, _s in rows] == [5, 6] and rows != [[5, 3, 0, 60]]
    assert decode_append_answer(_answer(b'{"code":200,"term":1}')).entries is None
    refused = decode_append_answer(_answer(b'{"code":200001,"leaderId":null,"remark":"leader is n2"}'))
    assert refused == AppendAnswer(200001, -1, None, "leader is n2", None)
    assert decode_append_answer(_answer(b'{"code":200,"remark":null}')).remark == ""


@pytest.mark.parametrize("entries", [b'"x"', b"[[1,2,3]]", b'[[1,2,3,"4"]]', b"[1,2]", b"{}"])
def test_append_answer_rows_that_do_not_fit_are_refused_when_read(entries):
    a = decode_append_answer(_answer(b'{"code":200,"term":1,"entries":' + entries + b"}"))
    with pytest.raises(BadMessage, match="APPEND answer"):
        list(a.entries)


@pytest.mark.parametrize("frame", [
    _answer(b'{"code":"200","entries":[]}'),  # a field of the wrong type
    _answer(b"not json"),
    _answer(b"[1]"),
    _answer(b'{"code":200,"entries":[]}', code=1),  # refused by the remoting layer
])
def test_append_answers_that_do_not_fit_are_refused(frame):
    with pytest.raises(BadMessage):
        decode_append_answer(frame)


def test_a_binary_get_answer_reads_back_as_the_json_form_reads():
    from cluster.net.appends import raw_answer_frame as answer_frame
    from cluster.net.api_client import decode_raw_answer as decode_answer
    from store.format import HEADER_SIZE, decode_header

    raw = b"".join(encode_entry(b"body-%d" % i, index=7 + i, term=3, pos=100 * i) for i in range(4))
    f = answer_frame(5, 50002, raw, 4, 3, "n1")
    back = FrameReceiver().feed(encode_frame(f))[0]
    got = decode_answer(back)
    assert got["code"] == Code.SUCCESS and got["term"] == 3 and got["leaderId"] == "n1"
    want, off = [], 0
    for i in range(4):  # (what appends.store_entry_object says of each, the body as bytes)
        h = decode_header(raw, off)
        want.append({"body": b"body-%d" % i, "bodyCrc": h.body_crc, "chainCrc": h.chain_crc, "channel": h.channel,
                     "index": 7 + i, "magic": h.magic, "pos": 100 * i, "size": h.size, "term": 3})
        off += HEADER_SIZE + h.body_size
    assert got["entries"] == want


@pytest.mark.parametrize("count,cut", [(3, 0), (4, 10), (0, 0)])
def test_a_binary_get_answer_that_does_not_fit_is_a_bad_message(count, cut):
    from cluster.net.appends import raw_answer_frame as answer_frame
    from cluster.net.api_client import decode_raw_answer as decode_answer

    raw = b"".join(encode_entry(b"x" * 10, index=i, term=1, pos=0) for i in range(4))
    f = answer_frame(1, 50002, raw[:len(raw) - cut], count, 1, None)
    with pytest.raises(BadMessage):
        decode_answer(f)
    f.ext["count"] = "-4"
    with pytest.raises(BadMessage):
        decode_answer(f)
