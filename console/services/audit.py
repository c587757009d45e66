"""Fleet audit runs: the fleet-audit flow records findings; operators and the UI read them."""

from __future__ import annotations

from collections import Counter

from sqlmodel import Session, col, select

from console.auth import Principal
from console.errors import NotFoundError
from console.models import AuditFinding, AuditRun
from console.services.unit_of_work import ServiceRuntime, UnitOfWork
from contracts.audit import AuditRunCreate, AuditRunPublic, Finding, Severity
from contracts.vocabulary import ErrorReason, Scope


def _public(session: Session, run: AuditRun, with_findings: bool) -> AuditRunPublic:
    findings = None
    if with_findings:
        rows = session.exec(
            select(AuditFinding).where(AuditFinding.run_id == run.id).order_by(col(AuditFinding.id))
        ).all()
        findings = [
            Finding(
                name=f.name,
                severity=Severity(f.severity),
                subject_kind=f.subject_kind,
                subject_id=f.subject_id,
                subject_name=f.subject_name,
                message=f.message,
                fix=f.fix,
                detail=f.detail,
            )
            for f in rows
        ]
    return AuditRunPublic(
        id=run.id,
        created_at=run.created_at,
        flow_run_id=run.flow_run_id,
        summary=run.summary,
        findings=findings,
    )


async def record_run(
    rt: ServiceRuntime, principal: Principal, body: AuditRunCreate
) -> AuditRunPublic:
    principal.require(Scope.AGENTS_WRITE)

    def work(uow: UnitOfWork) -> AuditRunPublic:
        session = uow.session
        if body.flow_run_id:  # a retried post (perhaps to another replica): stored once
            stored = session.exec(
                select(AuditRun).where(
                    AuditRun.environment_id == principal.environment_id,
                    AuditRun.flow_run_id == body.flow_run_id,
                )
            ).first()
            if stored is not None:
                return _public(session, stored, True)
        run = AuditRun(
            client_id=principal.client_id,
            environment_id=principal.environment_id,
            flow_run_id=body.flow_run_id,
            summary=dict(Counter(f.severity.value for f in body.findings)),
        )
        session.add(run)
        session.flush()
        for f in body.findings:
            session.add(
                AuditFinding(
                    run_id=run.id,
                    name=f.name,
                    severity=f.severity.value,
                    subject_kind=f.subject_kind,
                    subject_id=f.subject_id,
                    subject_name=f.subject_name,
                    message=f.message[:2048],
                    fix=(f.fix or None) and f.fix[:1024],
                    detail=f.detail,
                )
            )
        session.flush()
        return _public(session, run, True)

    return await rt.units.run(work, write=True)


def _runs(principal: Principal):  # type: ignore[no-untyped-def]
    return (
        select(AuditRun)
        .where(
            AuditRun.environment_id == principal.environment_id,
            AuditRun.client_id == principal.client_id,
        )
        .order_by(col(AuditRun.created_at).desc())
    )


async def list_runs(
    rt: ServiceRuntime, principal: Principal, *, limit: int
) -> list[AuditRunPublic]:
    principal.require(Scope.AGENTS_READ)

    def work(uow: UnitOfWork) -> list[AuditRunPublic]:
        rows = uow.session.exec(_runs(principal).limit(limit)).all()
        return [_public(uow.session, r, False) for r in rows]

    return await rt.units.run(work)


async def latest_run(rt: ServiceRuntime, principal: Principal) -> AuditRunPublic:
    principal.require(Scope.AGENTS_READ)

    def work(uow: UnitOfWork) -> AuditRunPublic:
        run = uow.session.exec(_runs(principal)).first()
        if run is None:
            raise NotFoundError(ErrorReason.NO_AUDIT, "no audit has run in this environment yet")
        return _public(uow.session, run, True)

    return await rt.units.run(work)


async def get_run(rt: ServiceRuntime, principal: Principal, run_id: str) -> AuditRunPublic:
    def work(uow: UnitOfWork) -> AuditRunPublic:
        run = uow.session.get(AuditRun, run_id)
        if run is None:
            raise NotFoundError(ErrorReason.AUDIT_NOT_FOUND, f"audit run {run_id} not found")
        principal.require_on(
            Scope.AGENTS_READ, client_id=run.client_id, environment_id=run.environment_id
        )
        return _public(uow.session, run, True)

    return await rt.units.run(work)
