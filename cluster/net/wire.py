"""Messages on the wire: DLedger's request codes and the peer and operator messages of
cluster/raft/rpc.py as frames (frames.py), and back. Sans-I/O.

Rules this module keeps:

- Decoding never raises anything but ProtocolError (frames.py) and its subclasses, whatever
  the bytes: a bad message becomes an error response.
- Every number a message carries is checked against its field's domain where it is
  decoded (frames.py :class:`Ints`: terms, indexes, counts, sizes), so nothing past the decoder meets
  a term that cannot be incremented or an index the log format cannot store.
- Requests carry DLedger's codes (METADATA 50000 ... LEADERSHIP_TRANSFER 51005); our operator
  requests use 52000 and up.
- PUSH carries its scalar fields in ``extFields`` and the entries as raw on-disk bytes in the
  body, so a follower writes what it receives without re-encoding; every other message
  is a JSON object body with DLedger's field names.
"""

from __future__ import annotations

from ..raft.rpc import (
    Code,
    HeartBeatRequest,
    HeartBeatResponse,
    InstallSnapshotRequest,
    InstallSnapshotResponse,
    LeadershipTransferRequest,
    LeadershipTransferResponse,
    ProbeRequest,
    ProbeResponse,
    PushRequest,
    PushResponse,
    PushType,
    RepairRequest,
    RepairResponse,
    VoteRequest,
    VoteResponse,
    VoteResult,
)
from .frames import (  # (the field domains are frames.py's, beside the JSON they check)
    COUNT,
    CRC,
    ENTRY_INDEX,
    FLAG_RESPONSE,
    HANDLED,
    INDEX,
    REMOTING_SUCCESS,
    SIZE,
    SOME_TERM,
    STATUS_CODE,
    TERM,
    BadMessage,
    Frame,
    ext_int,
    get_field,
    json_body,
    json_object,
    refusal_error,
)

# DLedgerRequestCode
METADATA = 50000
APPEND = 50001
GET = 50002
VOTE = 51001
HEART_BEAT = 51002
PULL = 51003
PUSH = 51004
LEADERSHIP_TRANSFER = 51005
INSTALL_SNAPSHOT = 51006  # DLedger HEAD's code; ours is sent in chunks (cluster/raft/rpc.py InstallSnapshotRequest)
# ours (operator requests), a range of their own
STATUS = 52000  # = METADATA
WATERMARKS = 52001  # operator -> leader: per-peer replication state
FORCE_COMPARE = 52002  # operator -> leader: find where a follower's log differs, repair it
FORCE_TRUNCATE = 52003  # operator -> leader: cut a follower's suffix, the leader re-fills it
PROBE = 52004  # leader -> follower: entry fingerprints (cluster/raft/rpc.py ProbeRequest)
REPAIR = 52005  # leader -> follower: forced truncation (cluster/raft/rpc.py RepairRequest)
QUERY = 52006  # client -> a node: ask its state machine (cluster/raft/statemachine.py), once it has applied what was committed
CHANGE_MEMBERS = 52007  # operator -> leader: add a learner, or remove a member (cluster/raft/membership.py)
READ_INDEX = 52008  # a node -> its leader: the confirmed read index of a linearizable read (cluster/raft/reads.py)
DIGESTS = 52009  # a member's scrub -> the others: crc32 of each committed entry of a range (cluster/node/scrub.py)
SNAPSHOT_READ = 52010  # client -> a node: a chunk of its latest state-machine snapshot (a live backup, dledgerctl/ops/backup.py)


