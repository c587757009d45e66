"""Fleet audit findings, as the fleet-audit flow posts them and the Console serves them."""

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, Field

from contracts.bounds import Detail, text


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    WARNING = "warning"
    INFO = "info"


class Finding(BaseModel):
    name: Annotated[str, text(64)] = Field(description="stable machine name, e.g. shared_identity")
    severity: Severity
    subject_kind: Annotated[str, text(32)] = Field(description="agent, cluster, daemonset, …")
    subject_id: Annotated[str, text(253)] | None = None
    subject_name: Annotated[str, text(253)] | None = None
    message: Annotated[str, text(2048)]
    fix: Annotated[str, text(1024)] | None = None
    detail: Detail = Field(default_factory=dict)


class AuditRunCreate(BaseModel):
    flow_run_id: Annotated[str, text(64)] | None = None
    findings: list[Finding] = Field(max_length=100_000)


class AuditRunPublic(BaseModel):
    id: str
    created_at: datetime
    flow_run_id: str | None
    summary: dict[str, int]
    findings: list[Finding] | None = None
