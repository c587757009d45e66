"""One bound, one column: every column with a length is either filled from a wire field whose
contract bound is exactly that length, or written only by the Console (named below, with why).

What broke: ``agent.instance_id`` was VARCHAR(64) while a heartbeat's ``instance_id`` (an
``Identifier``) may carry 128 characters; on PostgreSQL one such heartbeat failed every batch
it was in, and no agent of any tenant had a heartbeat recorded until a restart.
``rollout_target.error`` was 2,048 characters for an error text of 4,096.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from sqlmodel import SQLModel

import console.models  # noqa: F401  (registers the tables)
from console.schemas import ApiTokenCreate, ClusterCreate, InstallTokenCreate, RolloutReason
from contracts.audit import AuditRunCreate, Finding
from contracts.bounds import ResultDetailValues
from contracts.enrollment import EnrollRequest, RotationProof
from contracts.inventory import InventorySnapshot
from contracts.messages import CommandResult, Heartbeat
from contracts.rollouts import ArtifactRef, RolloutCreate

# column -> the contract fields stored into it (a message or request model and a field name)
STORED_FROM: dict[str, list[tuple[type[BaseModel], str]]] = {
    "agent.agent_type": [(EnrollRequest, "agent_type"), (Heartbeat, "agent_type")],
    "agent.name": [(EnrollRequest, "name")],
    "agent.version": [(EnrollRequest, "version"), (Heartbeat, "version")],
    "agent.instance_id": [(EnrollRequest, "instance_id"), (Heartbeat, "instance_id")],
    "agent.self_update_blocker": [(Heartbeat, "self_update_blocker")],
    "agent.cluster_slug": [(Heartbeat, "cluster_slug")],
    "rollout_target.new_version": [(ResultDetailValues, "new_version")],
    "rollout_target.error": [(CommandResult, "error")],
    "rollout_target.failure_kind": [(CommandResult, "failure_kind")],
    "cluster.slug": [(InventorySnapshot, "cluster_slug")],
    "cluster.name": [(ClusterCreate, "name"), (InventorySnapshot, "cluster_name")],
    "cluster.reported_name": [(InventorySnapshot, "cluster_name")],
    "cluster.kubernetes_version": [(InventorySnapshot, "kubernetes_version")],
    "install_token.name": [(InstallTokenCreate, "name")],
    "install_token.cluster_slug": [(InstallTokenCreate, "cluster_slug")],
    "api_token.name": [(ApiTokenCreate, "name")],
    "artifact.version": [(ArtifactRef, "version")],
    "artifact.url": [(ArtifactRef, "url")],
    "artifact.sha256": [(ArtifactRef, "sha256")],
    "artifact.signature": [(ArtifactRef, "signature")],
    "rollout.name": [(RolloutCreate, "name")],
    "rollout.target_version": [(ArtifactRef, "version")],
    "rollout.seed": [(RolloutCreate, "seed")],
    "rollout.state_reason": [(RolloutReason, "reason")],
    "audit_run.flow_run_id": [(AuditRunCreate, "flow_run_id")],
    "audit_finding.name": [(Finding, "name")],
    "audit_finding.severity": [(Finding, "severity")],
    "audit_finding.subject_kind": [(Finding, "subject_kind")],
    "audit_finding.subject_id": [(Finding, "subject_id")],
    "audit_finding.subject_name": [(Finding, "subject_name")],
    "audit_finding.message": [(Finding, "message")],
    "audit_finding.fix": [(Finding, "fix")],
}

# A column kept wider than its field's fixed length (no migration narrows a keyed column).
WIDER = {
    "agent.nats_public_key": (EnrollRequest, "public_key"),
    "credential_rotation.new_public_key": (RotationProof, "new_public_key"),
}

CONSOLE_MADE = {
    "id": "ids the Console makes (uuid4 hex, hashes, nkeys)",
    "client_id": "an id the Console made",
    "environment_id": "an id the Console made",
    "agent_id": "an id the Console made",
    "rollout_id": "an id the Console made",
    "run_id": "an id the Console made",
    "token_id": "an id the Console made",
    "cluster_id": "an id the Console made",
    "parent_id": "an id the Console made",
    "install_token_id": "an id the Console made",
    "last_inventory_agent_id": "the subject's agent id (a record the Console made)",
    "command_id": "the Console's uuid4 hex (a result's command id is only looked up)",
    "token_hash": "SHA-256 hex of a token the Console minted",
    "value_hash": "SHA-256 hex computed by the Console",
    "prefix": "the first characters of a token the Console minted",
    "sha256": "SHA-256 hex of bytes the Console hashed itself",
    "public_key": "an nkey the Console made or copied from a checked record",
    "seed": "an nkey seed the Console made",
    "status": "a TargetStatus the Console sets",
    "state": "a RolloutState the Console sets",
    "reason": "a revocation reason the Console names",
    "kind": "an event or evidence kind the Console names",
    "source": "enrollment or credential_renewal (the Console names it)",
    "nonce": "a nonce the Console made (a proof's nonce is only looked up)",
    "holder": "a replica's own name",
    "key": "a rate-limit key the Console builds from bounded parts",
    "message": "an event's words, the Console's",
    "name": "leases, accounts, clients and environments the Console or its CLI names",
    "flow_run_id": "Prefect's run id, read from Prefect's answer",
    "driver_lost_reason": "a DriverLostReason the Console sets",
    "driver_lost_detail": "the Console's words, cut to the column",
    "last_conflict_reason": "an ErrorReason the Console sets",
    "agent_name": "copied from agent.name",
    "old_version": "copied from agent.version",
}


def _columns() -> dict[str, int]:
    return {
        f"{table.name}.{column.name}": column.type.length
        for table in SQLModel.metadata.sorted_tables
        for column in table.columns
        if getattr(column.type, "length", None)
    }


def _max_length(schema: dict[str, Any], defs: dict[str, Any]) -> int | None:
    if "$ref" in schema:
        return _max_length(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    if "anyOf" in schema:
        found = [_max_length(s, defs) for s in schema["anyOf"] if s.get("type") != "null"]
        return max((n for n in found if n is not None), default=None)
    if "enum" in schema:
        return max(len(str(v)) for v in schema["enum"])
    length = schema.get("maxLength")
    return int(length) if length is not None else None


def _bound(model: type[BaseModel], field: str) -> int | None:
    schema = model.model_json_schema()
    return _max_length(schema["properties"][field], schema.get("$defs", {}))


def test_every_column_with_a_length_is_accounted_for() -> None:
    unaccounted = [
        name
        for name in _columns()
        if name not in STORED_FROM
        and name not in WIDER
        and name.split(".", 1)[1] not in CONSOLE_MADE
    ]
    assert not unaccounted, f"columns with a length but no source named here: {unaccounted}"


@pytest.mark.parametrize("column", sorted(STORED_FROM))
def test_a_stored_wire_field_and_its_column_have_one_length(column: str) -> None:
    length = _columns()[column]
    for model, field in STORED_FROM[column]:
        bound = _bound(model, field)
        assert bound is not None, f"{model.__name__}.{field} has no length bound"
        if model.model_json_schema()["properties"][field].get("enum") or "$ref" in str(
            model.model_json_schema()["properties"][field]
        ):
            assert bound <= length, f"{column} ({length}) < {model.__name__}.{field} ({bound})"
        else:
            assert bound == length, f"{column} is {length}, {model.__name__}.{field} is {bound}"


@pytest.mark.parametrize("column", sorted(WIDER))
def test_a_fixed_length_field_fits_its_wider_column(column: str) -> None:
    model, field = WIDER[column]
    bound = _bound(model, field)
    assert bound is not None and bound <= _columns()[column]