def request_frame(req, opaque: int, to: str | None = None) -> Frame:
    """A peer request (cluster/raft/rpc.py) as a frame; ``to``: the member it is for, named in
    the body as ``remoteId`` (Java DLedger refuses a VOTE or HEART_BEAT that does not name it)."""
    if isinstance(req, PushRequest):
        ext = {"group": req.group, "leaderId": req.leader_id, "term": str(req.term), "type": str(req.type),
               "commitIndex": str(req.commit_index), "firstEntryIndex": str(req.first_index),
               "count": str(req.count)}
        if req.begin_index >= 0:
            ext["beginIndex"] = str(req.begin_index)
        if req.config_at:
            ext["configAt"] = ",".join(map(str, req.config_at))
        if req.members:
            ext["members"] = bytes(req.members).decode()
        body = req.entries  # (a view of a leader's remembered writes is sent as it is)
        return Frame(PUSH, opaque, ext=ext, body=body if isinstance(body, (bytes, memoryview)) else bytes(body))
    if isinstance(req, InstallSnapshotRequest):
        # the chunk and the leader's first entry as they are, one after the other (no base64)
        ext = {"group": req.group, "leaderId": req.leader_id, "term": str(req.term), "index": str(req.index),
               "snapTerm": str(req.snap_term), "size": str(req.size), "crc": str(req.crc),
               "offset": str(req.offset), "dataLength": str(len(req.data))}
        if req.members:
            ext["members"] = bytes(req.members).decode()
        return Frame(INSTALL_SNAPSHOT, opaque, ext=ext, body=bytes(req.data) + bytes(req.begin_entry))
    if isinstance(req, VoteRequest):
        return Frame(VOTE, opaque, body=json_body({
            "group": req.group, "remoteId": to, "leaderId": req.leader_id, "term": req.term,
            "ledgerEndIndex": req.ledger_end_index, "ledgerEndTerm": req.ledger_end_term,
            "preVote": req.pre_vote, "takeLeadership": req.take_leadership}))
    if isinstance(req, HeartBeatRequest):
        return Frame(HEART_BEAT, opaque, body=json_body({"group": req.group, "remoteId": to, "leaderId": req.leader_id,
                                                          "term": req.term}))
    if isinstance(req, LeadershipTransferRequest):
        body = {"group": req.group, "remoteId": to, "leaderId": req.leader_id, "transfereeId": req.transferee,
                "term": req.term, "take": req.take}
        if req.take:  # as DLedger's leader asks its transferee (LeadershipTransferRequest)
            body.update(transferId=req.leader_id, localId=req.leader_id, takeLeadershipLedgerIndex=req.end_index)
        return Frame(LEADERSHIP_TRANSFER, opaque, body=json_body(body))
    if isinstance(req, ProbeRequest):
        return Frame(PROBE, opaque, body=json_body({"group": req.group, "leaderId": req.leader_id, "term": req.term,
                                                    "first": req.first, "count": req.count}))
    if isinstance(req, RepairRequest):
        return Frame(REPAIR, opaque, body=json_body({"group": req.group, "leaderId": req.leader_id, "term": req.term,
                                                     "fromIndex": req.from_index}))
    raise TypeError(f"not a peer request: {type(req).__name__}")


def decode_request(f: Frame):
    """A peer request frame as a cluster/raft/rpc.py request; BadMessage if it is not one."""
    if f.code == PUSH:
        e = f.ext
        try:
            kind = PushType(e.get("type", ""))
        except ValueError:
            raise BadMessage(f"unknown push type {e.get('type')!r}") from None
        count = ext_int(e, "count", COUNT)
        config_at = ()
        if e.get("configAt"):
            parts = e["configAt"].split(",")
            if len(parts) > count:
                raise BadMessage(f"extField 'configAt' names {len(parts)} entries of a push of {count}")
            config_at = tuple(ext_int({"configAt": x}, "configAt", INDEX) for x in parts)
        return PushRequest(e.get("group", ""), e.get("leaderId", ""), ext_int(e, "term", TERM), kind,
                           ext_int(e, "commitIndex", INDEX), ext_int(e, "firstEntryIndex", INDEX), count, f.body,
                           ext_int(e, "beginIndex", INDEX) if "beginIndex" in e else -1, config_at,
                           e.get("members", "").encode())
    if f.code == INSTALL_SNAPSHOT:
        e = f.ext
        n = ext_int(e, "dataLength", SIZE)
        if not 0 <= n <= len(f.body):
            raise BadMessage(f"dataLength {n} does not fit a body of {len(f.body)} bytes")
        body = bytes(f.body)
        return InstallSnapshotRequest(e.get("group", ""), e.get("leaderId", ""), ext_int(e, "term", TERM),
                                      ext_int(e, "index", INDEX), ext_int(e, "snapTerm", SOME_TERM),
                                      ext_int(e, "size", SIZE), ext_int(e, "crc", CRC), ext_int(e, "offset", SIZE),
                                      body[:n], body[n:], e.get("members", "").encode())
    o = json_object(f.body)
    if f.code == VOTE:
        return VoteRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                           get_field(o, "ledgerEndIndex", INDEX), get_field(o, "ledgerEndTerm", SOME_TERM),
                           get_field(o, "preVote", bool, False), get_field(o, "takeLeadership", bool, False))
    if f.code == HEART_BEAT:
        return HeartBeatRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM))
    if f.code == LEADERSHIP_TRANSFER:
        # DLedger's leader asks its transferee with the same request, sent to the transferee
        theirs = o.get("remoteId") is not None and o.get("remoteId") == o.get("transfereeId")
        return LeadershipTransferRequest(get_field(o, "group", str), get_field(o, "leaderId", str),
                                         get_field(o, "transfereeId", str), get_field(o, "term", TERM),
                                         get_field(o, "take", bool, theirs),
                                         get_field(o, "takeLeadershipLedgerIndex", INDEX, -1))
    if f.code == PROBE:
        return ProbeRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                            get_field(o, "first", INDEX), get_field(o, "count", COUNT))
    if f.code == REPAIR:
        return RepairRequest(get_field(o, "group", str), get_field(o, "leaderId", str), get_field(o, "term", TERM),
                             get_field(o, "fromIndex", ENTRY_INDEX))
    raise BadMessage(f"request code {f.code} is not a peer request")


