"""Keys and state files of an agent that enrolled already, made without enrolling."""

from __future__ import annotations

import base64
import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

import nkeys

from agent.state import AgentState, StateStore
from contracts.vocabulary import AgentType


def new_seed() -> str:
    return str(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode())


def public_of(seed: str) -> str:
    return str(nkeys.from_seed(seed.encode()).public_key.decode())


def verify(public_key: str, message: bytes, signature: str) -> bool:
    """Check an agent's signature the way the Console must: from the public nkey alone."""
    import nacl.exceptions
    import nacl.signing

    raw = base64.b32decode(public_key)[1:-2]  # prefix byte ... crc16
    try:
        nacl.signing.VerifyKey(raw).verify(message, base64.urlsafe_b64decode(signature))
    except nacl.exceptions.BadSignatureError:
        return False
    return True


def make_state(
    *,
    nats_url: str = "nats://127.0.0.1:4222",
    agent_type: AgentType = AgentType.HOST,
    seed: str | None = None,
    pending_seed: str | None = None,
    backend_url: str = "http://127.0.0.1:9",
    name: str = "node-1",
) -> AgentState:
    return AgentState.model_validate(
        {
            "agent_id": "ag_" + uuid.uuid4().hex[:12],
            "agent_type": agent_type,
            "name": name,
            "seed": seed or new_seed(),
            "pending_seed": pending_seed,
            "nats_url": nats_url,
            "backend_url": backend_url,
            "client_id": "cl_1",
            "environment_id": "env_1",
            "enrolled_at": datetime.now(UTC),
        }
    )


def write_state(data_dir: Path, state: AgentState) -> Path:
    data_dir.mkdir(parents=True, exist_ok=True)
    store = StateStore(data_dir)
    store.create(state)
    return store.path
