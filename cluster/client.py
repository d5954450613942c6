"""Client side of APPEND, GET and METADATA: finds the leader, follows NOT_LEADER, keeps deadlines."""

from __future__ import annotations

import asyncio
import base64

from .config import Peer
from .rpc import Code
from .transport import Channel, TransportError
from .wire import APPEND, GET, METADATA, Frame, ProtocolError, decode_response, json_body, pack_bodies


class ClientError(Exception):
    """The request could not be served: one line says why."""


class Client:
    def __init__(self, peers: dict[str, Peer], group: str, *, timeout: float = 3.0) -> None:
        self.peers, self.group, self.timeout = peers, group, timeout
        self.channels = {p: Channel(peer.host, peer.port, connect_timeout=min(1.0, timeout)) for p, peer in peers.items()}
        self.leader: str | None = None

    async def close(self) -> None:
        for ch in self.channels.values():
            await ch.close()

    async def _call(self, peer: str, frame: Frame, code: int, timeout: float) -> dict:
        resp = await self.channels[peer].request(frame, timeout)
        return decode_response(resp, code)

    async def metadata(self, peer: str, timeout: float | None = None) -> dict:
        return await self._call(peer, Frame(METADATA, body=json_body({"group": self.group})), METADATA,
                                timeout or self.timeout)

    async def status(self) -> dict[str, dict | str]:
        """METADATA of every peer at once; an unreachable peer maps to the error text."""
        async def one(p):
            try:
                return p, await self.metadata(p)
            except (TransportError, ProtocolError) as exc:
                return p, str(exc)
        return dict(await asyncio.gather(*(one(p) for p in self.peers)))

    async def find_leader(self, deadline: float) -> str:
        loop = asyncio.get_running_loop()
        while True:
            if self.leader is not None:
                return self.leader
            for _p, md in (await self.status()).items():
                if isinstance(md, dict) and md.get("role") == "leader":
                    self.leader = md["id"]
                    return self.leader
            if loop.time() >= deadline:
                raise ClientError(f"no leader among {', '.join(self.peers)} within {self.timeout:g} s")
            await asyncio.sleep(0.05)

    async def append(self, bodies: list[bytes]) -> dict:
        """Append on the leader; returns its answer (entries: [index, term, pos, size])."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        frame_body = pack_bodies(bodies)
        last_error = "no answer"
        while loop.time() < deadline:
            leader = await self.find_leader(deadline)
            f = Frame(APPEND, ext={"group": self.group, "count": str(len(bodies))}, body=frame_body)
            try:
                resp = await self._call(leader, f, APPEND, max(0.05, deadline - loop.time()))
            except (TransportError, ProtocolError) as exc:
                last_error = f"{leader}: {exc}"
                self.leader = None
                await asyncio.sleep(0.05)
                continue
            code = Code(resp.get("code", -1)) if resp.get("code", -1) in Code._value2member_map_ else Code.UNKNOWN
            if code == Code.SUCCESS:
                return resp
            last_error = f"{leader}: {code.name} {resp.get('remark') or ''}".strip()
            if code in (Code.NOT_LEADER, Code.TERM_CHANGED, Code.LEADER_TRANSFERRING, Code.LEADER_NOT_READY):
                hint = resp.get("leaderId")
                self.leader = hint if hint in self.peers and hint != leader else None
                await asyncio.sleep(0.02)
                continue
            raise ClientError(last_error)
        raise ClientError(f"append not committed within {self.timeout:g} s ({last_error})")

    async def get(self, index: int, count: int = 1, peer: str | None = None) -> list[dict]:
        """Committed entries from ``index``; bodies decoded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        target = peer or await self.find_leader(deadline)
        try:
            resp = await self._call(target, Frame(GET, body=json_body({"group": self.group, "index": index, "count": count})),
                                    GET, self.timeout)
        except (TransportError, ProtocolError) as exc:
            raise ClientError(f"{target}: {exc}") from None
        if resp.get("code") != Code.SUCCESS:
            code = resp.get("code")
            name = Code(code).name if code in Code._value2member_map_ else str(code)
            raise ClientError(f"{target}: {name} {resp.get('remark') or ''}".strip())
        for e in resp["entries"]:
            e["body"] = base64.b64decode(e["body"])
        return resp["entries"]
