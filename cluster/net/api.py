"""Client and operator requests as typed messages: decoded once from a frame, every wire
number range-checked where it is read (as wire.py does for the peer messages of
cluster/raft/rpc.py), and the frames a client sends for them. Sans-I/O.

Rules this module keeps:

- :func:`decode` is the only reader of a client or operator request's frame; it raises
  nothing but BadMessage (frames.py), and :class:`NotARequest` for a code no request has.
  Nothing past it reads a request's JSON or extFields.
- The wire stays DLedger's: its request codes (wire.py), its JSON field names, and its own
  client's forms (AppendEntryRequest, GetEntriesRequest, MetadataRequest), told from
  dledgerctl's own by their fields and answered each in its own form.
- What a node may do with a request (its group, the member it names, whether it leads) is
  the node's to decide (cluster/node/requests.py), not the decoder's: a request for another
  group decodes as one.
- A JSON ``group`` that is not given reads as None (any group will do); one given as null
  reads as "" (no group: refused by every node).

Entries travel as bytes where they can. APPEND (a hot path both ways: a client makes a
request and a leader an answer per append, without a Frame or a dict per body): extFields
``group``, ``count``; body = ``count`` int32 body sizes, then the bodies one after another, so
a leader hands the frame's body to the store as it is. Its answer's body is JSON: ``code``,
``term``, ``leaderId``, ``remark`` and on success ``entries``, one row ``[index, term, pos,
size]`` per body. DLedger's AppendEntryRequest carries one body, base64 in JSON.

GET answers in dledgerctl's binary form when asked (``"raw": true``; DLedger's own client never
does, and a node that does not know the field answers in JSON, which the client reads too):
the entries as they lie in the data files (48-byte header, then the body: what a PUSH
carries), not DLedger's JSON objects with base64 bodies. The binary answer's extFields:
``code`` (SUCCESS; refusals are JSON, as ever), ``raw`` "1", ``count`` (entries in the body),
``term`` and ``leaderId`` (the answering node's).

SNAPSHOT_READ answers in a binary form too: extFields ``code`` (SUCCESS), ``index``, ``term``,
``size`` and ``crc`` of the snapshot, ``offset`` of the chunk; body = the chunk's bytes (none
when the member has no snapshot: ``index`` -1). Refusals are JSON.

What a client writes and reads back (the frames of these requests, the answers' decoding)
is api_client.py's.
"""

from __future__ import annotations

import base64
from typing import Union

import msgspec

from ..raft.rpc import Code
from .frames import (
    COUNT,
    ENTRY_INDEX,
    FLAG_RESPONSE,
    INDEX,
    REMOTING_SUCCESS,
    SIZE,
    BadMessage,
    Frame,
    check_depth,
    ext_int,
    get_field,
    in_range,
    json_body,
    json_object,
)
from .appends import check_bodies
from .wire import (
    APPEND,
    CHANGE_MEMBERS,
    DIGESTS,
    FORCE_COMPARE,
    FORCE_TRUNCATE,
    GET,
    METADATA,
    QUERY,
    READ_INDEX,
    SNAPSHOT_READ,
    STATUS,
    WATERMARKS,
)

LINEARIZABLE, SERIALIZABLE = "linearizable", "serializable"
_encoder = msgspec.json.Encoder()


class _Message(msgspec.Struct, frozen=True):
    """A request or an answer: immutable, and cheap to make (a msgspec Struct is built in C,
    about a tenth of a frozen dataclass's cost; a node makes one or two per request). Not
    decoded by msgspec: the wire's field names are DLedger's, and every number is checked
    where it is read (frames.get_field, in_range)."""


class NotARequest(BadMessage):
    """A frame whose code no client, operator or peer request has (answered
    REMOTING_NOT_SUPPORTED, as RocketMQ remoting answers an unknown code)."""


# -- the requests ---------------------------------------------------------------------------

class Metadata(_Message):
    """METADATA (DLedger's MetadataRequest) or STATUS (``code``): the node's state."""

    code: int = METADATA
    group: str | None = None
    remote_id: str | None = None


class Append(_Message):
    """dledgerctl's APPEND: ``count`` bodies packed in ``data`` (see the module's docstring), checked
    whole but not cut (a leader hands ``data`` to the store); ``largest``: the largest body."""

    group: str | None
    count: int
    data: bytes | memoryview
    largest: int


