"""Why a migration stops: the plan is blocked before the move, or verification failed after it.

    RuntimeError
    ├── MigrationBlockedError   (rows: the plan's blocked nodes)
    └── MigrationFailedError    (failed: the failing check rows)

(:func:`check_apply` also raises ``ValueError`` for a new directory that is the host agents'.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flows.hostdatadir.manifests import DEFAULT_DATA_DIR
from rollout_policy import MigrationPlan, MigrationRow

__all__ = ["MigrationBlockedError", "MigrationFailedError", "check_apply"]


class MigrationBlockedError(RuntimeError):
    """The plan has nodes no apply can finish (revoked record, or a second live process)."""

    def __init__(self, rows: Sequence[MigrationRow]) -> None:
        lines = "; ".join(f"{row.node}: {row.action}" for row in rows)
        super().__init__(f"{len(rows)} node(s) need an operator before the move: {lines}")
        self.rows = tuple(rows)


class MigrationFailedError(RuntimeError):
    """Verification failed after the apply; ``failed`` are the failing checks."""

    def __init__(self, failed: Sequence[Mapping[str, str]]) -> None:
        lines = "; ".join(f"{c['subject']}: {c['check']}: {c['detail']}" for c in failed)
        super().__init__(f"{len(failed)} check(s) failed: {lines}")
        self.failed = tuple(failed)


def check_apply(plan: MigrationPlan, *, data_path: str | None, new_dir: str) -> None:
    """Refuse an apply that could not finish: blocked nodes when the directory changes, or a
    new directory that is the host agents' own on nodes where one runs."""
    if data_path != new_dir and plan.blocked:
        raise MigrationBlockedError(plan.blocked)
    hosts = [str(row.node) for row in plan.rows if row.host_agent_running]
    if new_dir == DEFAULT_DATA_DIR and hosts:
        raise ValueError(
            f"{new_dir} is the host agent's data directory, and host agents run on "
            f"{', '.join(hosts)}: two agents must never share a data directory"
        )
