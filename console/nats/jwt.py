"""NATS decentralised auth: an operator, a system account, one account per environment, and a
signed user JWT per agent identity that carries its permissions.

The server verifies a user's JWT by its signature chain (user ← account ← operator), so a new
agent needs **no server change at all**: enrollment signs a JWT and returns it. Only taking a
key away (release, rotation, revocation) changes the server: the key goes into the account's
``revocations`` and the account JWT is pushed through the system account, which disconnects
that key at once (``console.nats.claims``).

JWT format (nats-io/jwt v2): ``base64url(header).base64url(claims).base64url(ed25519 sig)`` with
header ``{"typ":"JWT","alg":"ed25519-nkey"}``, unpadded URL-safe base64, ``jti`` the base32 of the
SHA-256 of the claims, signed by the issuer's nkey.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from contracts import subjects

_HEADER = {"typ": "JWT", "alg": "ed25519-nkey"}
_UNLIMITED = {
    "subs": -1,
    "data": -1,
    "payload": -1,
    "imports": -1,
    "exports": -1,
    "wildcards": True,
    "conn": -1,
    "leaf": -1,
}


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


_HEADER_B64 = _b64(json.dumps(_HEADER, separators=(",", ":")).encode())


def encode_jwt(claims: dict[str, Any], issuer: Any, *, issued_at: int | None = None) -> str:
    """NATS' JWT: ``jti`` is the SHA-256 (base32) of the claims serialised with ``jti`` empty,
    as the NATS ``jwt`` library computes it."""
    body = dict(claims)
    body["iat"] = int(issued_at if issued_at is not None else time.time())
    body["iss"] = issuer.public_key.decode()
    body["jti"] = ""
    unnamed = json.dumps(body, separators=(",", ":"), sort_keys=True)
    jti = base64.b32encode(hashlib.sha256(unnamed.encode()).digest()).decode().rstrip("=")
    # The same text with the ``jti`` filled in, without serialising it all again (a JWT is
    # signed on every enrollment): the keys are sorted and ``jti`` sorts before the only
    # nested object (``nats``), so its first occurrence is the top-level key.
    payload = _b64(unnamed.replace('"jti":""', f'"jti":"{jti}"', 1).encode())
    signature = issuer.sign(f"{_HEADER_B64}.{payload}".encode())
    return f"{_HEADER_B64}.{payload}.{_b64(signature)}"


def decode_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, unverified (for tests and diagnostics)."""
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@dataclass(frozen=True)
class UserLimits:
    """What nats-server enforces from a user JWT: ``subs`` (subscriptions held at once: more is
    refused with "maximum subscriptions exceeded"), ``payload`` (bytes in one message: the
    connection is closed past it), ``data`` (-1: the server applies no per-user byte budget to
    core NATS), and ``exp`` (the server refuses an expired JWT and closes a connection when its
    JWT expires). A JWT has no per-user connection count: see docs/security.md. -1: no limit."""

    subs: int = -1
    data: int = -1
    payload: int = -1
    ttl_seconds: float | None = None


RESOLVER_DIR = "jwt"


