"""``identity-release``: free the names of a list (or a selection) of agents with the API's
rules, dry-run first, and report released / refused-with-reason as a table."""

from __future__ import annotations

from datetime import UTC, datetime

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact

from flows.console_client import ConsoleApiError, ConsoleClient
from flows.settings import FlowSettings


def predict(agent: dict[str, object], quiet_seconds: float) -> tuple[str, str]:
    """What the API will answer, from what it shows: (outcome, reason)."""
    status = agent.get("status")
    if status == "revoked":
        return "refused", "agent_revoked"
    if status == "released":
        return "already_released", ""
    since = agent.get("seconds_since_seen")
    if isinstance(since, int | float) and since <= quiet_seconds:
        return "refused", "agent_recently_seen"
    return "would_release", ""


@task(name="release-identities")
def release_all(agent_ids: list[str], dry_run: bool, quiet_seconds: float) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    with ConsoleClient(FlowSettings()) as console:
        for agent_id in agent_ids:
            try:
                agent = console.agent(agent_id)
            except ConsoleApiError as exc:
                rows.append(
                    {
                        "agent": agent_id,
                        "outcome": "refused",
                        "reason": exc.reason,
                        "message": exc.message,
                    }
                )
                continue
            name = f"{agent['agent_type']}/{agent['name']}"
            if dry_run:
                outcome, reason = predict(agent, quiet_seconds)
                rows.append(
                    {
                        "agent": name,
                        "outcome": outcome,
                        "reason": reason,
                        "message": "dry run: nothing changed",
                    }
                )
                continue
            try:
                console.release_identity(agent_id)
                rows.append(
                    {
                        "agent": name,
                        "outcome": "released",
                        "reason": "",
                        "message": "the next enrollment re-binds this record",
                    }
                )
            except ConsoleApiError as exc:
                rows.append(
                    {
                        "agent": name,
                        "outcome": "refused",
                        "reason": exc.reason,
                        "message": exc.message,
                    }
                )
    return rows


@flow(name="identity-release")
def identity_release(
    agent_ids: list[str] | None = None,
    agent_type: str | None = None,
    name_contains: str | None = None,
    flag: str | None = None,
    dry_run: bool = True,
    quiet_seconds: float = 300,
) -> dict[str, object]:
    """Release identities (explicit ids, or a selection by type / name / flag). Dry-run by
    default: shows what the API would do. ``quiet_seconds`` mirrors the Console's window for the
    dry-run prediction only; the API decides for real."""
    log = get_run_logger()
    ids = list(agent_ids or [])
    if agent_type or name_contains or flag:
        filters = {
            k: v
            for k, v in {"agent_type": agent_type, "name": name_contains, "flag": flag}.items()
            if v
        }
        with ConsoleClient(FlowSettings()) as console:
            ids += [a["id"] for a in console.agents(**filters) if a["id"] not in ids]
    if not ids:
        log.warning("no agents selected")
        return {"rows": [], "dry_run": dry_run}
    rows = release_all(ids, dry_run, quiet_seconds)
    create_table_artifact(
        rows,
        key="identity-release",
        description=("Dry run" if dry_run else "Release") + f" at {datetime.now(UTC).isoformat()}",
    )
    for row in rows:
        log.info("%s: %s %s", row["agent"], row["outcome"], row["reason"])
    return {"rows": rows, "dry_run": dry_run}
