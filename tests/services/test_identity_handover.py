"""Release-identity hands a record to the next machine enrolling under its name, in-process:
the re-bind whatever evidence that machine presents, its evidence replacing the record's, the
audit record of the hand-over, and the enrollment's dry run saying so."""

import logging

import pytest
from sqlmodel import select

from console.core.audit_log import AUDIT_LOGGER
from console.errors import ConflictError
from console.models import Agent, AgentEvent, AgentEvidence, InstallToken
from console.services.identities import preview_enrollment, release
from contracts.vocabulary import EnrollmentAction, ErrorReason, RebindHow
from testkit.services import AgentKey, InProcessConsole

OLD = {"machine_id": "a" * 32, "product_uuid": "4c4c4544-0037-3010-8031-b7c04f4e3332"}
NEW = {"machine_id": "b" * 32}


async def _state(services: InProcessConsole, agent_id: str) -> tuple[Agent, list, list]:
    def work(uow):
        record = uow.session.get(Agent, agent_id)
        evidence = uow.session.exec(
            select(AgentEvidence).where(AgentEvidence.agent_id == agent_id)
        ).all()
        history = uow.session.exec(
            select(AgentEvent).where(AgentEvent.agent_id == agent_id).order_by(AgentEvent.id)
        ).all()
        return record, [(e.kind, e.value_hash) for e in evidence], history

    return await services.run(work)


async def _uses(services: InProcessConsole) -> int:
    return await services.run(
        lambda uow: sum(t.uses for t in uow.session.exec(select(InstallToken)).all())
    )


async def _old_record(services: InProcessConsole) -> tuple[str, str]:
    token = await services.install_token()
    first, _ = await services.enroll(AgentKey("web-1", **OLD), token)
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    return token, first.agent_id


async def test_without_release_a_machine_with_other_evidence_is_refused_however_quiet(
    services: InProcessConsole,
):
    token, agent_id = await _old_record(services)
    services.clock.advance(7 * 24 * 3600)
    with pytest.raises(ConflictError) as refused:
        await services.enroll(AgentKey("web-1", **NEW), token)
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH
    assert "release-identity" in refused.value.message, "the 409 names the way out"
    record, _, _ = await _state(services, agent_id)
    assert record.nats_public_key is not None and record.conflict_count == 1


async def test_after_release_a_machine_with_other_evidence_rebinds_the_same_record(
    services: InProcessConsole, caplog: pytest.LogCaptureFixture
):
    """A released record holding evidence was re-bound only by a machine presenting that
    evidence: a machine whose evidence changed got ``identity_mismatch`` for ever, even after
    the release that was meant to hand it the name."""
    token, agent_id = await _old_record(services)
    _, before, _ = await _state(services, agent_id)
    await release(services.rt, services.principal, agent_id)
    new = AgentKey("web-1", **NEW)
    with caplog.at_level(logging.INFO, logger=AUDIT_LOGGER):
        again, created = await services.enroll(new, token)
    assert (again.agent_id, again.rebound, created) == (agent_id, True, False)

    record, evidence, history = await _state(services, agent_id)
    assert record.nats_public_key == new.public_key and record.released_at is None
    assert record.rebound_at is None, "an operator's hand-over is not flagged as a takeover"
    assert {kind for kind, _ in evidence} == {"machine_id"}
    assert not set(evidence) & set(before), "the record's evidence is the new machine's"
    rebound = history[-1]
    assert rebound.kind == "rebound" and "after release" in rebound.message
    assert rebound.detail["how"] == RebindHow.RELEASED
    assert rebound.detail["released_by"] == f"api token {services.principal.name!r}"
    assert rebound.detail["released_at"]
    assert rebound.detail["previous_evidence"] == ["machine_id", "product_uuid"]
    assert rebound.detail["presented_evidence"] == ["machine_id"]
    assert rebound.detail["evidence_differs"] == ["machine_id", "product_uuid"]
    assert [e.kind for e in history] == ["enrolled", "released", "rebound"], "history kept"
    (line,) = [r for r in caplog.records if r.audit["event"] == "agent_rebound"]
    assert line.audit["how"] == "released" and line.audit["agent_id"] == agent_id
    assert line.audit["previous_evidence"] == ["machine_id", "product_uuid"]
    assert OLD["machine_id"] not in line.getMessage() and NEW["machine_id"] not in str(
        line.audit
    ), "evidence by kind, never by value"

    # The old machine is now the stranger: its evidence no longer covers the record's.
    services.clock.advance(services.settings.identity_quiet_seconds + 1)
    with pytest.raises(ConflictError) as refused:
        await services.enroll(AgentKey("web-1", **OLD), token)
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH


async def test_a_quiet_rebind_without_release_keeps_gaining_evidence(services: InProcessConsole):
    """The strict rule is unchanged: the same machine re-binds and the record keeps its
    evidence (a new value is added, none replaced)."""
    token, agent_id = await _old_record(services)
    _, before, _ = await _state(services, agent_id)
    again, _ = await services.enroll(AgentKey("web-1", **OLD), token)
    assert again.rebound and again.agent_id == agent_id
    _, after, history = await _state(services, agent_id)
    assert set(after) == set(before)
    assert history[-1].detail["how"] == RebindHow.QUIET_WITH_EVIDENCE
    assert "previous_evidence" not in history[-1].detail


async def test_the_enrollment_dry_run_says_it_would_rebind_and_replace_the_evidence(
    services: InProcessConsole,
):
    token, agent_id = await _old_record(services)
    new = AgentKey("web-1", **NEW)
    uses = await _uses(services)

    with pytest.raises(ConflictError) as refused:
        await preview_enrollment(services.rt, new.request(token, services.clock.now))
    assert refused.value.reason == ErrorReason.IDENTITY_MISMATCH
    record, _, history = await _state(services, agent_id)
    assert record.conflict_count == 0, "a dry run records no clash"

    await release(services.rt, services.principal, agent_id)
    _, evidence, history = await _state(services, agent_id)
    preview = await preview_enrollment(services.rt, new.request(token, services.clock.now))
    assert (preview.action, preview.agent_id, preview.how) == (
        EnrollmentAction.REBIND,
        agent_id,
        RebindHow.RELEASED,
    )
    assert preview.replaces_evidence and preview.dry_run
    assert (preview.held_evidence, preview.presented_evidence) == (
        ["machine_id", "product_uuid"],
        ["machine_id"],
    )
    assert "replacing its identity evidence" in preview.message
    record, still, after = await _state(services, agent_id)
    assert (record.nats_public_key, still, len(after)) == (None, evidence, len(history))
    assert await _uses(services) == uses, "no token use counted"

    fresh = await preview_enrollment(
        services.rt, AgentKey("web-2").request(token, services.clock.now)
    )
    assert (fresh.action, fresh.agent_id, fresh.replaces_evidence) == (
        EnrollmentAction.CREATE,
        None,
        False,
    )
