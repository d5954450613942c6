"""RocketMQ 5's controller over RocketMQ remoting: the admin requests ``mqadmin`` sends
(``getControllerMetaData``, ``getSyncStateSet``) and those a controller-mode broker sends
(heartbeat, broker id, register, elect, SyncStateSet), typed, with every number from the wire
range-checked.

The frames are frames.py's (one codec for RocketMQ remoting, as DLedger uses it: ``int32
length`` · ``int32 (serializeType << 24) | headerLength`` · JSON header · body; a frame above
the maximum is refused from its length field, a header above 64 KiB or JSON nested deeper than
32 levels before parsing); the connection is channel.py's (requests matched by opaque, each
with its own timeout). Decoding here is sans-I/O (``decode_*`` take a Frame and return typed
answers or raise :class:`BadAnswer`); only :class:`ControllerClient` does I/O.

Facts from apache/rocketmq, tag rocketmq-all-5.3.3 (each checked against the controller run in
tests/java/test_controller_watch_java.py):

- codes: remoting/.../protocol/RequestCode.java and ResponseCode.java (below, their names);
- a request's custom header travels as ``extFields`` strings named as its Java fields
  (``CommandCustomHeader``); a response's likewise (``GetMetaDataResponseHeader``: group,
  controllerLeaderId, controllerLeaderAddress, isLeader, peers as ``id:host:port;...``);
- ``CONTROLLER_GET_SYNC_STATE_DATA``'s request body is a JSON list of broker names, its answer
  ``BrokerReplicasInfo`` as fastjson writes it: ``replicasInfoTable`` of broker name to
  masterBrokerId, masterAddress, masterEpoch, syncStateSetEpoch, inSyncReplicas and
  notInSyncReplicas (each brokerName, brokerId, brokerAddress, alive). ``alive`` is the
  controller's ``isBrokerActive``: a heartbeat within the broker's heartbeat timeout, on the
  controller that answers (brokers heartbeat to the leader only);
- every controller request but metadata is answered by the leader only (followers answer
  CONTROLLER_NOT_LEADER).

Errors: :class:`ControllerError` and its kinds: :class:`Unreachable` (no answer: the transport's
error is its cause), :class:`Refused` (the controller answered with a non-zero code; ``code``,
``name`` and ``remark``), :class:`BadAnswer` (what came back is not the answer the request
has: a malformed frame, a field out of range).
"""

from __future__ import annotations

import msgspec

from .channel import Channel
from .frames import FLAG_ONEWAY, Frame, ProtocolError, check_depth
from .transport import TransportError, why

# RequestCode (rocketmq-all-5.3.3)
BROKER_HEARTBEAT = 904
CONTROLLER_ALTER_SYNC_STATE_SET = 1001
CONTROLLER_ELECT_MASTER = 1002
CONTROLLER_REGISTER_BROKER = 1003
CONTROLLER_GET_REPLICA_INFO = 1004
CONTROLLER_GET_METADATA_INFO = 1005
CONTROLLER_GET_SYNC_STATE_DATA = 1006
CONTROLLER_GET_NEXT_BROKER_ID = 1012
CONTROLLER_APPLY_BROKER_ID = 1013

# ResponseCode (rocketmq-all-5.3.3): the names an error shows
SUCCESS = 0
CONTROLLER_NOT_LEADER = 2007
RESPONSE_NAMES = {
    1: "SYSTEM_ERROR", 2: "SYSTEM_BUSY", 3: "REQUEST_CODE_NOT_SUPPORTED", 2000: "CONTROLLER_FENCED_MASTER_EPOCH",
    2001: "CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH", 2002: "CONTROLLER_INVALID_MASTER",
    2003: "CONTROLLER_INVALID_REPLICAS", 2004: "CONTROLLER_MASTER_NOT_AVAILABLE", 2005: "CONTROLLER_INVALID_REQUEST",
    2006: "CONTROLLER_BROKER_NOT_ALIVE", 2007: "CONTROLLER_NOT_LEADER", 2008: "CONTROLLER_BROKER_METADATA_NOT_EXIST",
    2009: "CONTROLLER_INVALID_CLEAN_BROKER_METADATA", 2010: "CONTROLLER_BROKER_NEED_TO_BE_REGISTERED",
    2011: "CONTROLLER_MASTER_STILL_EXIST", 2012: "CONTROLLER_ELECT_MASTER_FAILED",
    2013: "CONTROLLER_ALTER_SYNC_STATE_SET_FAILED", 2014: "CONTROLLER_BROKER_ID_INVALID",
    2015: "CONTROLLER_JRAFT_INTERNAL_ERROR", 2016: "CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS",
}