class DLedgerAppend(_Message):
    """DLedger's AppendEntryRequest: one body (base64 in its JSON); None when it has none."""

    group: str | None
    remote_id: str | None
    body: bytes | None


class Get(_Message):
    """dledgerctl's GET: committed entries from ``index``, at most ``count``; ``raw``: as
    their bytes rather than JSON objects (see the module's docstring)."""

    group: str | None
    remote_id: str | None
    index: int
    count: int = 1
    consistency: str = LINEARIZABLE
    raw: bool = False


class DLedgerGet(_Message):
    """DLedger's GetEntriesRequest: the entry at ``begin_index``, from the node's own log."""

    group: str | None
    remote_id: str | None
    begin_index: int


class Query(_Message):
    """QUERY: ``query`` for the node's state machine (cluster/raft/statemachine.py)."""

    group: str | None
    query: bytes
    consistency: str = LINEARIZABLE


class ReadIndex(_Message):
    """READ_INDEX: a follower asks its leader for a confirmed read index."""

    group: str | None = None


class Digests(_Message):
    """DIGESTS: crc32 of each whole encoded entry ``first .. first + count - 1`` that the asked
    member holds committed (read-only; a member's scrub compares entries written without
    CRCs across the members with it)."""

    group: str | None
    remote_id: str | None
    first: int
    count: int


SNAPSHOT_CHUNK_MAX = 16 << 20  # the most a SNAPSHOT_READ may ask for at once


class SnapshotRead(_Message):
    """SNAPSHOT_READ: ``length`` bytes from ``offset`` of the asked member's state-machine
    snapshot as of entry ``index`` (-1: its latest that checks out). Read-only."""

    group: str | None
    remote_id: str | None
    index: int
    offset: int
    length: int


class ChangeMembers(_Message):
    """CHANGE_MEMBERS: ``kind`` "add" (a learner at ``address``) or "remove" member ``node``."""

    group: str | None
    kind: str
    node: str | None
    address: str | None = None


class Watermarks(_Message):
    """WATERMARKS: every peer's replication state, from the leader."""

    group: str | None = None


class ForceCompare(_Message):
    """FORCE_COMPARE: find where ``peer``'s log leaves the leader's (``deep``: by every entry's
    fingerprint), and repair it unless ``dry_run``."""

    group: str | None
    peer: str
    deep: bool = False
    dry_run: bool = False


class ForceTruncate(_Message):
    """FORCE_TRUNCATE: cut ``peer``'s log from ``from_index``; the leader re-fills it."""

    group: str | None
    peer: str
    from_index: int


Request = Union[Metadata, Append, DLedgerAppend, Get, DLedgerGet, Query, ReadIndex, ChangeMembers, Watermarks,
                ForceCompare, ForceTruncate, Digests, SnapshotRead]


# -- decoding: a frame -> one request ---------------------------------------------------------

class _DLedgerFields(msgspec.Struct):
    """The fields of DLedger's AppendEntryRequest, GetEntriesRequest and MetadataRequest."""

    group: str | None = None
    remoteId: str | None = None
    body: bytes | None = None  # APPEND
    beginIndex: int | None = None  # GET
    maxSize: int = 0
    indexList: list[int] | None = None


_dledger_fields = msgspec.json.Decoder(_DLedgerFields)


def dledger_fields(body) -> _DLedgerFields:
    """The fields of a request in DLedger's client form; BadMessage when it is not one."""
    check_depth(body, "body JSON")
    try:
        req = _dledger_fields.decode(body or b"{}")
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
        raise BadMessage(f"not a DLedger request body: {exc}") from None
    if req.beginIndex is not None:
        in_range(req.beginIndex, INDEX, "beginIndex")
    return req


def addressee(body) -> tuple[str | None, str | None]:
    """(group, remoteId) a JSON object body names (DLedger's fields); (None, None) for a
    body that is no JSON object (earlier dledgerctl clients sent none)."""
    if bytes(body[:1]) != b"{":
        return None, None
    said = dledger_fields(body)
    return said.group, said.remoteId


def _group(o: dict) -> str | None:
    if "group" not in o:
        return None
    group = get_field(o, "group", str)
    return "" if group is None else group


def _consistency(o: dict) -> str:
    """The ``consistency`` a read asks for (BadMessage when it is neither)."""
    value = get_field(o, "consistency", str, LINEARIZABLE)
    if value not in (LINEARIZABLE, SERIALIZABLE):
        raise BadMessage(f"consistency must be {LINEARIZABLE} or {SERIALIZABLE}, not {value!r}")
    return value


