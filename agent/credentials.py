"""NKey key pairs: generate, sign, and the proofs the Console asks for.

Seeds are plain ``str`` only inside this module's callers' locals and the state file; they are
never logged.
"""

from __future__ import annotations

import base64
import os

import nkeys

from contracts.enrollment import IdentitySignals, RotationProof, rotation_message

__all__ = ["new_seed", "public_key", "rotation_proof", "sign"]


def new_seed() -> str:
    """A fresh user nkey seed (``SU…``)."""
    return str(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode())


def public_key(seed: str) -> str:
    return str(nkeys.from_seed(seed.encode()).public_key.decode())


def sign(seed: str, message: bytes) -> str:
    """URL-safe base64 (padded) of the ed25519 signature of ``message``."""
    signature = nkeys.from_seed(seed.encode()).sign(message)
    return base64.urlsafe_b64encode(signature).decode()


def rotation_proof(
    *, agent_id: str, nonce: str, old_seed: str, new_seed: str, signals: IdentitySignals
) -> RotationProof:
    """The old key vouches for the new one, and the new key proves it is held."""
    new_public = public_key(new_seed)
    message = rotation_message(agent_id=agent_id, nonce=nonce, new_public_key=new_public)
    return RotationProof(
        nonce=nonce,
        new_public_key=new_public,
        old_signature=sign(old_seed, message),
        new_signature=sign(new_seed, message),
        signals=signals,
    )