MAX_FRAME = 16 << 20  # NettyDecoder's default frameMaxLength (com.rocketmq.remoting.frameMaxLength)
MAX_BROKER_SETS = 100_000  # broker sets in one sync-state answer (each a few hundred bytes: far past any cluster)
MAX_TEXT = 4096  # a name or address from the wire
JAVA_INT = (-(1 << 31), (1 << 31) - 1)
JAVA_LONG = (-(1 << 63), (1 << 63) - 1)
PORT = (1, 65535)


class ControllerError(Exception):
    """A controller request that did not get its answer."""


class Unreachable(ControllerError):
    pass


class BadAnswer(ControllerError):
    pass


class Refused(ControllerError):
    def __init__(self, address: str, code: int, remark: str) -> None:
        self.address, self.code, self.remark = address, code, remark
        self.name = RESPONSE_NAMES.get(code, f"code {code}")
        super().__init__(f"{address}: {self.name}" + (f": {remark}" if remark else ""))


# -- typed answers ---------------------------------------------------------------------------

class ControllerMetadata(msgspec.Struct, frozen=True):
    """``GetMetaDataResponseHeader``: the DLedger group, its leader (id and address: the
    leader's remoting address, the port of its DLedger server) and the peers (id -> address)."""

    address: str  # the member that answered
    group: str | None
    leader_id: str | None
    leader_address: str | None
    is_leader: bool
    peers: dict[str, str]


class Replica(msgspec.Struct, frozen=True):  # BrokerReplicasInfo.ReplicaIdentity
    broker_id: int
    address: str | None
    alive: bool


class ReplicasInfo(msgspec.Struct, frozen=True):  # BrokerReplicasInfo.ReplicasInfo
    broker_name: str
    master_broker_id: int | None
    master_address: str | None
    master_epoch: int
    sync_state_set_epoch: int
    in_sync: tuple[Replica, ...]
    not_in_sync: tuple[Replica, ...]


class MasterAnswer(msgspec.Struct, frozen=True):
    """What register and elect answer (``RegisterBrokerToControllerResponseHeader``,
    ``ElectMasterResponseHeader``): the master, if any, and the epochs."""

    master_broker_id: int | None
    master_address: str | None
    master_epoch: int | None
    sync_state_set_epoch: int | None


# -- decoding (sans-I/O) ---------------------------------------------------------------------

def _int(value, name: str, bounds: tuple[int, int] = JAVA_LONG, *, null: bool = False) -> int | None:
    """A number from the wire: an int (JSON) or its decimal text (extFields), within ``bounds``."""
    if value is None and null:
        return None
    if isinstance(value, str):
        text = value
        if not (0 < len(text) <= 20 and text.isascii() and (text.isdigit() or
                                                              (text[0] == "-" and text[1:].isdigit()))):
            raise BadAnswer(f"{name} is not an integer: {text[:40]!r}")
        value = int(text)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadAnswer(f"{name} is not an integer: {str(value)[:40]!r}")
    if not bounds[0] <= value <= bounds[1]:
        raise BadAnswer(f"{name} is {value if abs(value) < 10**30 else 'a huge number'}, outside "
                        f"{bounds[0]}..{bounds[1]}")
    return value


def _text(value, name: str, *, null: bool = True) -> str | None:
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise BadAnswer(f"{name} is not a string")
    if len(value) > MAX_TEXT:
        raise BadAnswer(f"{name} is {len(value)} characters long, above {MAX_TEXT}")
    return value


