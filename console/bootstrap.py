"""First-run setup: a client, an environment and an admin API token."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session, select

from console.core.secrets import API_TOKEN_PREFIX, display_prefix, new_token, token_hash
from console.models import ApiToken, Client, Environment
from contracts.vocabulary import Scope


@dataclass(frozen=True, slots=True)
class Bootstrapped:
    client_id: str
    client_name: str
    environment_id: str
    environment_name: str
    token_id: str
    token: str
    scopes: list[str]
    existed: bool = False
    """The client and environment were there already: this minted one more admin token."""


def bootstrap(
    session: Session, *, client_name: str, environment_name: str, token_name: str = "admin"
) -> Bootstrapped:
    """Create (or reuse) the client and environment; always mint a new admin token."""
    client = session.exec(select(Client).where(Client.name == client_name)).first()
    if client is None:
        client = Client(name=client_name)
        session.add(client)
        session.flush()
    env = session.exec(
        select(Environment).where(
            Environment.client_id == client.id, Environment.name == environment_name
        )
    ).first()
    existed = env is not None
    if env is None:
        env = Environment(client_id=client.id, name=environment_name)
        session.add(env)
        session.flush()
    raw = new_token(API_TOKEN_PREFIX)
    token = ApiToken(
        client_id=client.id,
        environment_id=env.id,
        name=token_name,
        token_hash=token_hash(raw),
        prefix=display_prefix(raw),
        scopes=[str(s) for s in Scope],
    )
    session.add(token)
    session.commit()
    return Bootstrapped(
        client_id=client.id,
        client_name=client.name,
        environment_id=env.id,
        environment_name=env.name,
        token_id=token.id,
        token=raw,
        scopes=[str(s) for s in Scope],
        existed=existed,
    )