def _metadata(f: Frame) -> Metadata:
    return Metadata(f.code, *addressee(f.body))


def _append(f: Frame) -> Append | DLedgerAppend:
    if "count" not in f.ext:  # DLedger's own client: one body, base64 in a JSON object
        said = dledger_fields(f.body)
        return DLedgerAppend(said.group, said.remoteId, said.body)
    count = ext_int(f.ext, "count", COUNT)  # (plain ASCII digits, as every number on the wire)
    return Append(f.ext.get("group"), count, f.body, check_bodies(f.body, count))


def _get(f: Frame) -> Get | DLedgerGet:
    o = json_object(f.body)
    group, remote = addressee(f.body)
    if "index" not in o and "beginIndex" in o:  # DLedger's own client
        return DLedgerGet(group, remote, get_field(o, "beginIndex", INDEX))
    return Get(group, remote, get_field(o, "index", INDEX), get_field(o, "count", COUNT, 1),
               raw=get_field(o, "raw", bool, False), consistency=_consistency(o))


def _query(f: Frame) -> Query:
    o = json_object(f.body)
    group = _group(o)
    try:
        query = base64.b64decode(get_field(o, "query", str), validate=True)
    except (ValueError, TypeError):
        raise BadMessage("field 'query' is not base64") from None
    return Query(group, query, _consistency(o))


def _read_index(f: Frame) -> ReadIndex:
    return ReadIndex(_group(json_object(f.body)))


def _digests(f: Frame) -> Digests:
    o = json_object(f.body)
    group, remote = addressee(f.body)
    return Digests(group, remote, get_field(o, "first", ENTRY_INDEX), get_field(o, "count", COUNT))


def _snapshot_read(f: Frame) -> SnapshotRead:
    o = json_object(f.body)
    group, remote = addressee(f.body)
    length = get_field(o, "length", COUNT)
    if not 0 < length <= SNAPSHOT_CHUNK_MAX:
        raise BadMessage(f"field 'length' is {length}, outside 1..{SNAPSHOT_CHUNK_MAX}")
    return SnapshotRead(group, remote, get_field(o, "index", INDEX), get_field(o, "offset", SIZE), length)


def _change_members(f: Frame) -> ChangeMembers:
    o = json_object(f.body)
    group = _group(o)
    kind = get_field(o, "kind", str)
    if kind not in ("add", "remove"):
        raise BadMessage(f"kind must be add or remove, not {kind!r}")
    node, address = get_field(o, "id", str), get_field(o, "address", str, None)
    if kind == "add" and not address:
        raise BadMessage("adding a member needs its address")
    return ChangeMembers(group, kind, node, address)


def _operator(f: Frame) -> Watermarks | ForceCompare | ForceTruncate:
    o = json_object(f.body)
    group = _group(o)
    if f.code == WATERMARKS:
        return Watermarks(group)
    peer = get_field(o, "peer", str, None)
    if peer is None:
        raise BadMessage("missing field 'peer'")
    if f.code == FORCE_COMPARE:
        return ForceCompare(group, peer, get_field(o, "deep", bool, False), get_field(o, "dryRun", bool, False))
    return ForceTruncate(group, peer, get_field(o, "fromIndex", ENTRY_INDEX))


_DECODERS = {METADATA: _metadata, STATUS: _metadata, APPEND: _append, GET: _get, QUERY: _query,
             READ_INDEX: _read_index, CHANGE_MEMBERS: _change_members, WATERMARKS: _operator,
             FORCE_COMPARE: _operator, FORCE_TRUNCATE: _operator, DIGESTS: _digests, SNAPSHOT_READ: _snapshot_read}


def decode(f: Frame) -> Request:
    """The client or operator request a frame carries; BadMessage saying what is wrong with
    it, NotARequest for a code of none."""
    decoder = _DECODERS.get(f.code)
    if decoder is None:
        raise NotARequest(f"request code {f.code} is not a client request")
    return decoder(f)


def dry_run_asked(f: Frame) -> bool:
    """Whether a FORCE_COMPARE frame asks for a dry run, read before the request is decoded
    (under TLS a client may compare without repairing: whether it may ask is decided
    before what it asks is read, so a refused client learns nothing of its request)."""
    try:
        return json_object(f.body).get("dryRun") is True
    except BadMessage:
        return False


