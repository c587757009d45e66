"""Put the web UI on the Console's app: routers, ``/static``, the session store, templates."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from console.runtime import ConsoleRuntime
from console.web.deps import WebState
from console.web.routes import agents, auth, clusters, rollouts, tokens
from console.web.sessions import SessionStore
from console.web.templating import Templates
from contracts import VERSION

CONSOLE_DIR = Path(__file__).resolve().parent.parent
TEMPLATES_DIR = CONSOLE_DIR / "templates"
STATIC_DIR = CONSOLE_DIR / "static"


def mount(app: FastAPI, runtime: ConsoleRuntime) -> None:
    app.state.web = WebState(
        store=SessionStore(runtime.units, runtime.settings),
        templates=Templates(TEMPLATES_DIR, static_version=VERSION),
    )
    for module in (auth, clusters, agents, rollouts, tokens):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
