"""Token parenthood and web sessions, in-process: ``console.services.tokens`` (a child never
outlives or outranks its parent; revoking a parent revokes its children; a token never revokes
one that outranks it) and ``console.web.sessions`` (bounded per token, expiry, hashed ids)."""

import pytest
from sqlmodel import select

from console.auth import Principal
from console.errors import ForbiddenError, UnauthorizedError
from console.models import ApiToken, InstallToken
from console.models import WebSession as SessionRow
from console.schemas import ApiTokenCreate, InstallTokenCreate
from console.services import access, tokens
from console.services.unit_of_work import UnitOfWork
from console.web.sessions import SessionStore, session_id
from contracts.vocabulary import ErrorReason
from testkit.services import InProcessConsole


async def child(
    services: InProcessConsole, parent: Principal, scopes: list[str], seconds: int | None = None
) -> tuple[str, Principal]:
    made = await tokens.create_api_token(
        services.rt,
        parent,
        ApiTokenCreate.model_validate(
            {"name": "child", "scopes": scopes, "expires_in_seconds": seconds}
        ),
    )
    return made.token, (await access.identity_for_token(services.rt, made.token)).principal


async def stored(services: InProcessConsole, token_id: str) -> ApiToken:
    return await services.run(lambda uow: uow.session.get(ApiToken, token_id))


# -- a child never outlives its parent -------------------------------------------------------------


async def test_a_child_expires_no_later_than_its_parent(services: InProcessConsole):
    _, parent = await child(services, services.principal, ["tokens:write", "agents:read"], 3600)
    _, never = await child(services, parent, ["agents:read"])  # asks for no expiry
    _, longer = await child(services, parent, ["agents:read"], 86400)
    _, shorter = await child(services, parent, ["agents:read"], 60)
    limit = (await stored(services, parent.token_id)).expires_at
    assert (await stored(services, never.token_id)).expires_at == limit
    assert (await stored(services, longer.token_id)).expires_at == limit
    assert (await stored(services, shorter.token_id)).expires_at < limit
    services.clock.advance(3601)
    for raw_owner in (parent, never, longer):
        row = await stored(services, raw_owner.token_id)
        assert row.expires_at <= services.clock()


async def test_a_child_of_a_token_that_never_expires_may_never_expire(
    services: InProcessConsole,
):
    _, kid = await child(services, services.principal, ["agents:read"])
    assert (await stored(services, kid.token_id)).expires_at is None
    assert (await stored(services, kid.token_id)).parent_id == services.principal.token_id


# -- a child never outranks its parent -------------------------------------------------------------


async def test_a_child_cannot_hold_a_scope_its_parent_lacks(services: InProcessConsole):
    _, parent = await child(services, services.principal, ["tokens:write", "agents:read"])
    with pytest.raises(ForbiddenError) as refused:
        await child(services, parent, ["agents:read", "agents:write"])
    assert refused.value.reason == ErrorReason.SCOPE_ESCALATION


# -- revoked with its parent -----------------------------------------------------------------------


async def test_revoking_a_parent_revokes_its_children_and_theirs(services: InProcessConsole):
    _, parent = await child(services, services.principal, ["tokens:write", "agents:read"])
    kid_raw, kid = await child(services, parent, ["tokens:write", "agents:read"])
    grandkid_raw, _ = await child(services, kid, ["agents:read"])
    await tokens.revoke_api_token(services.rt, services.principal, parent.token_id)
    for raw in (kid_raw, grandkid_raw):
        with pytest.raises(UnauthorizedError) as refused:
            await access.identity_for_token(services.rt, raw)
        assert refused.value.reason == ErrorReason.TOKEN_REVOKED


async def test_revoking_a_token_revokes_the_install_tokens_it_and_its_children_minted(
    services: InProcessConsole,
):
    _, parent = await child(services, services.principal, ["tokens:write", "agents:read"])
    _, kid = await child(services, parent, ["tokens:write", "agents:read"])
    by_parent = await tokens.create_install_token(
        services.rt, parent, InstallTokenCreate(name="by parent")
    )
    by_kid = await tokens.create_install_token(services.rt, kid, InstallTokenCreate(name="by kid"))
    by_root = await tokens.create_install_token(
        services.rt, services.principal, InstallTokenCreate(name="by root")
    )
    assert (by_parent.parent_id, by_kid.parent_id) == (parent.token_id, kid.token_id)
    await tokens.revoke_api_token(services.rt, services.principal, parent.token_id)
    states = {
        t.id: t.state for t in await tokens.list_install_tokens(services.rt, services.principal)
    }
    assert states == {by_parent.id: "revoked", by_kid.id: "revoked", by_root.id: "active"}


