"""The per-key connection limit after a server restart: the dead server sends no DISCONNECT for
the connections it held and the new one has a new id, so without a reset each restart left one
stale connection per agent, and after ``limit`` restarts every live agent was kicked."""

from __future__ import annotations

import json
from dataclasses import dataclass

from console.nats.connection_guard import ConnectionGuard


@dataclass
class Msg:
    subject: str
    data: bytes


def _connect(server: str, cid: int, key: str = "UAGENT") -> Msg:
    body = {"client": {"nkey": key, "id": cid}, "server": {"id": server}}
    return Msg("$SYS.ACCOUNT.ACC.CONNECT", json.dumps(body).encode())


async def test_a_reconnect_of_the_system_connection_forgets_the_dead_servers_connections():
    kicked: list[str] = []

    async def request(subject: str, _data: bytes) -> None:
        kicked.append(subject)

    guard = ConnectionGuard(limit=1, request=request, exempt=set())
    await guard.on_event(_connect("S1", 1))
    assert guard.connections("UAGENT") == 1
    guard.reset()  # the server died and came back (as FleetNats does on reconnect)
    await guard.on_event(_connect("S2", 1))
    assert guard.connections("UAGENT") == 1 and kicked == []
    await guard.on_event(_connect("S2", 2))  # a real second connection is still refused
    assert kicked == ["$SYS.REQ.SERVER.S2.KICK"]