# -- the answers a node gives ------------------------------------------------------------------
# Each is a JSON object body with DLedger's field names, in the order written here (the
# hot APPEND answer is made whole: append_answers below). answer_frame makes the frame.

class Refusal(_Message):
    """A request this node will not serve now: ``code`` (NOT_LEADER, UNKNOWN_GROUP, TIMEOUT,
    ...), why, and the leader it knows (with its address when it is a member)."""

    code: int
    remark: str
    leader_id: str | None
    leader_address: str | None = None

    def body(self) -> dict:
        out = {"code": int(self.code), "remark": self.remark, "leaderId": self.leader_id}
        if self.leader_address is not None:
            out["leaderAddress"] = self.leader_address
        return out


class BadRequest(_Message):
    """A request that does not decode: UNEXPECTED_ARGUMENT with the reason."""

    term: int
    leader_id: str | None
    remark: str

    def body(self) -> dict:
        return {"code": int(Code.UNEXPECTED_ARGUMENT), "term": self.term, "leaderId": self.leader_id,
                "remark": self.remark}


class Misdirected(_Message):
    """A client request for another group (UNKNOWN_GROUP) or member (UNKNOWN_MEMBER), as
    DLedger answers it."""

    code: int
    group: str
    leader_id: str | None
    remark: str

    def body(self) -> dict:
        return {"code": int(self.code), "group": self.group, "leaderId": self.leader_id, "remark": self.remark}


class AppendRefused(_Message):
    """dledgerctl's APPEND refused before it is queued (another group)."""

    code: int
    remark: str

    def body(self) -> dict:
        return {"code": int(self.code), "remark": self.remark}


class DLedgerAppendRefused(_Message):
    """DLedger's AppendEntryRequest refused before it is queued (its AppendEntryResponse)."""

    code: int
    group: str
    leader_id: str | None
    term: int
    remark: str

    def body(self) -> dict:
        return {"code": int(self.code), "group": self.group, "index": -1, "pos": -1, "leaderId": self.leader_id,
                "term": self.term, "remark": self.remark}


def dledger_append_answer(code: int, group: str, index: int, leader_id: str | None, pos: int, term: int,
                          remark: str) -> bytes:
    """The body of the answer to DLedger's AppendEntryRequest once its proposal is done."""
    return _encoder.encode({"code": int(code), "group": group, "index": index, "leaderId": leader_id, "pos": pos,
                            "term": term, **({"remark": remark} if remark else {})})


class Entries(_Message):
    """A GET's answer in JSON: ``entries`` (DLedger's entry objects, store_entry_object) on
    SUCCESS, else ``remark``; with the answering node's group, leader and term."""

    code: int
    group: str
    leader_id: str | None
    term: int
    entries: list | None = None
    remark: str = ""

    def body(self) -> dict:
        out = {"group": self.group, "leaderId": self.leader_id, "term": self.term, "code": int(self.code)}
        if self.entries is None:
            out["remark"] = self.remark
        else:
            out["entries"] = self.entries
        return out


class MetadataAnswer(_Message):
    """METADATA and STATUS: the node's state (DLedger's MetadataResponse fields, group,
    leaderId and peers, and dledgerctl's: role, term, indexes, replication, ...)."""

    state: dict

    def body(self) -> dict:
        return self.state


class QueryAnswer(_Message):
    """QUERY: the state machine's ``result``, as applied up to ``applied_index``."""

    result: bytes
    applied_index: int
    role: str

    def body(self) -> dict:
        return {"code": int(Code.SUCCESS), "result": base64.b64encode(self.result).decode("ascii"),
                "appliedIndex": self.applied_index, "role": self.role}


class ReadIndexAnswer(_Message):
    """READ_INDEX: the confirmed read ``index`` and the leader that confirmed it."""

    index: int
    leader_id: str | None

    def body(self) -> dict:
        return {"code": int(Code.SUCCESS), "index": self.index, "leaderId": self.leader_id}