async def test_install_tokens_made_before_the_link_outlive_their_maker(
    services: InProcessConsole,
):
    """Rows from before migration 0010 have no parent: revoking the API token leaves them (the
    documented gap)."""
    _, parent = await child(services, services.principal, ["tokens:write"])
    old = await tokens.create_install_token(services.rt, parent, InstallTokenCreate(name="old"))

    def unlink(uow: UnitOfWork) -> None:
        row = uow.session.get(InstallToken, old.id)
        assert row is not None
        row.parent_id = None
        uow.session.add(row)

    await services.rt.units.run(unlink, write=True)
    await tokens.revoke_api_token(services.rt, services.principal, parent.token_id)
    [listed] = [
        t
        for t in await tokens.list_install_tokens(services.rt, services.principal)
        if t.id == old.id
    ]
    assert listed.state == "active" and listed.parent_id is None


# -- never revokes a token that outranks it --------------------------------------------------------


async def test_a_token_cannot_revoke_one_holding_scopes_it_lacks(services: InProcessConsole):
    _, minor = await child(services, services.principal, ["tokens:write", "clusters:read"])
    with pytest.raises(ForbiddenError) as refused:
        await tokens.revoke_api_token(services.rt, minor, services.principal.token_id)
    assert refused.value.reason == ErrorReason.SCOPE_ESCALATION
    assert (await stored(services, services.principal.token_id)).revoked_at is None
    # A peer with no more scopes than the caller can still be revoked.
    _, peer = await child(services, services.principal, ["clusters:read"])
    await tokens.revoke_api_token(services.rt, minor, peer.token_id)
    assert (await stored(services, peer.token_id)).revoked_at is not None


# -- web sessions ----------------------------------------------------------------------------------


def store(services: InProcessConsole, **over: float) -> SessionStore:
    return SessionStore(services.rt.units, services.settings.model_copy(update=over))


async def live(services: InProcessConsole, sessions: SessionStore, cookie: str) -> bool:
    return await services.run(lambda uow: sessions.load(uow, cookie)) is not None


async def test_sign_ins_of_one_token_never_sign_out_another(services: InProcessConsole):
    """The bound is per token, so how many sign-ins past it makes no difference: 500 past a
    bound of 5 here (10,000 past the default 50 took 78 s on a loaded 2-core box, same result)."""
    sessions = store(services, web_sessions_per_token=5)
    victim = await sessions.create(services.principal.token_id)
    _, attacker = await child(services, services.principal, ["clusters:read"])
    first = await sessions.create(attacker.token_id)
    for _ in range(500):
        await sessions.create(attacker.token_id)
    assert await live(services, sessions, victim)
    assert not await live(services, sessions, first), "the attacker's own oldest went"
    assert await sessions.count(attacker.token_id) == sessions.per_token
    assert await sessions.count() == sessions.per_token + 1


async def test_sessions_end_when_idle_or_too_old_and_on_sign_out(services: InProcessConsole):
    sessions = store(services, web_session_idle_seconds=600, web_session_absolute_seconds=3600)
    idle = await sessions.create(services.principal.token_id)
    services.clock.advance(601)
    assert not await live(services, sessions, idle)

    busy = await sessions.create(services.principal.token_id)
    for _ in range(7):  # used every 9 minutes: never idle, but past the absolute lifetime
        services.clock.advance(540)
        session = await services.run(lambda uow: sessions.load(uow, busy))
        if session is None:
            break
        await sessions.save(session)
    assert session is None, "signed out once an hour had passed since sign-in"

    gone = await sessions.create(services.principal.token_id)
    session = await services.run(lambda uow: sessions.load(uow, gone))
    await sessions.drop(session)
    assert not await live(services, sessions, gone)


async def test_the_database_holds_neither_the_cookie_nor_the_secrets_shown(
    services: InProcessConsole,
):
    sessions = store(services)
    cookie = await sessions.create(services.principal.token_id)
    session = await services.run(lambda uow: sessions.load(uow, cookie))
    session.reveal["new-api-token"] = "pxa_" + "s" * 40
    session.flash("ok", "API token created.")
    await sessions.save(session)
    row = await services.run(lambda uow: uow.session.exec(select(SessionRow)).one())
    assert row.id == session_id(cookie) != cookie
    assert b"pxa_" not in (row.sealed or b"") and cookie.encode() not in (row.sealed or b"")
    again = await services.run(lambda uow: sessions.load(uow, cookie))
    assert again.reveal == {"new-api-token": "pxa_" + "s" * 40}
    assert [f.message for f in again.flashes] == ["API token created."]
    assert again.csrf == session.csrf and again.csrf not in repr(row)


# -- the audit log ---------------------------------------------------------------------------------


def test_audit_lines_are_json_objects_with_their_fields(caplog: pytest.LogCaptureFixture):
    import json
    import logging

    from console.core.audit_log import AUDIT_LOGGER, audit_refusal
    from console.core.logs import JsonFormatter

    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        audit_refusal("auth_failed", surface="api", reason="invalid_token", token_prefix=None)
    entry = json.loads(JsonFormatter().format(caplog.records[-1]))
    assert entry["logger"] == AUDIT_LOGGER and entry["level"] == "warning"
    assert entry["event"] == "auth_failed" and entry["surface"] == "api"
    assert entry["token_prefix"] is None
