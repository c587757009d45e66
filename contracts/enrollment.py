"""Enrollment, release and credential rotation: requests, answers and the signed messages.

An agent proves it holds the private half of the nkey it enrolls with by signing
:func:`enrollment_message`. Signatures travel as URL-safe base64 of the 64 raw ed25519 bytes;
padding (``=``) is optional and the Console accepts both. The Console verifies the signature and
a timestamp window, so a captured request cannot be replayed later; the message covers the
install token (its SHA-256) and every identity field, so a captured body cannot be re-sent with
another tenant's token, nor with another name, version or signal.
"""

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StringConstraints

from contracts.bounds import MAX_NAME, Identifier, Labels, VersionText, text
from contracts.vocabulary import AgentType
from contracts.vocabulary.identities import EnrollmentAction, RebindHow

Name = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"),
]
PUBLIC_KEY_LENGTH = 56
"""An nkey user public key: ``U`` and 55 base32 characters."""
PublicKey = Annotated[
    str,
    StringConstraints(
        max_length=PUBLIC_KEY_LENGTH, pattern=rf"^U[A-Z2-7]{{{PUBLIC_KEY_LENGTH - 1}}}$"
    ),
]
Signal = Annotated[str, text(128, min_length=1)]
Version = VersionText


class IdentitySignals(BaseModel):
    """What identifies the machine beneath an agent: read from the host root when mounted."""

    model_config = ConfigDict(extra="forbid")

    machine_id: Signal | None = None
    product_uuid: Signal | None = None

    def present(self) -> dict[str, str]:
        return {k: v for k, v in self.model_dump().items() if v}


class EnrollRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    install_token: Annotated[str, StringConstraints(min_length=8, max_length=256)]
    agent_type: AgentType
    name: Name
    public_key: PublicKey
    signature: Annotated[str, StringConstraints(min_length=16, max_length=256)]
    signed_at: datetime
    signals: IdentitySignals = Field(default_factory=IdentitySignals)
    version: Version
    instance_id: Identifier
    can_self_update: StrictBool = True
    labels: Labels = Field(default_factory=dict)


def install_token_digest(install_token: str) -> str:
    """What the enrollment proof carries of the install token: its SHA-256 (hex), the same the
    Console stores. Binding the proof to it ties the request to one tenant and environment."""
    return hashlib.sha256(install_token.encode()).hexdigest()


def enrollment_message(
    *,
    install_token: str,
    agent_type: str,
    name: str,
    public_key: str,
    signed_at: datetime,
    version: str,
    instance_id: str,
    signals: Mapping[str, str] | None = None,
    can_self_update: bool = True,
    labels: Mapping[str, str] | None = None,
) -> bytes:
    """The bytes an agent signs with its new nkey when it enrolls: every field of the request
    but the signature, the install token as :func:`install_token_digest` (``signals`` as
    :meth:`IdentitySignals.present` gives them)."""
    fields = {
        "install_token_sha256": install_token_digest(install_token),
        "agent_type": str(agent_type),
        "name": name,
        "public_key": public_key,
        "signed_at": signed_at.isoformat(),
        "version": version,
        "instance_id": instance_id,
        "signals": dict(sorted((signals or {}).items())),
        "can_self_update": can_self_update,
        "labels": dict(sorted((labels or {}).items())),
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return f"proxima-enroll-v2\n{canonical}".encode()


def enrollment_message_of(request: EnrollRequest) -> bytes:
    """:func:`enrollment_message` for a request as received (what the Console verifies)."""
    return enrollment_message(
        install_token=request.install_token,
        agent_type=request.agent_type.value,
        name=request.name,
        public_key=request.public_key,
        signed_at=request.signed_at,
        version=request.version,
        instance_id=request.instance_id,
        signals=request.signals.present(),
        can_self_update=request.can_self_update,
        labels=request.labels,
    )


class EnrollResponse(BaseModel):
    agent_id: str
    agent_type: AgentType
    name: str
    client_id: str
    environment_id: str
    nats_url: str
    nats_jwt: str | None = Field(
        default=None,
        description="The identity's NATS user JWT: its permissions, signed by the fleet account. "
        "Connect with it and the nkey seed (it is not a secret without the seed). The Console "
        "always sends one; None only for servers that know agents as bare nkey users.",
    )
    rebound: bool = Field(description="True when this enrollment re-bound an existing record")


EvidenceKind = Annotated[str, StringConstraints(max_length=32)]
"""A kind of identity evidence (``machine_id``, ``product_uuid``): never its value."""


class EnrollmentPreview(BaseModel):
    """``POST /api/v1/agents/enroll?dry_run=true``: what the same request would do, decided
    exactly as the real call and changing nothing (no record, no token use, no key). A refusal is
    the same 4xx error body as the real call's."""

    dry_run: bool = True
    action: EnrollmentAction = Field(description="create, same_identity or rebind")
    agent_id: Identifier | None = Field(
        default=None, description="The record it would bind, if any"
    )
    agent_type: AgentType
    name: Name
    environment_id: Identifier
    how: RebindHow | None = Field(
        default=None, description="For a re-bind: released (after release-identity) or quiet"
    )
    replaces_evidence: bool = Field(
        default=False,
        description="True when the re-bind would replace the record's identity evidence with "
        "this machine's (a re-bind after release-identity)",
    )
    held_evidence: list[EvidenceKind] = Field(
        default_factory=list, max_length=8, description="The kinds of evidence the record holds"
    )
    presented_evidence: list[EvidenceKind] = Field(
        default_factory=list, max_length=8, description="The kinds this request presents"
    )
    message: str = Field(default="", max_length=1024)


class ErrorBody(BaseModel):
    """Every 4xx the Console answers: a stable ``reason`` for machines, ``message`` for people.

    ``reason`` is one of :class:`contracts.vocabulary.ErrorReason`; it stays a string so that a
    reason added by a newer Console still parses."""

    reason: str
    message: str
    agent_id: str | None = None


def rotation_message(*, agent_id: str, nonce: str, new_public_key: str) -> bytes:
    """Signed by the *old* key (possession of the identity) and the *new* key (possession of it)."""
    return f"proxima-rotate\n{agent_id}\n{nonce}\n{new_public_key}".encode()


def nats_credentials_message(*, agent_id: str, public_key: str, signed_at: datetime) -> bytes:
    """Signed by the agent's key to fetch a fresh NATS user JWT for it."""
    return f"proxima-nats-credentials\n{agent_id}\n{public_key}\n{signed_at.isoformat()}".encode()


class NatsCredentialsRequest(BaseModel):
    """An agent asking for a fresh JWT for its key (after an interrupted rotation, say)."""

    model_config = ConfigDict(extra="forbid")

    public_key: PublicKey
    signed_at: datetime
    signature: Annotated[str, StringConstraints(min_length=16, max_length=256)]


class NatsCredentials(BaseModel):
    agent_id: str
    public_key: str
    nats_url: str
    nats_jwt: str


class RotationAccepted(BaseModel):
    agent_id: str
    public_key: str
    nats_jwt: str | None = None


class RotationProof(BaseModel):
    """What an agent posts back when told to rotate its credentials."""

    model_config = ConfigDict(extra="forbid")

    nonce: Annotated[str, StringConstraints(min_length=16, max_length=128)]
    new_public_key: PublicKey
    old_signature: Annotated[str, StringConstraints(min_length=16, max_length=256)]
    new_signature: Annotated[str, StringConstraints(min_length=16, max_length=256)]
    signals: IdentitySignals = Field(default_factory=IdentitySignals)
