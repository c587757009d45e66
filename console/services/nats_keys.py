"""NATS signing keys, held once in the database (table ``nats_account``) for every replica.

Each key is created on first use. Two replicas creating the same one at once race on the row's
primary key: the loser's insert fails and it reads the winner's row, so every replica signs with
the same operator, system account and environment accounts. An install older than migration
0010 kept its seeds in ``<data_dir>/nats-keys``: the first start imports them (operator, system
account, and the old single account as ``fleet``), so the JWTs agents hold stay valid while they
renew into their environment's account (see ``docs/nats.md``).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nkeys
from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from console.models import Agent, Environment, NatsAccount, NatsRevocation
from console.nats.jwt import NatsAuthority

log = logging.getLogger(__name__)

OPERATOR = "operator"
SYSTEM = "system"
LEGACY = "fleet"  # the one account of installs before 0010
LEGACY_FILES = {OPERATOR: "operator.nk", SYSTEM: "system.nk", LEGACY: "fleet.nk"}


def environment_account(environment_id: str) -> str:
    return f"env:{environment_id}"


@functools.lru_cache(maxsize=65536)
def keypair(seed: str) -> Any:
    return nkeys.from_seed(bytearray(seed.encode()))


def _new_seed(prefix: int) -> str:
    return str(nkeys.encode_seed(os.urandom(32), prefix).decode())


def _insert(engine: Engine, row: NatsAccount) -> NatsAccount:
    """Insert ``row`` unless one of that name exists; either way, the row every replica uses."""
    with Session(engine, expire_on_commit=False) as session:
        existing = session.get(NatsAccount, row.name)
        if existing is not None:
            return existing
        session.add(row)
        try:
            session.commit()
            log.info("nats key %s created (%s)", row.name, row.public_key)
            return row
        except IntegrityError:
            session.rollback()
    with Session(engine, expire_on_commit=False) as session:
        winner = session.get(NatsAccount, row.name)
        if winner is None:  # the conflict was on the public key: cannot happen with fresh seeds
            raise RuntimeError(f"nats key {row.name} could not be stored")
        return winner


def fetch_or_create(
    engine: Engine, name: str, prefix: int, *, environment_id: str | None = None
) -> Any:
    """The key pair named ``name``, created (race-safe) when missing."""
    with Session(engine, expire_on_commit=False) as session:
        row = session.get(NatsAccount, name)
    if row is None:
        seed = _new_seed(prefix)
        row = _insert(
            engine,
            NatsAccount(
                name=name,
                environment_id=environment_id,
                public_key=keypair(seed).public_key.decode(),
                seed=seed,
            ),
        )
    return keypair(row.seed)


def import_legacy(engine: Engine, directory: Path) -> None:
    """Adopt the seeds of ``<data_dir>/nats-keys`` (installs before 0010) when the database holds
    none yet; a database that already holds keys wins, and a different local seed is logged."""
    for name, filename in LEGACY_FILES.items():
        path = directory / filename
        if not path.exists():
            continue
        seed = path.read_bytes().strip().decode()
        public = keypair(seed).public_key.decode()
        held = _insert(engine, NatsAccount(name=name, public_key=public, seed=seed))
        if held.public_key != public:
            log.warning(
                "nats key %s in %s differs from the one the database holds; the database's is "
                "used (every replica signs with it)",
                name,
                path,
            )


def load_authority(engine: Engine, legacy_dir: Path | None = None) -> NatsAuthority:
    if legacy_dir is not None:
        import_legacy(engine, legacy_dir)
    return NatsAuthority(
        operator=fetch_or_create(engine, OPERATOR, nkeys.PREFIX_BYTE_OPERATOR),
        system_account=fetch_or_create(engine, SYSTEM, nkeys.PREFIX_BYTE_ACCOUNT),
    )


def environment_key(engine: Engine, environment_id: str) -> Any:
    return fetch_or_create(
        engine,
        environment_account(environment_id),
        nkeys.PREFIX_BYTE_ACCOUNT,
        environment_id=environment_id,
    )


def environment_keys(engine: Engine, environment_ids: list[str]) -> dict[str, Any]:
    """The accounts of many environments at once: the missing ones created in one transaction
    (when another replica creates one meanwhile, each is then settled on its own)."""
    names = {environment_account(e): e for e in environment_ids}
    with Session(engine, expire_on_commit=False) as session:
        rows = session.exec(select(NatsAccount).where(col(NatsAccount.name).in_(list(names))))
        held = {names[row.name]: keypair(row.seed) for row in rows}
        missing = [e for e in environment_ids if e not in held]
        seeds = {e: _new_seed(nkeys.PREFIX_BYTE_ACCOUNT) for e in missing}
        for env_id, seed in seeds.items():
            session.add(
                NatsAccount(
                    name=environment_account(env_id),
                    environment_id=env_id,
                    public_key=keypair(seed).public_key.decode(),
                    seed=seed,
                )
            )
        try:
            session.commit()
            held.update({e: keypair(seed) for e, seed in seeds.items()})
        except IntegrityError:
            session.rollback()
            held.update({e: environment_key(engine, e) for e in missing})
    return held


@dataclass(frozen=True)
class AccountState:
    """One account as the servers must know it: its key, and the keys it refuses."""

    name: str
    environment_id: str | None
    key: Any
    revocations: dict[str, int]

    @property
    def public_key(self) -> str:
        return str(self.key.public_key.decode())


def account_states(session: Session) -> list[AccountState]:
    """Every account to push: one per environment that has a key, with the revocations of its
    agents' keys, and the legacy ``fleet`` account (if imported) with every revocation, since
    any agent may still hold a JWT it signed."""
    rows = session.exec(
        select(NatsRevocation.public_key, NatsRevocation.revoked_at, Agent.environment_id).join(
            Agent, col(Agent.id) == col(NatsRevocation.agent_id)
        )
    ).all()
    by_env: dict[str, dict[str, int]] = {}
    every: dict[str, int] = {}
    for public_key, revoked_at, environment_id in rows:
        by_env.setdefault(environment_id, {})[public_key] = revoked_at
        every[public_key] = revoked_at
    states = []
    accounts = session.exec(
        select(NatsAccount).where(col(NatsAccount.name).not_in([OPERATOR, SYSTEM]))
    ).all()
    for row in accounts:
        if row.environment_id is not None:
            revocations = by_env.get(row.environment_id, {})
        elif row.name == LEGACY:
            revocations = every
        else:
            continue
        states.append(AccountState(row.name, row.environment_id, keypair(row.seed), revocations))
    return states


def claims_version(session: Session) -> int:
    """The version of the accounts' claims in the database: the newest revocation's stamp.
    Stamps are strictly increasing and committed in order (``agent_records.revocation_stamp``),
    so a larger version holds every revocation of a smaller one."""
    newest = session.exec(select(func.max(col(NatsRevocation.revoked_at)))).one()
    return int(newest or 0)


def environment_ids(session: Session) -> list[str]:
    return list(session.exec(select(Environment.id)).all())


def environment_of_agents(session: Session, agent_ids: list[str] | None = None) -> dict[str, str]:
    query = select(Agent.id, Agent.environment_id)
    if agent_ids is not None:
        query = query.where(col(Agent.id).in_(agent_ids))
    return dict(session.exec(query).all())
