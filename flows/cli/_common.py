"""What every ``proxima-fleet`` verb shares: the Console client, the one error line, and the
choice between the Console's JSON (``--json``) and a rich table for people."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Annotated, NoReturn

import httpx
import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from contracts.cli_errors import EXIT_FAILURE, EXIT_USAGE, error
from flows.console_client import ConsoleApiError, ConsoleClient
from flows.settings import FlowSettings

JsonOption = Annotated[
    bool, typer.Option("--json", help="Print the Console's answer as JSON (for scripts).")
]

stdout = Console(highlight=False, soft_wrap=False)


PROGRAM = "proxima-fleet"
EXIT_CONFIG = EXIT_USAGE
"""A missing or bad setting (PREFECT_API_URL, PROXIMA_HOME): exit status 2."""


def fail(reason: str, message: str, *, code: int = EXIT_FAILURE) -> NoReturn:
    """``proxima-fleet: error: <reason>: <message>`` on stderr; exit status 1 (a failure or a
    refusal) or ``EXIT_CONFIG`` (2: a missing or bad setting), the table of
    ``contracts.cli_errors``."""
    error(PROGRAM, f"{reason}: {message}", code)


@contextmanager
def console_client() -> Iterator[ConsoleClient]:
    """A client of the Console PROXIMA_CONSOLE_URL names, acting with PROXIMA_CONSOLE_TOKEN;
    the Console's refusals and an unreachable Console end the command with one error line."""
    settings = FlowSettings()
    url = settings.console_url
    try:
        with ConsoleClient(settings) as client:
            yield client
    except ConsoleApiError as exc:
        fail(str(exc.reason), exc.message)
    except httpx.ConnectError as exc:
        fail(
            "connection refused",
            f"cannot reach the Console at {url} ({exc}); is it running, "
            "and does PROXIMA_CONSOLE_URL name it?",
        )
    except httpx.TimeoutException:
        fail(
            "timeout",
            f"the Console at {url} did not answer within {settings.console_timeout_seconds:g} s "
            "(PROXIMA_CONSOLE_TIMEOUT_SECONDS)",
        )
    except httpx.HTTPError as exc:
        fail("http error", f"{url}: {exc}")


def emit_json(data: BaseModel | Sequence[BaseModel]) -> None:
    if isinstance(data, BaseModel):
        typer.echo(data.model_dump_json(indent=2))
    else:
        typer.echo(json.dumps([item.model_dump(mode="json") for item in data], indent=2))


def table(title: str | None, columns: Iterable[str], rows: Iterable[Iterable[object]]) -> Table:
    t = Table(title=title, title_justify="left")
    for column in columns:
        t.add_column(column, overflow="fold")
    for row in rows:
        t.add_row(*(text(cell) for cell in row))
    return t


def fields(title: str, pairs: Iterable[tuple[str, object]]) -> Table:
    """A two-column table: one record's fields."""
    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for name, value in pairs:
        t.add_row(name, text(value))
    return t


def text(value: object) -> str:
    if value is None or value == "" or value == [] or value == {}:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return ", ".join(str(v) for v in value)
    return str(value)