@dataclass
class NatsAuthority:
    """The operator and the system account: what every server trusts. Account keys (one per
    environment) sign the user JWTs; every seed is held once, in the database
    (``console.nats.keys``), so all Console replicas sign alike."""

    operator: Any
    system_account: Any

    @property
    def system_public_key(self) -> str:
        return str(self.system_account.public_key.decode())

    def operator_jwt(self) -> str:
        return encode_jwt(
            {
                "sub": self.operator.public_key.decode(),
                "name": "proxima",
                "nats": {
                    "system_account": self.system_public_key,
                    "type": "operator",
                    "version": 2,
                },
            },
            self.operator,
            issued_at=0,
        )

    def account_jwt(self, key: Any, name: str, revocations: dict[str, int]) -> str:
        """An account's claims, deterministic from its content: every replica renders the same
        JWT for the same revocations. ``iat`` is the newest revocation's stamp, which is strictly
        above every earlier one (``agent_records.revocation_stamp``), so a server that holds a
        newer JWT ignores a stale push (its resolver keeps the larger ``iat``), even one rendered
        in the same second by another replica."""
        return encode_jwt(
            {
                "sub": key.public_key.decode(),
                "name": name,
                "nats": {
                    "limits": _UNLIMITED,
                    "default_permissions": {"pub": {}, "sub": {}},
                    "revocations": dict(sorted(revocations.items())),
                    "type": "account",
                    "version": 2,
                },
            },
            self.operator,
            issued_at=max(revocations.values(), default=0),
        )

    def system_account_jwt(self) -> str:
        return self.account_jwt(self.system_account, "SYS", {})

    def system_user_jwt(self, public_key: str) -> str:
        """A user of the system account: pushes account claims, reads the server's advisories
        (refused connections, connects and disconnects)."""
        return encode_jwt(
            {
                "sub": public_key,
                "name": "proxima-console-system",
                "nats": {
                    "pub": {"allow": ["$SYS.REQ.>", "_INBOX.>"]},
                    "sub": {
                        "allow": [
                            "$SYS.SERVER.*.CLIENT.AUTH.ERR",
                            "$SYS.ACCOUNT.*.*",  # connect/disconnect: ConnectionGuard
                            "_INBOX.>",
                        ]
                    },
                    "subs": -1,
                    "data": -1,
                    "payload": -1,
                    "type": "user",
                    "version": 2,
                },
            },
            self.system_account,
        )

    def render_config(self, resolver_dir: str = RESOLVER_DIR) -> str:
        """The servers' trust block, the same on every node and for every replica: the operator,
        the system account preloaded, and a ``full`` resolver that stores the account JWTs the
        Console pushes (``$SYS.REQ.CLAIMS.UPDATE``). Nothing in it changes when an agent
        enrolls or a key is revoked."""
        return "\n".join(
            [
                "# Proxima fleet: NATS trust (proxima-console nats-config). Identical for every",
                "# server; account JWTs are pushed by the Console through the system account.",
                f"operator: {json.dumps(self.operator_jwt())}",
                f"system_account: {json.dumps(self.system_public_key)}",
                "resolver: {",
                "  type: full",
                f"  dir: {json.dumps(resolver_dir)}",
                "  allow_delete: false",
                '  interval: "2m"',
                "}",
                "resolver_preload: {",
                f"  {self.system_public_key}: {json.dumps(self.system_account_jwt())}",
                "}",
                "",
            ]
        )


def user_jwt(
    account: Any,
    *,
    public_key: str,
    name: str,
    pub: list[str],
    sub: list[str],
    limits: UserLimits | None = None,
) -> str:
    """A user of ``account`` (signed by its key): the subjects it may use and its limits."""
    limits = limits or UserLimits()
    claims: dict[str, Any] = {
        "sub": public_key,
        "name": name,
        "nats": {
            "pub": {"allow": pub},
            "sub": {"allow": sub},
            "subs": limits.subs,
            "data": limits.data,
            "payload": limits.payload,
            "type": "user",
            "version": 2,
        },
    }
    issued_at = int(time.time())
    if limits.ttl_seconds is not None:
        claims["exp"] = issued_at + int(limits.ttl_seconds)
    return encode_jwt(claims, account, issued_at=issued_at)


def agent_jwt(
    account: Any, *, agent_id: str, public_key: str, limits: UserLimits | None = None
) -> str:
    """The only subjects this identity may use, signed into its credential by its
    environment's account, with the per-agent limits the server enforces and an expiry the
    agent renews before."""
    return user_jwt(
        account,
        public_key=public_key,
        name=f"agent-{agent_id}",
        pub=subjects.agent_publish_allow(agent_id),
        sub=subjects.agent_subscribe_allow(agent_id),
        limits=limits,
    )


def console_jwt(account: Any, public_key: str) -> str:
    """The Console's user in one account: every subject of that account, nothing outside it."""
    return user_jwt(account, public_key=public_key, name="proxima-console", pub=[">"], sub=[">"])
