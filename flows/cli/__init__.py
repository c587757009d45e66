"""``proxima-fleet``: the operator's entry point to the control plane, over the Console API
(PROXIMA_CONSOLE_URL, PROXIMA_CONSOLE_TOKEN): rollouts, builds, agents and the fleet audit; and
``deploy``, the flows' Prefect deployments with sealed parameter schemas (PREFECT_API_URL)."""

from __future__ import annotations

import typer

from contracts.cli_errors import EXIT_USAGE, error
from contracts.cli_errors import run as run_cli
from flows.cli import agents, audit, builds, clusters, deploy, rollouts
from flows.cli._common import PROGRAM

app = typer.Typer(help="Proxima fleet control plane.", no_args_is_help=True)
app.add_typer(rollouts.app, name="rollouts", no_args_is_help=True)
app.add_typer(builds.app, name="builds", no_args_is_help=True)
app.add_typer(agents.app, name="agents", no_args_is_help=True)
app.add_typer(audit.app, name="audit", no_args_is_help=True)
app.add_typer(clusters.app, name="clusters", no_args_is_help=True)
app.command("deploy")(deploy.deploy)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def demo() -> None:
    """Moved out of the product: run `python3 scripts/dev.py demo` from a checkout."""
    error(
        PROGRAM,
        "the demo moved out of the product: run `python3 scripts/dev.py demo` from a checkout",
        EXIT_USAGE,
    )


@app.callback()
def _root() -> None:
    """Proxima fleet control plane."""


def main() -> None:
    """One error line and the shared exit table for every failure (contracts.cli_errors)."""
    run_cli(app, PROGRAM)
