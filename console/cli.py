"""``proxima-console``: serve, bootstrap, migrate, nats-config."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Annotated, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from sqlmodel import Session

from console.core.settings import ConsoleSettings
from contracts.cli_errors import EXIT_FAILURE, EXIT_USAGE, error, warning
from contracts.cli_errors import run as run_cli
from contracts.settings_env import describe_invalid, misspelt, variable_names

PROGRAM = "proxima-console"

app = typer.Typer(
    help="The Proxima Console backend. Settings are PROXIMA_* environment variables "
    "(see docs/console.md); flags override them.",
    no_args_is_help=True,
)


def _settings(**overrides: object) -> ConsoleSettings:
    """The settings, or one line naming each bad variable; a warning line for each variable
    that looks like a misspelt setting."""
    try:
        settings = ConsoleSettings()
    except ValidationError as exc:
        _fail(f"invalid settings: {describe_invalid(exc)}", EXIT_USAGE)
    for variable, meant in misspelt(os.environ, variable_names(ConsoleSettings)):
        warning(
            PROGRAM,
            f"{variable} is not a setting of proxima-console and is ignored; did you mean {meant}?",
        )
    updates = {k: v for k, v in overrides.items() if v is not None}
    return settings.model_copy(update=updates) if updates else settings


def _fail(message: str, code: int = EXIT_FAILURE) -> NoReturn:
    """``proxima-console: error: <message>`` (SQLAlchemy's background link dropped), the
    exit status of ``contracts.cli_errors``' table."""
    lines = [ln for ln in message.splitlines() if not ln.strip().startswith("(Background on")]
    error(PROGRAM, "\n".join(lines), code)


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [PROXIMA_HOST]")] = None,
    port: Annotated[int | None, typer.Option(help="Port [PROXIMA_PORT]")] = None,
) -> None:
    """Run the API (and, unless PROXIMA_NATS_URL is set, an embedded nats-server)."""
    import uvicorn

    from console.app import create_app
    from console.core.logs import OneLineStartupFailure, configure

    settings = _settings(host=host, port=port)
    configure(settings.log_level, settings.log_format)
    startup = OneLineStartupFailure()
    logging.getLogger("uvicorn.error").addFilter(startup)
    if not settings.public_url:
        logging.getLogger("console").warning(
            "PROXIMA_PUBLIC_URL is not set: the onboarding wizard's backendUrl and hosted build "
            "URLs use the address each request came in on; set it to the URL agents reach this "
            "Console at"
        )
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            # The app trusts forwarding headers only from PROXIMA_TRUSTED_PROXIES (console.app);
            # uvicorn's own default would trust them from 127.0.0.1 (FORWARDED_ALLOW_IPS).
            proxy_headers=False,
        )
    except SystemExit as exc:  # uvicorn's "startup failed" (3), after logging the reason
        if exc.code:
            why = startup.reason or "the reason is logged above"
            _fail(f"startup failed: {why}", exc.code if isinstance(exc.code, int) else 1)
        raise
    except Exception as exc:
        _fail(str(exc))


@app.command()
def migrate() -> None:
    """Apply database migrations up to the newest revision."""
    from console.core.db import migrate as run

    settings = _settings()
    try:
        run(settings.resolved_database_url(), data_dir=settings.data_dir)
    except Exception as exc:
        _fail(f"migration failed: {exc}")
    print("database is at the newest revision")


@app.command()
def bootstrap(
    client: Annotated[
        str, typer.Option(envvar="PROXIMA_BOOTSTRAP_CLIENT", help="Client name")
    ] = "default",
    environment: Annotated[
        str, typer.Option(envvar="PROXIMA_BOOTSTRAP_ENVIRONMENT", help="Environment name")
    ] = "production",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Create a client, an environment and an admin API token (applying migrations first)."""
    from console.bootstrap import bootstrap as run
    from console.core.db import make_engine
    from console.core.db import migrate as run_migrations

    settings = _settings()
    url = settings.resolved_database_url()
    try:
        run_migrations(url)
        engine = make_engine(url)
        with Session(engine) as session:
            result = run(session, client_name=client, environment_name=environment)
        engine.dispose()
    except Exception as exc:
        _fail(f"bootstrap failed: {exc}")
        return
    if result.existed:
        warning(
            PROGRAM,
            f"{result.client_name} / {result.environment_name} existed already: this minted "
            "one more admin token; the earlier ones stay valid (list them: GET "
            "/api/v1/api-tokens; revoke: POST /api/v1/api-tokens/<id>/revoke)",
        )
    if as_json:
        print(json.dumps(dataclasses.asdict(result)))
        return
    table = Table(title="Proxima Console bootstrap", show_header=False)
    table.add_row("client", f"{result.client_name} ({result.client_id})")
    table.add_row("environment", f"{result.environment_name} ({result.environment_id})")
    table.add_row("admin API token", result.token)
    table.add_row("scopes", ", ".join(result.scopes))
    Console().print(table)
    Console(stderr=True).print("[yellow]The token is shown once: store it now.[/yellow]")


@app.command("nats-config")
def nats_config(
    resolver_dir: Annotated[
        str, typer.Option(help="Where each server stores the account JWTs pushed to it")
    ] = "jwt",
) -> None:
    """Print the NATS trust block every server includes (operator, system account, resolver).

    The same on every node and for every Console replica: the keys are held once, in the
    database (created here on first use; an older install's <data_dir>/nats-keys is imported).
    Account JWTs are pushed by the Console at runtime; nothing here changes afterwards."""
    from console.core.db import make_engine
    from console.core.db import migrate as run_migrations
    from console.services.nats_keys import load_authority

    settings = _settings()
    url = settings.resolved_database_url()
    try:
        run_migrations(url)
        engine = make_engine(url)
        authority = load_authority(engine, settings.data_dir / "nats-keys")
        engine.dispose()
    except Exception as exc:
        _fail(f"nats-config failed: {exc}")
        return
    print(authority.render_config(resolver_dir), end="")


def main() -> None:
    """Console-script entry point: one error line and the table's exit status for every
    failure, usage errors included (contracts.cli_errors)."""
    run_cli(app, PROGRAM)


if __name__ == "__main__":
    main()
