"""Property-based fuzz of the decoders (cluster/net/frames.py, wire.py, api.py, dialect.py) with hostile
fields: every field missing, of the wrong type, out of its range, or nested deep. A decoder
raises only ProtocolError (BadMessage for a body, MalformedFrame for a header), and what
it does return holds only numbers the rest of the node can use."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.net import dialect
from cluster.net.api import dledger_fields
from cluster.raft.rpc import (
    HeartBeatRequest,
    InstallSnapshotRequest,
    ProbeRequest,
    PushRequest,
    RepairRequest,
    VoteRequest,
)
from cluster.net.frames import (
    MAX_JSON_DEPTH,
    BadMessage,
    Frame,
    FrameReceiver,
    MalformedFrame,
    ProtocolError,
    json_depth,
)
from cluster.net.wire import (
    HEART_BEAT,
    INSTALL_SNAPSHOT,
    LEADERSHIP_TRANSFER,
    PROBE,
    PUSH,
    REPAIR,
    VOTE,
    decode_request,
    decode_response,
)
from tests.support.hostile import BAD_NUMBERS, I64, frame, nested, peer_requests, push_ext, snapshot_ext
from store.format import TERM_MAX

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# any JSON value, small numbers and huge ones, and the values BAD_NUMBERS lists
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 80), max_value=1 << 80) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(BAD_NUMBERS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=8)


def check_ranges(msg) -> None:
    """Every term and index a decoded message carries is one the node can store and step from."""
    terms = [getattr(msg, "term")]
    if isinstance(msg, VoteRequest):
        terms.append(msg.ledger_end_term)
        assert -1 <= msg.ledger_end_index <= I64
    if isinstance(msg, PushRequest):
        assert -1 <= msg.commit_index <= I64 and -1 <= msg.first_index <= I64 and -1 <= msg.begin_index <= I64
        assert 0 <= msg.count <= 1 << 31 and all(-1 <= i <= I64 for i in msg.config_at)
    if isinstance(msg, InstallSnapshotRequest):
        terms.append(msg.snap_term)
        assert -1 <= msg.index <= I64 and 0 <= msg.size <= I64 and 0 <= msg.offset <= I64
    if isinstance(msg, ProbeRequest):
        assert -1 <= msg.first <= I64 and 0 <= msg.count <= 1 << 31
    if isinstance(msg, RepairRequest):
        assert 0 <= msg.from_index <= I64
    assert all(-1 <= t <= TERM_MAX for t in terms)
    assert msg.term >= 0


def decoded(f: Frame):
    try:
        msg = decode_request(f)
    except BadMessage:
        return None
    check_ranges(msg)
    return msg


@SETTINGS
@given(code=st.sampled_from([VOTE, HEART_BEAT, LEADERSHIP_TRANSFER, PROBE, REPAIR]), data=st.data())
def test_a_spoiled_field_of_a_json_peer_request_is_refused_or_in_range(code, data):
    body = peer_requests("g", "n1", 5)[code]
    field = data.draw(st.sampled_from(sorted(body)))
    if data.draw(st.booleans()):
        del body[field]
    else:
        body[field] = data.draw(json_values)
    msg = decoded(Frame(code, body=json.dumps(body).encode()))
    if msg is not None and field == "term":
        assert body["term"] == msg.term and 0 <= msg.term <= TERM_MAX


@SETTINGS
@given(code=st.sampled_from([PUSH, INSTALL_SNAPSHOT]), data=st.data())
def test_a_spoiled_extfield_is_refused_or_in_range(code, data):
    ext = push_ext("g", "n1", 5) if code == PUSH else snapshot_ext("g", "n1", 5)
    for _ in range(data.draw(st.integers(1, 3))):
        field = data.draw(st.sampled_from(sorted(ext) + ["beginIndex", "configAt"]))
        ext[field] = data.draw(st.text(max_size=30) | st.integers(min_value=-(1 << 80), max_value=1 << 80).map(str)
                               | st.sampled_from([str(I64), str(I64 + 1), "1_0", " 1", "+1", "٣", "-0", "9" * 400]))
    decoded(Frame(code, ext=ext, body=b""))


@pytest.mark.parametrize("term, ok", [(TERM_MAX, True), (TERM_MAX + 1, False), (I64 + 1, False), (-1, False),
                                      (0, True)])
def test_a_term_is_taken_only_when_it_can_be_incremented(term, ok):
    f = Frame(HEART_BEAT, body=json.dumps({"group": "g", "leaderId": "n0", "term": term}).encode())
    assert (decoded(f) == HeartBeatRequest("g", "n0", term)) if ok else decoded(f) is None
    ext = {**push_ext("g", "n0", 0), "term": str(term)}
    assert (decoded(Frame(PUSH, ext=ext)) is not None) == ok


@SETTINGS
@given(request_code=st.sampled_from([VOTE, HEART_BEAT, PUSH, LEADERSHIP_TRANSFER, PROBE, REPAIR, INSTALL_SNAPSHOT]),
       body=st.dictionaries(st.sampled_from(["term", "code", "voteResult", "index", "count", "beginIndex", "endIndex",
                                             "xTerm", "xIndex", "received", "installed", "dropped", "first", "terms",
                                             "chains", "digests", "committedIndex", "leaderId", "remark"]),
                            json_values, max_size=8))
def test_answers_with_hostile_fields_are_refused_or_in_range(request_code, body):
    try:
        resp = decode_response(Frame(0, flag=1, body=json.dumps(body).encode()), request_code)
    except BadMessage:
        return
    assert -1 <= resp.term <= TERM_MAX
    for name in ("index", "begin_index", "end_index", "x_index", "committed_index", "first"):
        assert -1 <= getattr(resp, name, -1) <= I64
    assert -1 <= getattr(resp, "x_term", -1) <= TERM_MAX


@SETTINGS
@given(fields=st.dictionaries(st.sampled_from(["group", "leaderId", "term", "type", "commitIndex", "entry",
                                               "batchEntry"]), json_values, max_size=6),
       entry=st.dictionaries(st.sampled_from(["index", "term", "pos", "magic", "size", "body", "bodyCrc"]),
                             json_values, max_size=5))
def test_a_java_push_with_hostile_fields_is_refused_or_in_range(fields, entry):
    body = {"group": "g", "leaderId": "n0", "term": 3, "type": "APPEND", "commitIndex": 1, **fields}
    if "entry" not in fields:
        body["entry"] = {"index": 2, "term": 3, "pos": 0, "magic": 1, "body": "aGk=", **entry}
    try:
        req = dialect.decode_push(json.dumps(body).encode())
    except BadMessage:
        return
    check_ranges(req)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 20000])
def test_json_too_deep_is_a_protocol_error_in_a_body_and_a_header(depth):
    body = ('{"group":"g","leaderId":"n0","term":1,"x":%s}' % nested(depth)).encode()
    with pytest.raises(BadMessage, match="nests"):
        decode_request(Frame(HEART_BEAT, body=body))
    with pytest.raises(BadMessage, match="nests"):
        dialect.decode_push(body)
    with pytest.raises(BadMessage, match="nests"):
        dledger_fields(body)
    for key in ("x", "extFields", "remark"):  # an unknown key (skipped, recursively, by a parser) and known ones
        header = ('{"code":%d,"%s":%s}' % (HEART_BEAT, key, nested(depth))).encode()
        with pytest.raises(MalformedFrame):
            FrameReceiver().feed(frame(HEART_BEAT, header=header))


def test_a_header_above_the_limit_is_refused_before_it_is_parsed():
    header = ('{"code":%d,"remark":"%s"}' % (HEART_BEAT, "x" * (70 << 10))).encode()
    with pytest.raises(MalformedFrame, match="limit"):
        FrameReceiver().feed(frame(HEART_BEAT, header=header))


def _depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


json_with_brackets = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ab', max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{}"\\', max_size=3), inner,
                                                                max_size=3),
    max_leaves=20)


@SETTINGS
@given(json_with_brackets)
def test_json_depth_counts_brackets_outside_strings_only(value):
    assert json_depth(json.dumps(value).encode()) == _depth(value)


@SETTINGS
@given(st.binary(max_size=200))
def test_json_depth_reads_any_bytes(data):
    assert json_depth(data) >= 0


@SETTINGS
@given(st.lists(st.sampled_from(BAD_NUMBERS + ["x", 3, -1]), min_size=1, max_size=4), st.data())
def test_hostile_frames_of_every_kind_raise_only_protocol_errors(values, data):
    """A whole frame of each peer request with a field spoiled, through the receiver the
    node uses: frames out, or a ProtocolError; decoding the message likewise."""
    code, body = data.draw(st.sampled_from(sorted(peer_requests("g", "n1", 2).items())))
    for v in values:
        body[data.draw(st.sampled_from(sorted(body)))] = v
    for f in FrameReceiver().feed(frame(code, json.dumps(body).encode(), language="JAVA")):
        try:
            decoded(f)
        except ProtocolError:
            pass
