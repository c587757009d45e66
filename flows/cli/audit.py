"""``proxima-fleet audit``: run the ``fleet-audit`` deployment now and show what it found, or
show the latest run's findings.

``audit run`` talks to Prefect (PREFECT_API_URL), imported inside the verb: every other verb
starts without Prefect."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import httpx
import typer
from rich.console import Group

from contracts.audit import AuditRunPublic, Severity
from flows.cli._common import (
    EXIT_CONFIG,
    JsonOption,
    console_client,
    emit_json,
    fail,
    fields,
    stdout,
    table,
)

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import FlowRun

app = typer.Typer(help="Fleet audit: run the fleet-audit deployment, show what a run found.")

DEPLOYMENT = "fleet-audit/fleet-audit"
"""``<flow name>/<deployment name>`` of the audit in prefect.yaml."""


def render(run: AuditRunPublic) -> Group:
    """One audit run for people: its summary and every finding, worst first."""
    order = list(Severity)
    findings = sorted(run.findings or [], key=lambda f: order.index(f.severity))
    summary = fields(
        f"audit {run.id}",
        [("at", run.created_at), ("flow run", run.flow_run_id), ("summary", run.summary)],
    )
    rows = [
        (f.severity, f.name, f.subject_name or f.subject_id, f.message, f.fix) for f in findings
    ]
    listing = table(
        f"{len(findings)} findings", ("severity", "finding", "subject", "message", "fix"), rows
    )
    return Group(summary, listing)


@app.command()
def show(as_json: JsonOption = False) -> None:
    """The latest audit run: its summary and every finding, worst first."""
    with console_client() as client:
        run = client.latest_audit()
    if as_json:
        emit_json(run)
    else:
        stdout.print(render(run))


@app.command("run")
def run_now(
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--no-wait", help="Wait for the run to end and show its findings (default)."
        ),
    ] = True,
    timeout: Annotated[
        float, typer.Option(min=1, help="Give up waiting after this many seconds.")
    ] = 600,
    as_json: JsonOption = False,
) -> None:
    """Start the fleet-audit deployment now (PREFECT_API_URL; a worker runs it), wait for the
    run to end, then show the audit it recorded. A failed run exits 1."""
    from prefect.settings import PREFECT_API_URL

    api_url = PREFECT_API_URL.value()
    if not api_url:
        fail(
            "PREFECT_API_URL is not set",
            "set it to the Prefect server's API, e.g. http://127.0.0.1:4200/api",
            code=EXIT_CONFIG,
        )
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    try:
        with get_client(sync_client=True) as prefect:
            try:
                deployment = prefect.read_deployment_by_name(DEPLOYMENT)
            except ObjectNotFound:
                fail(
                    "deployment not found",
                    f"no {DEPLOYMENT} deployment at {api_url}: run `proxima-fleet deploy` first",
                )
            flow_run = prefect.create_flow_run_from_deployment(deployment.id)
            typer.echo(f"fleet-audit run {flow_run.name} ({flow_run.id}) started", err=True)
            if not wait:
                typer.echo(str(flow_run.id))
                return
            flow_run = _wait(prefect, flow_run, timeout)
    except (httpx.ConnectError, httpx.TimeoutException) as exc:
        fail("prefect unreachable", f"{api_url}: {exc} (PREFECT_API_URL)")
    except PrefectHTTPStatusError as exc:
        fail("prefect api", str(exc).splitlines()[0])
    state = flow_run.state
    if state is None or not state.is_completed():
        name = state.name if state else "unknown"
        message = f": {state.message}" if state and state.message else ""
        fail("audit run failed", f"fleet-audit run {flow_run.id} ended {name}{message}")
    _show_recorded(str(flow_run.id), as_json)


def _wait(prefect: SyncPrefectClient, flow_run: FlowRun, timeout: float) -> FlowRun:
    """Poll the run until its state is final, one stderr line per state it passes through."""
    deadline = time.monotonic() + timeout
    seen: str | None = None
    while True:
        state = flow_run.state
        if state is not None and state.name != seen:
            seen = state.name
            typer.echo(f"fleet-audit run {flow_run.name}: {seen}", err=True)
        if state is not None and state.is_final():
            return flow_run
        if time.monotonic() > deadline:
            fail(
                "timeout",
                f"fleet-audit run {flow_run.id} still {seen} after {timeout:g} s "
                "(is a worker polling the proxima-process pool?); it carries on in Prefect",
            )
        time.sleep(1)
        flow_run = prefect.read_flow_run(flow_run.id)


def _show_recorded(flow_run_id: str, as_json: bool) -> None:
    """The audit the run recorded in the Console (matched by its flow run id)."""
    with console_client() as client:
        recorded = next((r for r in client.audit_runs() if r.flow_run_id == flow_run_id), None)
        if recorded is None:
            fail(
                "no audit recorded",
                f"fleet-audit run {flow_run_id} completed but the Console at "
                "PROXIMA_CONSOLE_URL holds no audit of it (does the worker use this Console?)",
            )
        run = client.audit_run(recorded.id)
    if as_json:
        emit_json(run)
    else:
        stdout.print(render(run))
