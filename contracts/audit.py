"""Fleet audit findings, as the fleet-audit flow posts them and the Console serves them."""

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Severity(StrEnum):
    CRITICAL = "critical"
    HIGH = "high"
    WARNING = "warning"
    INFO = "info"


class Finding(BaseModel):
    name: str = Field(max_length=64, description="stable machine name, e.g. shared_identity")
    severity: Severity
    subject_kind: str = Field(max_length=32, description="agent, cluster, daemonset, …")
    subject_id: str | None = None
    subject_name: str | None = None
    message: str = Field(max_length=2048)
    fix: str | None = Field(default=None, max_length=1024)
    detail: dict[str, Any] = Field(default_factory=dict)


class AuditRunCreate(BaseModel):
    flow_run_id: str | None = None
    findings: list[Finding] = Field(max_length=100_000)


class AuditRunPublic(BaseModel):
    id: str
    created_at: datetime
    flow_run_id: str | None
    summary: dict[str, int]
    findings: list[Finding] | None = None
