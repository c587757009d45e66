"""``proxima-fleet builds``: upload signed agent builds to the Console and list them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from contracts.vocabulary import ErrorReason
from flows.cli._common import JsonOption, console_client, emit_json, fail, stdout, table

app = typer.Typer(help="Agent builds the Console hosts (signed offline, checked on upload).")


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(help="The agent program (.pyz).")],
    version: Annotated[str, typer.Option(help="The version stamped inside the build.")],
    signature: Annotated[
        str, typer.Option(help="base64url ed25519 over the file's SHA-256 digest.")
    ],
    as_json: JsonOption = False,
) -> None:
    """Host a build: checked against PROXIMA_SIGNING_PUBLIC_KEYS and its stamped version."""
    try:
        content = file.read_bytes()
    except OSError as exc:
        fail(ErrorReason.INVALID_REQUEST, f"cannot read {file}: {exc.strerror}")
    with console_client() as client:
        ref = client.upload_artifact(version, signature, content)
    if as_json:
        emit_json(ref)
    else:
        stdout.print(f"build {ref.version}: {ref.url} (sha256 {ref.sha256})")


@app.command("list")
def list_builds(as_json: JsonOption = False) -> None:
    """The builds this Console hosts, newest first."""
    with console_client() as client:
        builds = client.artifacts()
    if as_json:
        emit_json(builds)
        return
    rows = [(b.version, b.sha256, b.url) for b in builds]
    stdout.print(table(f"{len(builds)} builds", ("version", "sha256", "url"), rows))