def _bool(value, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if value in ("true", "false"):  # (extFields hold a boolean as its text)
        return value == "true"
    raise BadAnswer(f"{name} is not true or false: {str(value)[:40]!r}")


def check_response(address: str, f: Frame, code: int) -> Frame:
    """``f`` when it is the successful answer to a request of ``code``; Refused for a non-zero
    code, BadAnswer for a frame that is no response."""
    if not f.is_response:
        raise BadAnswer(f"{address}: answered request {code} with a request (code {f.code}), not a response")
    if f.code != SUCCESS:
        raise Refused(address, f.code, (f.remark or "")[:MAX_TEXT])
    return f


def host_port(address: str, what: str = "address") -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); ValueError naming ``what`` when it is not one."""
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not PORT[0] <= int(port) <= PORT[1]:
        raise ValueError(f"{what} {address!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def decode_metadata(address: str, f: Frame) -> ControllerMetadata:
    ext = f.ext or {}
    peers: dict[str, str] = {}
    for part in (_text(ext.get("peers"), "peers") or "").split(";"):
        if not part.strip():
            continue
        ident, sep, peer = part.partition(":")  # (DLedgerController: id + ":" + address)
        try:
            host_port(peer)
        except ValueError:
            raise BadAnswer(f"{address}: peer {part[:80]!r} is not ID:HOST:PORT") from None
        if not sep or not ident:
            raise BadAnswer(f"{address}: peer {part[:80]!r} is not ID:HOST:PORT")
        peers[ident] = peer
    leader = _text(ext.get("controllerLeaderAddress"), "controllerLeaderAddress")
    if leader:
        try:
            host_port(leader)
        except ValueError:
            raise BadAnswer(f"{address}: controllerLeaderAddress {leader[:80]!r} is not HOST:PORT") from None
    return ControllerMetadata(address, _text(ext.get("group"), "group"),
                              _text(ext.get("controllerLeaderId"), "controllerLeaderId") or None, leader or None,
                              _bool(ext.get("isLeader", "false"), "isLeader"), peers)


def _replicas(items, name: str) -> tuple[Replica, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise BadAnswer(f"{name} is not a list")
    out = []
    for k, r in enumerate(items):
        if not isinstance(r, dict):
            raise BadAnswer(f"{name}[{k}] is not an object")
        out.append(Replica(_int(r.get("brokerId"), f"{name}[{k}].brokerId"),
                           _text(r.get("brokerAddress"), f"{name}[{k}].brokerAddress"),
                           _bool(r.get("alive", False), f"{name}[{k}].alive")))
    return tuple(out)


def decode_sync_state_data(address: str, f: Frame) -> dict[str, ReplicasInfo]:
    """``BrokerReplicasInfo`` (an empty body: no broker set the controller knows)."""
    if not f.body:
        return {}
    body = bytes(f.body)
    try:
        check_depth(body, "sync-state body")
        doc = msgspec.json.decode(body)
    except (msgspec.DecodeError, UnicodeDecodeError, ProtocolError) as exc:
        raise BadAnswer(f"{address}: the sync-state answer is not JSON: {exc}") from None
    table = doc.get("replicasInfoTable") if isinstance(doc, dict) else None
    if table is None:
        return {}
    if not isinstance(table, dict) or len(table) > MAX_BROKER_SETS:
        raise BadAnswer(f"{address}: replicasInfoTable is not a table of at most {MAX_BROKER_SETS} broker sets")
    out = {}
    for name, info in table.items():
        _text(name, "broker name", null=False)
        if not isinstance(info, dict):
            raise BadAnswer(f"{address}: broker set {name[:80]!r} is not an object")
        try:
            out[name] = ReplicasInfo(
                name, _int(info.get("masterBrokerId"), "masterBrokerId", null=True),
                _text(info.get("masterAddress"), "masterAddress"),
                _int(info.get("masterEpoch", 0), "masterEpoch", JAVA_INT),
                _int(info.get("syncStateSetEpoch", 0), "syncStateSetEpoch", JAVA_INT),
                _replicas(info.get("inSyncReplicas"), "inSyncReplicas"),
                _replicas(info.get("notInSyncReplicas"), "notInSyncReplicas"))
        except BadAnswer as exc:
            raise BadAnswer(f"{address}: broker set {name[:80]!r}: {exc}") from None
    return out


def decode_master(address: str, f: Frame) -> MasterAnswer:
    ext = f.ext or {}
    try:
        return MasterAnswer(_int(ext.get("masterBrokerId"), "masterBrokerId", null=True),
                            _text(ext.get("masterAddress"), "masterAddress"),
                            _int(ext.get("masterEpoch"), "masterEpoch", JAVA_INT, null=True),
                            _int(ext.get("syncStateSetEpoch"), "syncStateSetEpoch", JAVA_INT, null=True))
    except BadAnswer as exc:
        raise BadAnswer(f"{address}: {exc}") from None


def _ext(**fields) -> dict[str, str]:
    """A custom header's extFields: Java field names, values as text (None left out)."""
    return {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in fields.items() if v is not None}


def _ignore(_frame, _exc) -> None:
    pass


# -- the client ------------------------------------------------------------------------------

