"""``proxima-fleet rollouts``: list, show (and watch), create, pause, resume and abort rollouts
through ``/api/v1/fleet/rollouts``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Group
from rich.live import Live

from contracts.bounds import parse_labels
from contracts.rollouts import CriterionSpec, RolloutCreate, RolloutPublic
from contracts.vocabulary import ErrorReason
from contracts.vocabulary.rollouts import FailureType, ThresholdAction
from flows.cli._common import JsonOption, console_client, emit_json, fail, fields, stdout, table
from flows.console_client import ConsoleClient
from rollout_policy import TERMINAL_STATES, EventKind

app = typer.Typer(help="Rollouts of a new agent version, in self-stopping waves.")

RolloutId = Annotated[str, typer.Argument(help="The rollout's id.")]


def _nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in counts.items() if v}


def _counts(rollout: RolloutPublic) -> str:
    return " ".join(f"{k}={v}" for k, v in _nonzero(rollout.counts).items()) or "-"


@app.command("list")
def list_rollouts(
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """The environment's rollouts, newest first."""
    with console_client() as client:
        rollouts = client.rollouts(limit=limit)
    if as_json:
        emit_json(rollouts)
        return
    rows = [
        (r.id, r.name, r.target_version, r.state, _counts(r), r.created_at, r.state_reason)
        for r in rollouts
    ]
    columns = ("id", "name", "version", "state", "targets", "created", "why")
    stdout.print(table(f"{len(rollouts)} rollouts", columns, rows))


def _criterion_text(criterion: CriterionSpec) -> str:
    """e.g. ``any failures >= 10% (after 1 results): stall``."""
    limits = [f"{criterion.threshold_count}"] if criterion.threshold_count else []
    if criterion.threshold_percent:
        limits.append(f"{criterion.threshold_percent:g}%")
    return (
        f"{criterion.failure_type} failures >= {' or '.join(limits)} "
        f"(after {criterion.min_executed} results): {criterion.action}"
    )


def render(rollout: RolloutPublic) -> Group:
    """One rollout for people: its state, waves, exclusions and (when read) its targets."""
    summary = fields(
        f"rollout {rollout.name}",
        [
            ("id", rollout.id),
            ("state", rollout.state),
            ("why", rollout.state_reason),
            ("version", rollout.target_version),
            ("artifact", rollout.artifact.url),
            ("targets", _counts(rollout)),
            ("criteria", "; ".join(_criterion_text(c) for c in rollout.criteria)),
            ("tripped", rollout.threshold),
            ("created", rollout.created_at),
            ("started", rollout.started_at),
            ("finished", rollout.finished_at),
            ("flow run", rollout.flow_run_id),
            ("driver lost", rollout.driver_lost_reason),
        ],
    )
    waves = table(
        "waves",
        ("wave", "kind", "size", "results", "dispatched", "done"),
        [
            (
                w.index,
                w.kind,
                w.size,
                {k: v for k, v in w.counts.items() if v},
                w.dispatched,
                w.done,
            )
            for w in rollout.waves
        ],
    )
    parts: list[Any] = [summary, waves]
    if rollout.exclusions:
        parts.append(
            table(
                f"{len(rollout.exclusions)} agents left out",
                ("agent", "reason", "detail"),
                [(e.agent_name, e.reason, e.detail) for e in rollout.exclusions],
            )
        )
    if rollout.targets:
        parts.append(
            table(
                "targets",
                ("agent", "wave", "status", "from", "to", "error"),
                [
                    (t.agent_name, t.wave, t.status, t.old_version, t.new_version, t.error)
                    for t in rollout.targets
                ],
            )
        )
    return Group(*parts)


def _watch(client: ConsoleClient, rollout_id: str, interval: float) -> RolloutPublic:
    """Redraw the rollout every ``interval`` seconds until it is final."""
    rollout = client.rollout(rollout_id, targets=False)
    with Live(render(rollout), console=stdout, auto_refresh=False) as live:
        while rollout.state not in TERMINAL_STATES:
            time.sleep(interval)
            rollout = client.rollout(rollout_id, targets=False)
            live.update(render(rollout), refresh=True)
    return rollout


