"""What an enrollment reads before it decides, in one round trip, and its token's use.

Every enrollment reads its install token, the record holding the name and the facts about its
key, under the writer lock: as one fixed statement on the driver's connection
(``db.DriverStatement``) — built and run through SQLAlchemy, the three reads cost several times
what the database does (docs/performance.md). The checks on what was read stay in
``identities.enrollment``; here only the token's own (known, not revoked, not expired).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlmodel import Session

from console.core.clock import utcnow
from console.core.db import DriverStatement, bind_value
from console.core.secrets import token_hash
from console.errors import UnauthorizedError
from console.models import Agent, InstallToken, table_of
from contracts.enrollment import EnrollRequest
from contracts.vocabulary import ErrorReason

__all__ = ["Facts", "TokenView", "count_use", "lock_holder", "read_facts", "token_usable"]


@dataclass(frozen=True, slots=True)
class TokenView:
    """What an enrollment reads of its install token."""

    id: str
    client_id: str
    environment_id: str
    prefix: str
    cluster_slug: str | None
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    revoked_at: datetime | None


@dataclass(slots=True)
class Facts:
    """What one enrollment reads before it decides: its token, the record holding the name,
    and whether its key was taken away or is held by some record."""

    token: TokenView
    holder_id: str | None
    key_retired: bool
    key_holder_id: str | None

    def refresh_key(self, retired: bool, holder_id: str | None) -> None:
        self.key_retired, self.key_holder_id = retired, holder_id


# Every enrollment reads all it needs in one round trip and counts its token's use in a second:
# fixed SQL on the driver's connection (through SQLAlchemy, building and running them cost
# several times what the database does; docs/performance.md).
_TOKENS = table_of(InstallToken)
_FACTS = DriverStatement(
    "SELECT t.id, t.client_id, t.environment_id, t.prefix, t.cluster_slug, t.expires_at, "
    "t.max_uses, t.uses, t.revoked_at, "
    "(SELECT a.id FROM agent a WHERE a.environment_id = t.environment_id "
    "AND a.agent_type = ? AND a.name = ?), "
    "(SELECT r.public_key FROM nats_revocation r WHERE r.public_key = ?), "
    "(SELECT k.id FROM agent k WHERE k.nats_public_key = ?) "
    "FROM install_token t WHERE t.token_hash = ?",
    tuple(_TOKENS.c[f] for f in TokenView.__slots__),
)
_KEY_TAKEN = DriverStatement(
    "SELECT (SELECT public_key FROM nats_revocation WHERE public_key = ?), "
    "(SELECT id FROM agent WHERE nats_public_key = ?)"
)
# A use counted in SQL (``uses + 1``) and only while the token has uses left: two enrollments
# with one token never count one use, and never pass its limit together (with concurrent
# writers the second one's UPDATE waits for the first's commit and re-reads the row).
_COUNT_USE = DriverStatement(
    "UPDATE install_token SET uses = uses + 1, last_used_at = ? "
    "WHERE id = ? AND (max_uses IS NULL OR uses < max_uses) RETURNING uses"
)


_USABLE = DriverStatement(
    "SELECT t.revoked_at, t.expires_at FROM install_token t WHERE t.token_hash = ?",
    (_TOKENS.c.revoked_at, _TOKENS.c.expires_at),
)


def token_usable(session: Session, raw: str, now: datetime | None = None) -> bool:
    """Whether ``raw`` is an install token enrollment takes (known, not revoked, not expired:
    ``read_facts``'s checks; its uses are enrollment's). The rate limits ask it before they
    count: a usable token is never refused for what others sent from its address."""
    row = _USABLE.first(session, (token_hash(raw),))
    if row is None:
        return False
    revoked_at, expires_at = row
    return revoked_at is None and _unexpired(expires_at, now or utcnow())


def _unexpired(expires_at: datetime | None, now: datetime) -> bool:
    return expires_at is None or expires_at > now


def read_facts(session: Session, req: EnrollRequest, now: datetime) -> Facts:
    """The facts, once the install token is known, not revoked and not expired (its uses are
    checked once we know whether this is a re-delivery)."""
    key = req.public_key
    row = _FACTS.first(
        session, (req.agent_type.value, req.name, key, key, token_hash(req.install_token))
    )
    if row is None:
        raise UnauthorizedError(ErrorReason.INVALID_INSTALL_TOKEN, "install token is not valid")
    token = TokenView(*row[:9])
    if token.revoked_at is not None:
        raise UnauthorizedError(ErrorReason.INSTALL_TOKEN_REVOKED, "install token has been revoked")
    if token.expires_at is not None and not _unexpired(token.expires_at, now):
        raise UnauthorizedError(
            ErrorReason.INSTALL_TOKEN_EXPIRED,
            f"install token expired at {token.expires_at.isoformat()}",
        )
    holder_id, retired, key_holder_id = row[9:]
    return Facts(token, holder_id, retired is not None, key_holder_id)


def lock_holder(session: Session, facts: Facts, req: EnrollRequest) -> Agent | None:
    """The record holding the name, locked (PostgreSQL) before the rules read it: a
    re-enrollment or a re-bind (a record gone since the first read is no holder). The key's
    facts are read again once it is locked: a re-bind of that record committed meanwhile may
    have retired this very key."""
    existing = session.get(Agent, facts.holder_id, with_for_update=True)
    if existing is not None:
        retired, key_holder_id = _KEY_TAKEN.rows(session, (req.public_key, req.public_key))[0]
        facts.refresh_key(retired is not None, key_holder_id)
    return existing


def count_use(session: Session, token: TokenView, now: datetime) -> bool:
    """Count one use of the token; False when it has none left (used up by an enrollment that
    committed since the facts were read: only with concurrent writers)."""
    return bool(
        _COUNT_USE.rows(session, (bind_value(session, _TOKENS.c.last_used_at, now), token.id))
    )
