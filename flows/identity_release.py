"""``identity-release``: free the names of a list (or a selection) of agents with the API's
rules, dry-run first, and report released / refused-with-reason as a table.

The Console decides every row, the dry run included (``release-identity?dry_run=true``): the
flow never re-implements the release rule nor copies the quiet window."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from contracts.views import AgentFilter, ReleaseDecision
from contracts.vocabulary import AgentFlag, AgentType, ReleaseOutcome
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.settings import FlowSettings

RELEASED = "the next enrollment re-binds this record"
DRY_RUN = "dry run: nothing changed"


def release_row(label: str, answer: ReleaseDecision, *, dry_run: bool) -> dict[str, str]:
    """One table row from the Console's answer (refusals keep the Console's message)."""
    message = answer.message
    if answer.outcome is not ReleaseOutcome.REFUSED:
        message = DRY_RUN if dry_run else RELEASED
    return {
        "agent": label,
        "outcome": answer.outcome.value,
        "reason": answer.reason.value if answer.reason else "",
        "message": message,
    }


def _release_one(console: ConsoleClient, agent_id: str, dry_run: bool) -> dict[str, str]:
    try:
        agent = console.agent(agent_id)
        label = f"{agent.agent_type}/{agent.name}"
    except ConsoleApiError as exc:
        return {
            "agent": agent_id,
            "outcome": ReleaseOutcome.REFUSED.value,
            "reason": str(exc.reason),
            "message": exc.message,
        }
    try:
        answer = console.release_identity(agent_id, dry_run=dry_run)
    except ConsoleApiError as exc:
        return {
            "agent": label,
            "outcome": ReleaseOutcome.REFUSED.value,
            "reason": str(exc.reason),
            "message": exc.message,
        }
    return release_row(label, answer, dry_run=dry_run)


@task(name="release-identities")
def release_all(agent_ids: list[str], dry_run: bool) -> list[dict[str, str]]:
    with ConsoleClient(FlowSettings()) as console:
        return [_release_one(console, agent_id, dry_run) for agent_id in agent_ids]


@flow(name="identity-release")
def identity_release(
    agent_ids: list[str] | None = None,
    agent_type: AgentType | None = None,
    name_contains: str | None = None,
    flag: AgentFlag | None = None,
    dry_run: bool = True,
) -> dict[str, object]:
    """Release identities (explicit ids, or a selection by type / name / flag). Dry-run by
    default: the Console answers what it would do, with the same rules and quiet window as a
    real release, and changes nothing.

    Args:
        agent_ids: Agents to release, by id.
        agent_type: Or a selection: agents of this type.
        name_contains: Or a selection: agents whose name contains this text.
        flag: Or a selection: agents showing this flag (e.g. stuck_in_409).
        dry_run: True: only show what the Console would do; false: release.
    """
    log = get_run_logger()
    ids = list(agent_ids or [])
    if agent_type or name_contains or flag:
        with ConsoleClient(FlowSettings()) as console:
            selected = console.agents(
                AgentFilter(agent_type=agent_type, name=name_contains, flag=flag)
            )
        ids += [a.id for a in selected if a.id not in ids]
    if not ids:
        log.warning("no agents selected")
        return {"rows": [], "dry_run": dry_run}
    rows = release_all(ids, dry_run)
    create_table_artifact(
        rows,
        key="identity-release",
        description=("Dry run" if dry_run else "Release") + f" at {datetime.now(UTC).isoformat()}",
    )
    for row in rows:
        log.info("%s: %s %s", row["agent"], row["outcome"], row["reason"])
    return {"rows": rows, "dry_run": dry_run}