@app.command()
def show(
    rollout_id: RolloutId,
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep the view live until the rollout is final.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="Seconds between reads (--watch).")] = 2,
    targets: Annotated[
        bool, typer.Option("--targets/--no-targets", help="List every target agent.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """One rollout: state, waves, agents left out and (--targets) each target's result."""
    with console_client() as client:
        if watch and not as_json:
            _watch(client, rollout_id, interval)
            return
        if watch:
            while (rollout := client.rollout(rollout_id, targets=False)).state not in (
                TERMINAL_STATES
            ):
                time.sleep(interval)
        rollout = client.rollout(rollout_id, targets=targets or as_json)
    if as_json:
        emit_json(rollout)
    else:
        stdout.print(render(rollout))


def _decide(rollout_id: str, action: EventKind, reason: str | None, as_json: bool) -> None:
    with console_client() as client:
        rollout = client.decide(rollout_id, action, reason)
    if as_json:
        emit_json(rollout)
    else:
        stdout.print(f"rollout {rollout.id} ({rollout.name}): {rollout.state}")


Reason = Annotated[str | None, typer.Option(help="Why: recorded with the rollout.")]


@app.command()
def pause(rollout_id: RolloutId, reason: Reason = None, as_json: JsonOption = False) -> None:
    """Pause a running rollout: nothing more is sent until it is resumed."""
    _decide(rollout_id, EventKind.PAUSE, reason, as_json)


@app.command()
def resume(rollout_id: RolloutId, as_json: JsonOption = False) -> None:
    """Resume a paused or stalled rollout (its results so far become the baseline)."""
    _decide(rollout_id, EventKind.RESUME, None, as_json)


@app.command()
def abort(
    rollout_id: RolloutId,
    reason: Annotated[str, typer.Option(help="Why: recorded with the rollout.")],
    as_json: JsonOption = False,
) -> None:
    """Abort a rollout for good: nothing more is sent."""
    _decide(rollout_id, EventKind.ABORT, reason, as_json)


@app.command("restart-driver")
def restart_driver(rollout_id: RolloutId, as_json: JsonOption = False) -> None:
    """Start a fresh fleet-rollout flow run for a rollout whose run crashed, failed, was
    cancelled or vanished; it goes on where the last one stopped (refused while that run is
    alive: driver_running)."""
    with console_client() as client:
        rollout = client.restart_driver(rollout_id)
    if as_json:
        emit_json(rollout)
    else:
        stdout.print(
            f"rollout {rollout.id} ({rollout.name}): {rollout.state}, "
            f"driven by flow run {rollout.flow_run_id}"
        )


def _artifact(
    client: ConsoleClient, version: str, signature: str | None, url: str | None, sha256: str | None
) -> dict[str, Any]:
    """The artifact to roll out: given in full, or the hosted build of ``version``."""
    if url or sha256 or signature:
        if not (url and sha256 and signature):
            fail(ErrorReason.INVALID_REQUEST, "--url, --sha256 and --signature go together")
        return {"version": version, "url": url, "sha256": sha256, "signature": signature}
    builds = [b for b in client.artifacts() if b.version == version]
    if not builds:
        fail(
            ErrorReason.NOT_FOUND,
            f"this Console hosts no build of {version}: upload it (proxima-fleet builds upload) "
            "or give --url, --sha256 and --signature",
        )
    return builds[0].model_dump(mode="json")


def _read_body(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        fail(ErrorReason.INVALID_REQUEST, f"cannot read {path}: {exc}")
    if not isinstance(body, dict):
        fail(ErrorReason.INVALID_REQUEST, f"{path}: a JSON object is expected")
    return body


def _waves(
    body: dict[str, Any], percentages: str | None, canary: int | None, growth: float | None
) -> None:
    waves = dict(body.get("waves") or {})
    if percentages is not None:
        try:
            waves["percentages"] = [float(p) for p in percentages.split(",") if p.strip()]
        except ValueError:
            fail(
                ErrorReason.INVALID_REQUEST, f"--waves {percentages!r}: comma-separated percentages"
            )
    if canary is not None:
        waves["canary_size"] = canary
    if growth is not None:
        waves["growth_factor"] = growth
    if waves:
        body["waves"] = waves


def _selector(
    body: dict[str, Any], agent_types: list[str], labels: list[str], version_range: str | None
) -> None:
    selector = dict(body.get("selector") or {})
    if agent_types:
        selector["agent_types"] = agent_types
    if labels:
        try:
            selector["labels"] = parse_labels(",".join(labels))
        except ValueError as exc:
            fail(ErrorReason.INVALID_REQUEST, f"--label takes key=value: {exc}")
    if version_range is not None:
        selector["version_range"] = version_range
    if selector:
        body["selector"] = selector


def _criterion(
    body: dict[str, Any],
    percent: float | None,
    count: int | None,
    failure_type: FailureType | None,
    min_executed: int | None,
    action: ThresholdAction | None,
) -> None:
    if percent is None and count is None:
        if failure_type or min_executed is not None or action:
            fail(
                ErrorReason.INVALID_REQUEST,
                "a criterion needs --threshold-percent or --threshold-count",
            )
        return
    criterion: dict[str, Any] = {"threshold_percent": percent, "threshold_count": count}
    if failure_type:
        criterion["failure_type"] = failure_type
    if min_executed is not None:
        criterion["min_executed"] = min_executed
    if action:
        criterion["action"] = action
    body["criteria"] = [{k: v for k, v in criterion.items() if v is not None}]


@app.command()
def create(
    version: Annotated[
        str | None, typer.Option(help="The version to roll out (a hosted build's, or --url's).")
    ] = None,
    name: Annotated[str | None, typer.Option(help="A name for people.")] = None,
    url: Annotated[
        str | None, typer.Option(help="The build's URL (else the hosted build).")
    ] = None,
    sha256: Annotated[str | None, typer.Option(help="The build's SHA-256 (with --url).")] = None,
    signature: Annotated[str | None, typer.Option(help="base64url ed25519 (with --url).")] = None,
    waves: Annotated[
        str | None, typer.Option(help="Cumulative percentages after the canary, e.g. 10,50,100.")
    ] = None,
    canary_size: Annotated[int | None, typer.Option(min=1, help="Agents in the canary.")] = None,
    growth_factor: Annotated[
        float | None, typer.Option(help="Grow each wave by this factor instead of --waves.")
    ] = None,
    threshold_percent: Annotated[
        float | None, typer.Option(help="Stop when this percent of a wave's results failed.")
    ] = None,
    threshold_count: Annotated[
        int | None, typer.Option(help="Stop when this many results failed.")
    ] = None,
    failure_type: Annotated[
        FailureType | None, typer.Option(help="Which failures the criterion counts.")
    ] = None,
    min_executed: Annotated[
        int | None, typer.Option(help="Results needed before the criterion judges.")
    ] = None,
    action: Annotated[
        ThresholdAction | None, typer.Option(help="What a crossed criterion does.")
    ] = None,
    agent_type: Annotated[
        list[str] | None, typer.Option(help="Only agents of this type (repeatable).")
    ] = None,
    label: Annotated[list[str] | None, typer.Option(help="Only agents with key=value.")] = None,
    version_range: Annotated[
        str | None, typer.Option(help='Only agents whose version is in it, e.g. ">=0.7,<0.9".')
    ] = None,
    wave_timeout: Annotated[
        float | None, typer.Option(help="Seconds a wave may take before its rest time out.")
    ] = None,
    start_flow: Annotated[
        bool | None,
        typer.Option(
            "--start-flow/--no-start-flow", help="Start the fleet-rollout deployment (default)."
        ),
    ] = None,
    from_file: Annotated[
        Path | None,
        typer.Option(help="A full POST /api/v1/fleet/rollouts body (JSON); flags override it."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a rollout: the Console decides who is eligible and the waves now."""
    body = _read_body(from_file)
    _waves(body, waves, canary_size, growth_factor)
    _selector(body, agent_type or [], label or [], version_range)
    _criterion(body, threshold_percent, threshold_count, failure_type, min_executed, action)
    for key, value in (("name", name), ("wave_timeout_seconds", wave_timeout)):
        if value is not None:
            body[key] = value
    if start_flow is not None:
        body["start_flow"] = start_flow
    with console_client() as client:
        if version is not None or "artifact" not in body:
            if version is None:
                fail(ErrorReason.INVALID_REQUEST, "give --version (or an artifact in --from-file)")
            body["artifact"] = _artifact(client, version, signature, url, sha256)
        try:
            request = RolloutCreate.model_validate(body)
        except ValidationError as exc:
            fail(ErrorReason.INVALID_REQUEST, _first_error(exc))
        rollout = client.create_rollout(request)
    if as_json:
        emit_json(rollout)
    else:
        stdout.print(render(rollout))


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {error['msg']}{more}"