class ControllerClient:
    """Requests to one controller member (``HOST:PORT``, its remoting port), each awaited at
    most ``timeout`` seconds; frames above ``max_frame`` bytes are refused unread."""

    def __init__(self, address: str, *, timeout: float = 3.0, max_frame: int = MAX_FRAME) -> None:
        self.address = address
        host, port = host_port(address)
        self.timeout = timeout
        self.channel = Channel(host, port, connect_timeout=min(timeout, 3.0), max_frame=max_frame)

    async def __aenter__(self) -> ControllerClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self.channel.close()

    async def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", *,
                   oneway: bool = False) -> Frame | None:
        """Send request ``code`` and return its successful answer (None for ``oneway``)."""
        frame = Frame(code, 0, FLAG_ONEWAY if oneway else 0, "", dict(ext or {}), body)
        try:
            if oneway:  # (no answer comes: the pending entry just expires)
                if self.channel.send(frame, self.timeout, _ignore) is None:
                    await self.call(CONTROLLER_GET_METADATA_INFO)  # (connects; any request does)
                    self.channel.send(frame, self.timeout, _ignore)
                return None
            answer = await self.channel.request(frame, self.timeout)
        except TransportError as exc:
            raise Unreachable(f"{self.address}: {why(exc)}") from exc
        except ProtocolError as exc:
            raise BadAnswer(f"{self.address}: {exc}") from exc
        return check_response(self.address, answer, code)

    # admin requests (mqadmin getControllerMetaData / getSyncStateSet)

    async def metadata(self) -> ControllerMetadata:
        return decode_metadata(self.address, await self.call(CONTROLLER_GET_METADATA_INFO))

    async def sync_state_data(self, broker_names: list[str]) -> dict[str, ReplicasInfo]:
        """Per broker set asked that the controller knows: master, epochs, replicas in and out
        of the SyncStateSet with their liveness (an empty list asks nothing: RocketMQ answers
        an empty body)."""
        body = msgspec.json.encode(list(broker_names))
        return decode_sync_state_data(self.address, await self.call(CONTROLLER_GET_SYNC_STATE_DATA, body=body))

    # what a controller-mode broker sends (broker/.../controller/ReplicasManager, BrokerOuterAPI)

    async def heartbeat(self, cluster: str, broker: str, address: str, broker_id: int, *, epoch: int = 0,
                        max_offset: int = 0, confirm_offset: int = 0, timeout_millis: int = 10_000,
                        election_priority: int | None = None, oneway: bool = False) -> None:
        """BROKER_HEARTBEAT (``BrokerHeartbeatRequestHeader``). A broker sends it one-way; the
        controller handles both kinds alike, and a two-way one says it was taken."""
        await self.call(BROKER_HEARTBEAT, _ext(clusterName=cluster, brokerAddr=address, brokerName=broker,
                                               brokerId=broker_id, epoch=epoch, maxOffset=max_offset,
                                               confirmOffset=confirm_offset, heartbeatTimeoutMills=timeout_millis,
                                               electionPriority=election_priority), oneway=oneway)

    async def next_broker_id(self, cluster: str, broker: str) -> int:
        f = await self.call(CONTROLLER_GET_NEXT_BROKER_ID, _ext(clusterName=cluster, brokerName=broker))
        try:
            return _int((f.ext or {}).get("nextBrokerId"), "nextBrokerId")
        except BadAnswer as exc:
            raise BadAnswer(f"{self.address}: {exc}") from None

    async def apply_broker_id(self, cluster: str, broker: str, broker_id: int, check_code: str) -> None:
        await self.call(CONTROLLER_APPLY_BROKER_ID, _ext(clusterName=cluster, brokerName=broker,
                                                         appliedBrokerId=broker_id, registerCheckCode=check_code))

    async def register_broker(self, cluster: str, broker: str, broker_id: int, address: str,
                              invoke_time: int = 0) -> MasterAnswer:
        return decode_master(self.address, await self.call(
            CONTROLLER_REGISTER_BROKER, _ext(clusterName=cluster, brokerName=broker, brokerId=broker_id,
                                             brokerAddress=address, invokeTime=invoke_time)))

    async def elect_master(self, cluster: str, broker: str, broker_id: int, *, designate: bool = False,
                           invoke_time: int = 0) -> MasterAnswer:
        """CONTROLLER_ELECT_MASTER as a broker (``ofBrokerTrigger``) or, with ``designate``, as
        ``mqadmin electMaster -b`` (``ofAdminTrigger``) sends it."""
        return decode_master(self.address, await self.call(
            CONTROLLER_ELECT_MASTER, _ext(clusterName=cluster, brokerName=broker, brokerId=broker_id,
                                          designateElect=designate, invokeTime=invoke_time)))

    async def alter_sync_state_set(self, broker: str, master_id: int, master_epoch: int, ids,
                                   sync_state_set_epoch: int, invoke_time: int = 0) -> int:
        """CONTROLLER_ALTER_SYNC_STATE_SET as a master sends it; the new SyncStateSet epoch."""
        body = msgspec.json.encode({"syncStateSet": sorted(ids), "syncStateSetEpoch": sync_state_set_epoch})
        f = await self.call(CONTROLLER_ALTER_SYNC_STATE_SET, _ext(brokerName=broker, masterBrokerId=master_id,
                                                                  masterEpoch=master_epoch, invokeTime=invoke_time),
                            body)
        try:
            return _int((f.ext or {}).get("newSyncStateSetEpoch"), "newSyncStateSetEpoch", JAVA_INT)
        except BadAnswer as exc:
            raise BadAnswer(f"{self.address}: {exc}") from None
