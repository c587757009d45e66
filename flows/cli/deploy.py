"""``proxima-fleet deploy``: ``prefect deploy --all`` from a checkout, then every deployment's
parameter schema sealed (``flows.deployments``), so Prefect refuses a misspelt parameter."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import httpx
import typer

from flows.cli._common import JsonOption, fail, stdout, table

if TYPE_CHECKING:
    from flows.deployments import SealResult

PrefectYaml = Annotated[
    Path,
    typer.Option(
        "--prefect-yaml",
        envvar="PROXIMA_HOME",
        help="prefect.yaml, or the checkout holding it (PROXIMA_HOME; default: this directory).",
    ),
]


def _prefect_binary() -> str:
    beside = Path(sys.executable).with_name("prefect")
    return str(beside) if beside.exists() else (shutil.which("prefect") or "prefect")


def _prefect_deploy(prefect_yaml: Path) -> None:
    home = prefect_yaml.parent
    done = subprocess.run(
        [_prefect_binary(), "deploy", "--all", "--no-prompt", "--prefect-file", str(prefect_yaml)],
        cwd=home,
        env={**os.environ, "PROXIMA_HOME": str(home)},
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
        fail("prefect deploy failed", lines[-1] if lines else f"exit status {done.returncode}")


def deploy(
    prefect_yaml: PrefectYaml = Path("."),
    seal_only: Annotated[
        bool,
        typer.Option("--seal-only", help="Only seal deployments already made by prefect deploy."),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Deploy every flow of prefect.yaml (PREFECT_API_URL) and seal their parameter schemas: a
    run with a parameter the flow does not take is then refused by Prefect (409)."""
    path = prefect_yaml.resolve()
    if path.is_dir():
        path = path / "prefect.yaml"
    if not path.is_file():
        fail("no prefect.yaml", f"{path} does not exist (--prefect-yaml / PROXIMA_HOME)")
    # Prefect is imported here, not with the CLI: it costs seconds that every other verb
    # (and the tests timing the quiet window through them) would pay.
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    from flows.deployments import seal_declared

    if not seal_only:
        _prefect_deploy(path)
    try:
        results = seal_declared(path)
    except ObjectNotFound as exc:
        fail("deployment not found", f"{exc}: run without --seal-only to deploy first")
    except (PrefectHTTPStatusError, httpx.HTTPError) as exc:
        fail("prefect api", str(exc).splitlines()[0])
    _print(results, as_json)


def _print(results: list[SealResult], as_json: bool) -> None:
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {"deployment": r.name, "sealed": r.changed, "parameters": list(r.parameters)}
                    for r in results
                ],
                indent=2,
            )
        )
        return
    rows = [
        (r.name, "sealed" if r.changed else "already sealed", ", ".join(r.parameters))
        for r in results
    ]
    stdout.print(table("Deployments", ("deployment", "schema", "parameters"), rows))
