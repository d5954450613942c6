"""Answers decoded into api.py's types on the side that reads them: a READ_INDEX answer (a
follower serving a linearizable read asks its leader) is the confirmed index or the refusal,
whatever bytes arrive: every field range-checked, anything else BadMessage."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from cluster.net import api
from cluster.net.frames import BadMessage
from cluster.raft.rpc import Code


def body(o) -> bytes:
    return msgspec.json.encode(o)


def test_a_confirmed_index_and_the_leader_that_confirmed_it():
    reply = api.read_index_reply(api.answer_frame(api.ReadIndexAnswer(41, "n1"), 7).body)
    assert reply == api.ReadIndexAnswer(41, "n1")


def test_a_refusal_keeps_its_code_why_and_the_leader_known():
    reply = api.read_index_reply(body({"code": int(Code.NOT_LEADER), "remark": "not the leader", "leaderId": "n2"}))
    assert reply == api.Refusal(Code.NOT_LEADER, "not the leader", "n2")
    assert api.read_index_reply(body({"code": 99999})) == api.Refusal(Code.UNKNOWN, "", None)


@pytest.mark.parametrize("o, why", [
    ({"code": int(Code.SUCCESS)}, "index"),
    ({"code": int(Code.SUCCESS), "index": -2}, "index"),
    ({"code": int(Code.SUCCESS), "index": 1 << 63}, "index"),
    ({"code": int(Code.SUCCESS), "index": True}, "index"),
    ({"code": "0", "index": 1}, "code"),
    ({"code": int(Code.NOT_LEADER), "leaderId": 7}, "leaderId"),
    ([1, 2], "object"),
])
def test_what_is_no_read_index_answer_is_refused_by_name(o, why):
    """(A code no Code names is a refusal of unknown kind, not an error: the test above.)"""
    with pytest.raises(BadMessage, match=why):
        api.read_index_reply(body(o))


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
                           max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["code", "index", "leaderId", "remark", "x"]), json_values, max_size=5)
       | st.binary(max_size=64))
def test_any_bytes_decode_or_are_bad_message(o):
    raw = o if isinstance(o, bytes) else body(o)
    try:
        reply = api.read_index_reply(raw)
    except BadMessage:
        return
    if isinstance(reply, api.ReadIndexAnswer):
        assert isinstance(reply.index, int) and reply.index >= -1
    else:
        assert isinstance(reply.code, Code)


def test_a_query_answer_as_a_node_sends_it_and_one_that_is_not():
    sent = msgspec.json.decode(api.answer_frame(api.QueryAnswer(b'{"value": "3"}', 12, "leader"), 1).body)
    assert api.query_reply(sent) == api.QueryAnswer(b'{"value": "3"}', 12, "leader")
    with pytest.raises(BadMessage, match="base64"):
        api.query_reply({"code": 0, "result": "not base64!", "appliedIndex": 1})
    with pytest.raises(BadMessage, match="appliedIndex"):
        api.query_reply({"code": 0, "result": "", "appliedIndex": -5})


def test_a_change_answer_as_a_node_sends_it_and_one_that_is_not():
    answer = api.ChangeAnswer(int(Code.SUCCESS), "", 40, 3, "n0", ["n0", "n1"], ["n3"],
                              {"n0": "127.0.0.1:1", "n1": "127.0.0.1:2", "n3": "127.0.0.1:4"})
    assert api.change_reply(msgspec.json.decode(api.answer_frame(answer, 1).body)) == answer
    with pytest.raises(BadMessage, match="voters"):
        api.change_reply({"code": 0, "voters": ["n0", 7]})
    with pytest.raises(BadMessage, match="peers"):
        api.change_reply({"code": 0, "peers": {"n0": 1}})
    with pytest.raises(BadMessage, match="index"):
        api.change_reply({"code": 0, "index": 1 << 64})


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["code", "result", "appliedIndex", "role", "index", "term", "leaderId",
                                        "voters", "learners", "peers", "remark"]), json_values, max_size=6))
def test_any_object_is_a_query_or_change_answer_or_bad_message(o):
    for decode in (api.query_reply, api.change_reply):
        try:
            decode(o)
        except BadMessage:
            pass
