"""Web sessions, attacked on real Consoles: a flood of sign-ins by one tenant never signs out
another tenant's user; sessions survive a restart and work on every replica of one database;
signing out ends the session everywhere."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlmodel import Session, col, select

from console.core.db import make_engine
from console.core.settings import ConsoleSettings
from console.models import WebSession
from testkit.console import ConsoleProcess
from testkit.fixtures import ConsoleFactory
from testkit.signing_in import browser, page_status, signed_in

PER_TOKEN = 10
FLOOD = 400
NO_RATE_LIMIT = {
    "PROXIMA_SIGN_IN_RATE_PER_SOURCE": "1000000/minute",
    "PROXIMA_SIGN_IN_RATE_PER_TOKEN": "1000000/minute",
}


def database_url(console: ConsoleProcess) -> str:
    return (
        console.env.get("PROXIMA_DATABASE_URL")
        or ConsoleSettings(data_dir=console.data_dir).resolved_database_url()
    )


def session_rows(console: ConsoleProcess) -> list[WebSession]:
    engine = make_engine(database_url(console))
    try:
        with Session(engine) as s:
            return list(s.exec(select(WebSession).order_by(col(WebSession.created_at))).all())
    finally:
        engine.dispose()


def test_a_flood_of_sign_ins_by_one_tenant_never_signs_out_another_tenants_user(
    console_factory: ConsoleFactory,
):
    console = console_factory(
        env={**NO_RATE_LIMIT, "PROXIMA_WEB_SESSIONS_PER_TOKEN": str(PER_TOKEN)}
    )
    with browser(console.url) as victim_browser:
        victim = signed_in(victim_browser, console.token)
    # The attacker: another tenant's token with the least scope that can sign in.
    other = console.bootstrap(client="mallory", environment="dev")
    attacker_token = console.api_token(["clusters:read"], token=other["token"])
    with browser(console.url) as b:
        first = signed_in(b, attacker_token)

    def flood(_: int) -> None:
        with browser(console.url) as b:
            for _ in range(FLOOD // 8):
                signed_in(b, attacker_token)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(flood, range(8)))

    assert page_status(console.url, victim) == 200, "the other tenant's user is still signed in"
    assert page_status(console.url, first) == 303, "the attacker's own oldest session went"
    # ... and the sign-in page says why, not just "sign in".
    ended = httpx.get(
        console.url + "/clusters", cookies={"proxima_session": first}, follow_redirects=True
    )
    assert "reason=session_ended" in str(ended.url)
    assert "newer sign-ins with the same API token ended it" in ended.text
    rows = session_rows(console)
    assert len(rows) == PER_TOKEN + 1, "the attacker holds at most the bound"
    assert victim not in {r.id for r in rows}, "rows are named by the cookie's hash"


def test_a_session_survives_a_console_restart(console_factory: ConsoleFactory):
    console = console_factory()
    with browser(console.url) as b:
        cookie = signed_in(b, console.token)
    console.stop()
    console.start()
    assert page_status(console.url, cookie) == 200


def test_a_session_made_on_one_replica_works_on_another_and_signing_out_ends_it_on_both(
    console_factory: ConsoleFactory,
):
    a = console_factory("a")
    b = ConsoleProcess(a.data_dir.parent / "b", database_url=database_url(a))
    b.token = a.token  # the same database: bootstrapped once
    b.start()
    try:
        with browser(a.url) as on_a:
            cookie = signed_in(on_a, a.token)
        assert page_status(b.url, cookie) == 200, "replica B knows replica A's session"
        with browser(b.url) as on_b:
            on_b.cookies.set("proxima_session", cookie)
            page = on_b.get("/clusters")
            csrf = page.text.split('name="csrf_token" value="', 1)[1].split('"', 1)[0]
            out = on_b.post("/sign-out", data={"csrf_token": csrf})
            assert out.status_code == 303 and "signed_out" in out.headers["location"]
        assert page_status(a.url, cookie) == 303, "signed out on B: gone on A too"
        assert session_rows(a) == [], "signing out deleted the row"
    finally:
        b.stop()