def response_frame(resp, opaque: int, request_code: int) -> Frame:
    if isinstance(resp, VoteResponse):
        body = {"term": resp.term, "voteResult": str(resp.vote_result), "code": int(resp.code)}
    elif isinstance(resp, HeartBeatResponse):
        body = {"term": resp.term, "code": int(resp.code), "leaderId": resp.leader_id}
        if resp.lease:  # (dledgerctl's own key, only when set: DLedger's members never see it)
            body["readLease"] = True
    elif isinstance(resp, PushResponse):
        body = {"term": resp.term, "code": int(resp.code), "index": resp.index, "count": resp.count,
                "beginIndex": resp.begin_index, "endIndex": resp.end_index, "xTerm": resp.x_term,
                "xIndex": resp.x_index, "remark": resp.remark}
    elif isinstance(resp, LeadershipTransferResponse):
        body = {"term": resp.term, "code": int(resp.code), "remark": resp.remark}
    elif isinstance(resp, ProbeResponse):
        body = {"term": resp.term, "code": int(resp.code), "beginIndex": resp.begin_index,
                "endIndex": resp.end_index, "committedIndex": resp.committed_index, "first": resp.first,
                "terms": list(resp.terms), "chains": list(resp.chains), "digests": list(resp.digests),
                "remark": resp.remark}
    elif isinstance(resp, RepairResponse):
        body = {"term": resp.term, "code": int(resp.code), "dropped": resp.dropped, "endIndex": resp.end_index,
                "committedIndex": resp.committed_index, "remark": resp.remark}
    elif isinstance(resp, InstallSnapshotResponse):
        body = {"term": resp.term, "code": int(resp.code), "received": resp.received, "installed": resp.installed,
                "beginIndex": resp.begin_index, "endIndex": resp.end_index, "remark": resp.remark}
    elif isinstance(resp, dict):
        body = resp
    else:
        raise TypeError(f"not a response: {type(resp).__name__}")
    return Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, body=json_body(body))


def _code(o: dict) -> Code:
    try:
        return Code(get_field(o, "code", STATUS_CODE))
    except ValueError:
        return Code.UNKNOWN


def decode_response(f: Frame, request_code: int):
    """The response to a request of ``request_code``; BadMessage if it does not fit."""
    if f.code not in HANDLED:
        raise refusal_error(f)
    o = json_object(f.body)
    if request_code == VOTE:
        try:
            result = VoteResult(get_field(o, "voteResult", str))
        except ValueError:
            result = VoteResult.UNKNOWN
        return VoteResponse(get_field(o, "term", SOME_TERM), result, _code(o))
    if request_code == HEART_BEAT:
        return HeartBeatResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "leaderId", str, None),
                                 get_field(o, "readLease", bool, False))
    if request_code == PUSH:
        return PushResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "index", INDEX, -1),
                            get_field(o, "count", COUNT, 0), get_field(o, "beginIndex", INDEX, -1),
                            get_field(o, "endIndex", INDEX, -1), get_field(o, "xTerm", SOME_TERM, -1),
                            get_field(o, "xIndex", INDEX, -1), get_field(o, "remark", str, ""))
    if request_code == LEADERSHIP_TRANSFER:
        return LeadershipTransferResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "remark", str, ""))
    if request_code == PROBE:
        lists = [get_field(o, k, list, []) for k in ("terms", "chains", "digests")]
        if len({len(x) for x in lists}) != 1 or not all(isinstance(v, int) and not isinstance(v, bool)
                                                        for x in lists for v in x):
            raise BadMessage("probe answer: terms, chains and digests must be integer lists of one length")
        for name, values, kind in zip(("terms", "chains", "digests"), lists, (SOME_TERM, CRC, CRC)):
            if values and not kind.lo <= min(values) <= max(values) <= kind.hi:
                raise BadMessage(f"probe answer: a value of {name!r} is outside {kind.lo}..{kind.hi}")
        return ProbeResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "beginIndex", INDEX, -1),
                             get_field(o, "endIndex", INDEX, -1), get_field(o, "committedIndex", INDEX, -1),
                             get_field(o, "first", INDEX, -1), *map(tuple, lists), get_field(o, "remark", str, ""))
    if request_code == INSTALL_SNAPSHOT:
        return InstallSnapshotResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "received", SIZE, 0),
                                       get_field(o, "installed", bool, False), get_field(o, "beginIndex", INDEX, -1),
                                       get_field(o, "endIndex", INDEX, -1), get_field(o, "remark", str, ""))
    if request_code == REPAIR:
        return RepairResponse(get_field(o, "term", SOME_TERM), _code(o), get_field(o, "dropped", SIZE, 0),
                              get_field(o, "endIndex", INDEX, -1), get_field(o, "committedIndex", INDEX, -1),
                              get_field(o, "remark", str, ""))
    return o


def request_code_of(req) -> int:
    return {PushRequest: PUSH, VoteRequest: VOTE, HeartBeatRequest: HEART_BEAT,
            LeadershipTransferRequest: LEADERSHIP_TRANSFER, ProbeRequest: PROBE, RepairRequest: REPAIR,
            InstallSnapshotRequest: INSTALL_SNAPSHOT}[type(req)]
