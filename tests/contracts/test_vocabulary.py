"""The stdlib-only vocabulary: one home per enum, wire values unchanged, every reason code."""

import ast
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts.inventory import InventorySnapshot
from contracts.messages import CommandResult, Heartbeat
from contracts.rollouts import CriterionSpec, RolloutCreate
from contracts.vocabulary import (
    AgentFlag,
    AgentStatus,
    AgentType,
    CommandFailureKind,
    CommandStatus,
    ErrorReason,
    FailureType,
    InventoryProblemKind,
    RolloutState,
    TargetStatus,
    ThresholdAction,
)
from contracts.vocabulary.reasons import ENROLLMENT_CONFLICTS, RELEASE_REFUSALS

ROOT = Path(__file__).resolve().parents[2]

ERROR_CLASSES = {
    "BadRequestError",
    "UnauthorizedError",
    "ForbiddenError",
    "NotFoundError",
    "ConflictError",
    "PayloadTooLargeError",
    "GatewayTimeoutError",
    "ConsoleError",
}


def _reason_literals() -> dict[str, str]:
    """Every string literal the Console answers as an error ``reason``: the first argument of
    its errors (the second of a web ``PageError``), and ``"reason": "…"`` in a body it builds by
    hand."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "console").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                first = node.args[0] if node.args else None
                if name in ERROR_CLASSES and isinstance(first, ast.Constant):
                    found[str(first.value)] = f"{path.relative_to(ROOT)}:{node.lineno}"
                # PageError(status, reason, message); its subclasses pass theirs to it.
                second = node.args[1] if len(node.args) > 1 else None
                if name in ("PageError", "__init__") and isinstance(second, ast.Constant):
                    found[str(second.value)] = f"{path.relative_to(ROOT)}:{node.lineno}"
            if isinstance(node, ast.Dict):
                for key, value in zip(node.keys, node.values, strict=True):
                    if not (isinstance(key, ast.Constant) and key.value == "reason"):
                        continue
                    for leaf in ast.walk(value):
                        if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                            found[leaf.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_reason_the_console_answers_is_an_error_reason() -> None:
    known = {reason.value for reason in ErrorReason}
    missing = {r: where for r, where in _reason_literals().items() if r not in known}
    assert not missing, missing


def test_the_folded_enrollment_and_release_reasons_keep_their_values() -> None:
    assert {r.value for r in ENROLLMENT_CONFLICTS} == {
        "name_in_use",
        "no_identity_evidence",
        "identity_mismatch",
        "agent_revoked",
    }
    assert {r.value for r in RELEASE_REFUSALS} == {"agent_revoked", "agent_recently_seen"}


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (AgentType, {"host", "k8s-node-monitor", "k8s-cluster-collector"}),
        (AgentStatus, {"online", "offline", "released", "revoked"}),
        (
            AgentFlag,
            {
                "shared_identity",
                "version_flapping",
                "enrollment_conflict",
                "no_identity_evidence",
                "cannot_self_update",
                "refused_still_connecting",
                "rebound",
            },
        ),
        (
            RolloutState,
            {"pending", "running", "stalled", "paused", "aborted", "succeeded", "failed"},
        ),
        (
            TargetStatus,
            {"pending", "dispatched", "succeeded", "failed", "timed_out", "rejected"},
        ),
        (FailureType, {"failed", "timed_out", "rejected", "any"}),
        (ThresholdAction, {"stall", "abort"}),
        (CommandStatus, {"accepted", "succeeded", "failed", "rejected"}),
        (
            CommandFailureKind,
            {
                "unsupported_command",
                "bad_arguments",
                "not_self_updatable",
                "no_signing_key",
                "not_single_file_build",
                "read_only_program",
                "update_in_progress",
                "artifact_source_refused",
                "download_failed",
                "download_too_large",
                "checksum_mismatch",
                "bad_signature",
                "smoke_check_failed",
                "install_failed",
                "rolled_back",
                "rollback_failed",
                "interrupted",
                "rotation_failed",
                "rotation_unconfirmed",
                "internal_error",
            },
        ),
        (InventoryProblemKind, {"forbidden_argo_rollouts", "forbidden", "unreadable"}),
    ],
)
def test_wire_values_are_unchanged(enum: type, values: set[str]) -> None:
    assert {member.value for member in enum} == values


def test_the_enums_have_one_home() -> None:
    import contracts.messages
    import contracts.rollouts
    import contracts.views
    import rollout_policy

    # The Console answers with contracts.views, which read the vocabulary's enums.
    assert contracts.views.AgentStatus is AgentStatus
    assert contracts.views.AgentFlag is AgentFlag
    assert contracts.messages.AgentType is AgentType
    assert contracts.messages.CommandStatus is CommandStatus
    assert contracts.rollouts.TargetStatus is TargetStatus
    assert rollout_policy.RolloutState is RolloutState
    assert rollout_policy.FailureType is FailureType
    assert rollout_policy.ThresholdAction is ThresholdAction


def test_the_vocabulary_loads_no_pydantic() -> None:
    probe = "import json, sys, contracts.vocabulary; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
    )
    assert not [m for m in loaded if m.split(".")[0] in ("pydantic", "pydantic_core")]


def test_a_criterion_action_is_the_enum_and_refuses_anything_else() -> None:
    assert CriterionSpec(threshold_count=1, action="abort").action is ThresholdAction.ABORT
    with pytest.raises(ValueError, match="action"):
        CriterionSpec(threshold_count=1, action="explode")
    body = RolloutCreate.model_validate(
        {"artifact": {"version": "1", "url": "u", "sha256": "0" * 64, "signature": "s" * 16}}
    ).model_dump(mode="json")
    assert body["criteria"] == [
        {
            "failure_type": "any",
            "threshold_count": None,
            "threshold_percent": 10.0,
            "min_executed": 1,
            "action": "stall",
        }
    ]
    assert body["waves"]["percentages"] == [1.0, 10.0, 50.0, 100.0]
    assert body["wave_timeout_seconds"] == 300.0


def test_a_command_result_without_a_failure_kind_still_parses_and_one_with_it_does_too() -> None:
    base = {
        "command_id": "c1",
        "agent_id": "a1",
        "kind": "self_update",
        "status": "failed",
        "finished_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "error": "sha256 mismatch: expected … got …",
    }
    assert CommandResult.model_validate(base).failure_kind is None
    result = CommandResult.model_validate({**base, "failure_kind": "checksum_mismatch"})
    assert result.failure_kind is CommandFailureKind.CHECKSUM_MISMATCH


def test_an_inventory_snapshot_without_problems_still_parses_and_one_with_them_does_too() -> None:
    base = {
        "cluster_slug": "prod",
        "cluster_name": "prod",
        "collected_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "sync_interval_seconds": 300,
        "counts": {"pods": 3},
        "errors": ["argo rollouts forbidden: …"],
    }
    assert InventorySnapshot.model_validate(base).problems is None
    snapshot = InventorySnapshot.model_validate(
        {
            **base,
            "problems": [
                {"kind": "forbidden_argo_rollouts", "resource": "rollouts", "message": "…"}
            ],
        }
    )
    assert snapshot.problems is not None
    assert snapshot.problems[0].kind is InventoryProblemKind.FORBIDDEN_ARGO_ROLLOUTS


# -- version skew: a kind this build does not know ------------------------------------------


def test_an_unknown_failure_kind_reads_as_none_instead_of_losing_the_result() -> None:
    """A newer agent's kind (or a stored one an older Console wrote before a rename) must not
    make the Console drop the whole result."""
    base = {
        "command_id": "c1",
        "agent_id": "a1",
        "kind": "self_update",
        "status": "failed",
        "finished_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "error": "something new went wrong",
    }
    result = CommandResult.model_validate({**base, "failure_kind": "quantum_flux"})
    assert result.failure_kind is None
    assert result.error == "something new went wrong"
    from_json = CommandResult.model_validate_json(json.dumps({**base, "failure_kind": "x_ray"}))
    assert from_json.failure_kind is None
    with pytest.raises(ValueError, match="failure_kind"):
        CommandResult.model_validate({**base, "failure_kind": 7})


def test_a_heartbeat_says_why_it_cannot_self_update_and_tolerates_an_unknown_reason() -> None:
    base = {
        "agent_id": "a1",
        "instance_id": "i1",
        "agent_type": "host",
        "version": "1.0.0",
        "sent_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
        "uptime_seconds": 1.0,
        "heartbeat_interval_seconds": 30.0,
        "can_self_update": False,
    }
    assert Heartbeat.model_validate(base).self_update_blocker is None
    beat = Heartbeat.model_validate({**base, "self_update_blocker": "no_signing_key"})
    assert beat.self_update_blocker is CommandFailureKind.NO_SIGNING_KEY
    newer = Heartbeat.model_validate({**base, "self_update_blocker": "on_the_moon"})
    assert newer.self_update_blocker is None and newer.can_self_update is False


def test_an_inventory_problem_of_an_unknown_kind_keeps_its_resource_and_message() -> None:
    snapshot = InventorySnapshot.model_validate(
        {
            "cluster_slug": "prod",
            "cluster_name": "prod",
            "collected_at": datetime(2026, 1, 1, tzinfo=UTC).isoformat(),
            "sync_interval_seconds": 300,
            "counts": {},
            "problems": [
                {"kind": "throttled_by_aliens", "resource": "pods", "message": "…"},
                {"kind": "forbidden", "resource": "cronjobs", "message": "…"},
            ],
        }
    )
    assert snapshot.problems is not None
    assert [(p.kind, p.resource) for p in snapshot.problems] == [
        (None, "pods"),
        (InventoryProblemKind.FORBIDDEN, "cronjobs"),
    ]
