"""Fleet audit runs: the fleet-audit flow posts findings; operators and the UI read them."""

from collections import Counter
from typing import Annotated

from fastapi import APIRouter, Query, status
from sqlmodel import Session, col, select

from console.api.deps import PrincipalDep, RuntimeDep
from console.api.responses import errors
from console.errors import NotFoundError
from console.models import AuditFinding, AuditRun
from console.schemas import Scope
from contracts.audit import AuditRunCreate, AuditRunPublic, Finding, Severity

router = APIRouter(prefix="/api/v1/audit", tags=["audit"])
_ERRORS = errors(401, 403, 404)


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


@router.post(
    "/runs", status_code=status.HTTP_201_CREATED, response_model=AuditRunPublic, responses=_ERRORS
)
def create_run(
    body: AuditRunCreate, principal: PrincipalDep, runtime: RuntimeDep
) -> AuditRunPublic:
    principal.require(Scope.AGENTS_WRITE)
    with Session(runtime.engine, expire_on_commit=False) as session:
        summary = dict(Counter(f.severity.value for f in body.findings))
        run = AuditRun(
            client_id=principal.client_id,
            environment_id=principal.environment_id,
            flow_run_id=body.flow_run_id,
            summary=summary,
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
        session.commit()
        return _public(session, run, True)


@router.get("/runs", response_model=list[AuditRunPublic], responses=_ERRORS)
def list_runs(
    principal: PrincipalDep, runtime: RuntimeDep, limit: Annotated[int, Query(ge=1, le=200)] = 20
) -> list[AuditRunPublic]:
    principal.require(Scope.AGENTS_READ)
    with Session(runtime.engine) as session:
        rows = session.exec(
            select(AuditRun)
            .where(
                AuditRun.environment_id == principal.environment_id,
                AuditRun.client_id == principal.client_id,
            )
            .order_by(col(AuditRun.created_at).desc())
            .limit(limit)
        ).all()
        return [_public(session, r, False) for r in rows]


@router.get("/runs/latest", response_model=AuditRunPublic, responses=_ERRORS)
def latest_run(principal: PrincipalDep, runtime: RuntimeDep) -> AuditRunPublic:
    principal.require(Scope.AGENTS_READ)
    with Session(runtime.engine) as session:
        run = session.exec(
            select(AuditRun)
            .where(
                AuditRun.environment_id == principal.environment_id,
                AuditRun.client_id == principal.client_id,
            )
            .order_by(col(AuditRun.created_at).desc())
        ).first()
        if run is None:
            raise NotFoundError("no_audit", "no audit has run in this environment yet")
        return _public(session, run, True)


@router.get("/runs/{run_id}", response_model=AuditRunPublic, responses=_ERRORS)
def get_run(run_id: str, principal: PrincipalDep, runtime: RuntimeDep) -> AuditRunPublic:
    with Session(runtime.engine) as session:
        run = session.get(AuditRun, run_id)
        if run is None:
            raise NotFoundError("audit_not_found", f"audit run {run_id} not found")
        principal.require_on(
            Scope.AGENTS_READ, client_id=run.client_id, environment_id=run.environment_id
        )
        return _public(session, run, True)