def read_index_reply(body: bytes) -> ReadIndexAnswer | Refusal:
    """A READ_INDEX answer as sent (a leader asked by a follower): the confirmed index, or the
    refusal with its code, why and the leader the answering member knows; BadMessage when it
    does not decode or a field is out of its range (an unknown code is Code.UNKNOWN)."""
    o = json_object(body)
    code = get_field(o, "code", int)
    if code == Code.SUCCESS:
        return ReadIndexAnswer(get_field(o, "index", INDEX), get_field(o, "leaderId", str, None))
    return Refusal(Code(code) if code in Code._value2member_map_ else Code.UNKNOWN, get_field(o, "remark", str, ""),
                   get_field(o, "leaderId", str, None))


def query_reply(o: dict) -> QueryAnswer:
    """A QUERY answer's JSON object (SUCCESS): the result (base64 on the wire), the index the
    answering member had applied, its role; BadMessage when a field is out of its domain."""
    try:
        result = base64.b64decode(get_field(o, "result", str, "") or "", validate=True)
    except ValueError:
        raise BadMessage("field 'result' is not base64") from None
    return QueryAnswer(result, get_field(o, "appliedIndex", INDEX, -1), get_field(o, "role", str, "") or "")


def change_reply(o: dict) -> ChangeAnswer:
    """A CHANGE_MEMBERS answer's JSON object: the config entry, the term, the leader, and the
    members then (ids; id -> HOST:PORT); BadMessage when a field is out of its domain."""
    voters, learners = get_field(o, "voters", list, []), get_field(o, "learners", list, [])
    peers = o.get("peers", {})
    if not all(isinstance(v, str) for v in voters + learners):
        raise BadMessage("fields 'voters' and 'learners' must be lists of member ids")
    if not isinstance(peers, dict) or not all(isinstance(a, str) for a in peers.values()):
        raise BadMessage("field 'peers' must map member ids to addresses")
    return ChangeAnswer(get_field(o, "code", int), get_field(o, "remark", str, "") or "", get_field(o, "index", INDEX, -1),
                        get_field(o, "term", INDEX, -1), get_field(o, "leaderId", str, None), voters, learners, peers)


class DigestsAnswer(_Message):
    """DIGESTS: the digests of the committed entries from ``first`` the member holds (fewer
    than asked when its log begins later or its commit index is lower), and its bounds."""

    first: int
    digests: list
    begin_index: int
    committed_index: int

    def body(self) -> dict:
        return {"code": int(Code.SUCCESS), "first": self.first, "digests": self.digests,
                "beginIndex": self.begin_index, "committedIndex": self.committed_index}


def digests_answer(o: dict) -> DigestsAnswer:
    """A DIGESTS answer's JSON object, checked (BadMessage when a field is missing or out of
    range: the scrub then takes the member as not answering)."""
    digests = get_field(o, "digests", list)
    if len(digests) > 1 << 16 or not all(type(d) is int and 0 <= d < 1 << 32 for d in digests):
        raise BadMessage("digests must be at most 65,536 unsigned 32-bit integers")
    return DigestsAnswer(get_field(o, "first", ENTRY_INDEX), digests, get_field(o, "beginIndex", INDEX),
                         get_field(o, "committedIndex", INDEX))


class ChangeAnswer(_Message):
    """CHANGE_MEMBERS: the config entry's outcome and the members then."""

    code: int
    remark: str
    index: int
    term: int
    leader_id: str | None
    voters: list
    learners: list
    peers: dict  # id -> address

    def body(self) -> dict:
        return {"code": int(self.code), "remark": self.remark, "index": self.index, "term": self.term,
                "leaderId": self.leader_id, "voters": self.voters, "learners": self.learners, "peers": self.peers}


class OperatorAnswer(_Message):
    """WATERMARKS (``{"peers": [...]}``), FORCE_COMPARE and FORCE_TRUNCATE done: SUCCESS and
    the operation's row (its fields are documented with the peer commands)."""

    row: dict

    def body(self) -> dict:
        return {"code": int(Code.SUCCESS), **self.row}


def answer_frame(answer, opaque: int) -> Frame:
    """The response frame of one of the answers above."""
    return Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, body=json_body(answer.body()))


def snapshot_chunk_frame(opaque: int, index: int, term: int, size: int, crc: int, offset: int, data) -> Frame:
    """SNAPSHOT_READ's answer (the binary form the module's docstring describes)."""
    ext = {"code": str(int(Code.SUCCESS)), "index": str(index), "term": str(term), "size": str(size),
           "crc": str(crc), "offset": str(offset)}
    return Frame(REMOTING_SUCCESS, opaque, FLAG_RESPONSE, ext=ext, body=bytes(data))
