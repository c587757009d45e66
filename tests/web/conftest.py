"""A real Console, real agents and Debian's headless Chromium driven by Playwright.

Every page a test opens is watched: a browser console error or an uncaught page error fails the
test. Screenshots land under the test run's temporary directory, and in docs/screenshots/ when
PROXIMA_UPDATE_SCREENSHOTS=1.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from testkit import REPO
from testkit.console import QUIET_ENV, ConsoleProcess

if os.environ.get("CI") or os.environ.get("PROXIMA_REQUIRE_BROWSER") == "1":
    import playwright.sync_api as playwright_sync  # CI must have it: fail loudly, never skip
else:
    playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = Path(os.environ.get("PROXIMA_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-first-run",
    "--no-default-browser-check",
    "--metrics-recording-only",
    "--mute-audio",
]
LAPTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS_DOC = REPO / "docs" / "screenshots"

CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not CHROMIUM.exists():
        if os.environ.get("CI") or os.environ.get("PROXIMA_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install -y chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium)")
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


@pytest.fixture
def web_console(console_factory) -> ConsoleProcess:  # type: ignore[no-untyped-def]
    """A Console with the suite's short quiet window (release refused, then allowed, quickly)."""
    return console_factory(env={**QUIET_ENV, "PROXIMA_ROTATION_TIMEOUT_SECONDS": "10"})


@dataclass
class Ui:
    """One signed-in browser tab on the Console, watched for console errors."""

    page: object
    console: ConsoleProcess
    shots: Path
    errors: list[str] = field(default_factory=list)
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def goto(self, path: str) -> object:
        return self.page.goto(self.console.url + path)  # type: ignore[attr-defined]

    def expect_failed_load(self, status: int) -> None:
        """The next page is an error page on purpose: Chromium logs its status; accept that."""
        self.allowed.append(re.compile(rf"status of {status}\b"))

    def shot(self, name: str, focus: str | None = None) -> None:
        """The page at laptop width, then at phone width (the layout must hold at both), from
        the top or from the ``focus`` element."""
        page = self.page
        for label, size in (("laptop", LAPTOP), ("phone", PHONE)):
            page.set_viewport_size(size)  # type: ignore[attr-defined]
            page.evaluate(  # type: ignore[attr-defined]
                "sel => sel ? document.querySelector(sel).scrollIntoView({block: 'start'})"
                " : window.scrollTo(0, 0)",
                focus,
            )
            path = self.shots / f"{name}-{label}.png"
            page.screenshot(path=str(path), animations="disabled")  # type: ignore[attr-defined]
            width = page.evaluate("document.documentElement.scrollWidth")  # type: ignore[attr-defined]
            assert width <= size["width"] + 1, f"{name} scrolls sideways at {label} width ({width})"
            if os.environ.get("PROXIMA_UPDATE_SCREENSHOTS") == "1":
                SCREENSHOTS_DOC.mkdir(parents=True, exist_ok=True)
                shutil.copy(path, SCREENSHOTS_DOC / path.name)
        page.set_viewport_size(LAPTOP)  # type: ignore[attr-defined]

    def csrf(self) -> str:
        match = CSRF.search(self.page.content())  # type: ignore[attr-defined]
        assert match, "no CSRF token on the page"
        return match.group(1)

    def cookies(self) -> dict[str, str]:
        jar = self.page.context.cookies()  # type: ignore[attr-defined]
        return {c["name"]: c["value"] for c in jar}

    def http(self) -> httpx.Client:
        """An HTTP client holding this tab's session cookie (for requests a page cannot make)."""
        return httpx.Client(base_url=self.console.url, cookies=self.cookies(), timeout=30)

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(p.search(e) for p in self.allowed)]


@pytest.fixture
def ui(browser, screenshot_dir: Path) -> Iterator[Callable[..., Ui]]:  # type: ignore[no-untyped-def]
    opened: list[tuple[object, Ui]] = []

    def open_ui(console: ConsoleProcess, token: str | None = None, *, sign_in: bool = True) -> Ui:
        context = browser.new_context(viewport=LAPTOP, device_scale_factor=1)
        context.grant_permissions(["clipboard-read", "clipboard-write"], origin=console.url)
        page = context.new_page()
        view = Ui(page=page, console=console, shots=screenshot_dir)
        page.on(
            "console",
            lambda msg: (
                view.errors.append(f"console {msg.type}: {msg.text}")
                if msg.type == "error"
                else None
            ),
        )
        page.on("pageerror", lambda exc: view.errors.append(f"page error: {exc}"))
        opened.append((context, view))
        if sign_in:
            view.goto("/sign-in")
            page.fill("#token", token or console.token)
            page.click("button[type=submit]")
            page.wait_for_url(re.compile(r"/(clusters|agents|rollouts|tokens)"))
        return view

    yield open_ui
    problems = []
    for context, view in opened:
        problems += view.unexpected_errors()
        context.close()  # type: ignore[attr-defined]
    assert not problems, "browser console errors:\n" + "\n".join(problems)
