"""A rollout started from the page stalls on its canary's failure, is watched live, and is
resumed from the page. The test plays the fleet-rollout flow's part through the API (start,
dispatch each wave, complete); simulated agents on real NATS connections answer."""

from __future__ import annotations

import re
import threading

from playwright.sync_api import expect

from testkit.builds import build_agent, suite_signing_key
from testkit.swarm import Swarm
from testkit.waiting import wait_for

READ_ONLY_FS = (
    "backup current binary: rename /usr/local/bin/proxima-agent "
    "/usr/local/bin/proxima-agent.bak: read-only file system"
)


def _first_fails():
    lock, seen = threading.Lock(), []

    def behaviour(name, cmd):
        with lock:
            seen.append(name)
            first = len(seen) == 1
        if first:
            return "failed", READ_ONLY_FS, None
        return "succeeded", None, cmd["args"]["version"]

    return behaviour


def test_a_stalled_rollout_is_resumed_from_its_page(web_console, ui, tmp_path):
    # A real build signed with the suite's key: the Console hosts nothing else.
    key, _ = suite_signing_key(tmp_path / "keys")
    build = build_agent("0.9.0", tmp_path / "dist", key=key)
    with web_console.client() as api:
        hosted = api.put(
            "/api/v1/artifacts/0.9.0",
            params={"signature": build.signature},
            content=build.path.read_bytes(),
            headers={"content-type": "application/octet-stream"},
        )
        assert hosted.status_code == 201, hosted.text
    swarm = Swarm(web_console, 5, prefix="host", behaviour=_first_fails()).start()
    try:
        wait_for(
            lambda: all(web_console.agent(a.agent_id)["status"] == "online" for a in swarm.agents),
            what="swarm online",
        )
        view = ui(web_console)
        page = view.page
        view.goto("/rollouts")
        page.get_by_role("link", name="Start a rollout").click()
        page.fill("#r-name", "0.9.0 to hosts")
        # No PROXIMA_PUBLIC_URL: the hosted build's URL is this page's loopback address.
        expect(page.locator("#artifact-url-warning")).to_contain_text("PROXIMA_PUBLIC_URL")
        build = page.locator("#r-hosted option", has_text="0.9.0 · sha256")
        page.select_option("#r-hosted", build.get_attribute("value"))
        page.fill("#r-pct", "50, 100")
        page.select_option("#c0-type", "failed")
        page.fill("#c0-pct", "")
        page.fill("#c0-count", "1")
        page.fill("#r-timeout", "60")
        view.shot("rollout-new")
        page.get_by_role("button", name="Create rollout").click()
        page.wait_for_url(re.compile(r"/rollouts/[0-9a-f]{32}$"))
        rollout_id = page.url.rsplit("/", 1)[1]
        live = page.locator("#rollout-live")
        expect(live.locator("#state-heading .badge")).to_have_text("pending")
        expect(page.locator("ol.waves > li")).to_have_count(3)

        def api_post(path, **kw):
            with web_console.client() as api:
                r = api.post(f"/api/v1/fleet/rollouts/{rollout_id}{path}", **kw)
                assert r.status_code == 200, r.text
                return r.json()

        api_post("/start", json={})
        api_post("/waves/0/dispatch")
        expect(live.locator("#state-heading .badge")).to_have_text("stalled")
        expect(live.locator(".threshold")).to_contain_text("failed 1 of 1 executed")
        expect(live.locator("#targets")).to_contain_text("read-only file system")
        assert api_post("/waves/1/dispatch")["refused"] == "rollout is stalled"
        view.shot("rollout-stalled")

        live.get_by_role("button", name="Resume").click()
        expect(page.locator(".flash-ok")).to_have_text("Rollout 0.9.0 to hosts is running.")
        expect(live.locator("#state-heading .badge")).to_have_text("running")
        for wave in (1, 2):
            api_post(f"/waves/{wave}/dispatch")
            expect(page.locator("ol.waves > li").nth(wave)).to_have_class(re.compile("wave-done"))
        # The canary's wave finished with its only agent failed: not drawn as done.
        expect(page.locator("ol.waves > li").nth(0)).to_have_class(re.compile("wave-failed"))
        api_post("/complete")
        expect(live.locator("#state-heading .badge")).to_have_text("succeeded")
        expect(live.locator("#ended-with-failures")).to_have_text("with 1 agent not updated")
        expect(live.locator("[data-live-final]")).to_have_count(1)
        expect(live.locator(".counts").first).to_contain_text("succeeded 4")
        view.shot("rollout")
        view.goto("/rollouts")
        expect(page.locator("tr", has_text="0.9.0 to hosts")).to_contain_text("succeeded")
        view.shot("rollouts")
    finally:
        swarm.stop()


def test_abort_and_refusals_on_the_rollout_page(web_console, ui):
    swarm = Swarm(web_console, 2, prefix="abort").start()
    try:
        view = ui(web_console)
        page = view.page
        view.goto("/rollouts/new")
        page.click("#src-reference")
        page.fill("#r-version", "0.9.1")
        page.fill("#r-url", "http://127.0.0.1:1/a.pyz")
        page.fill("#r-sha", "not-hex")
        page.fill("#r-sig", "s" * 86)
        page.fill("#r-labels", "tier")
        page.fill("#r-pct", "50, 150")
        page.get_by_role("button", name="Create rollout").click()
        # Every refusal at once, each beside its field, not the first at the top.
        expect(page.locator("#rollout-errors")).to_contain_text("3 fields to correct")
        expect(page.locator("#r-sha-error")).to_contain_text("pattern")
        expect(page.locator("#r-labels-error")).to_contain_text("'tier' is not key=value")
        expect(page.locator("#r-pct-error")).to_contain_text("less than or equal to 100")
        for field in ("#r-sha", "#r-labels", "#r-pct"):
            expect(page.locator(field)).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#r-version")).not_to_have_attribute("aria-invalid", "true")
        expect(page.locator("#r-pct")).to_have_attribute("aria-describedby", "pct-help r-pct-error")
        expect(page.locator("#rollout-errors a", has_text="pattern")).to_have_attribute(
            "href", "#r-sha"
        )
        assert page.locator("#r-version").input_value() == "0.9.1"  # kept
        page.fill("#r-sha", "0" * 64)
        page.fill("#r-labels", "")
        page.fill("#r-pct", "50, 100")
        page.get_by_role("button", name="Create rollout").click()
        page.wait_for_url(re.compile(r"/rollouts/[0-9a-f]{32}$"))
        # No one-click abort: it asks for a reason, and records it with who gave it.
        page.locator("#abort-confirm summary").click()
        page.get_by_role("button", name="Abort this rollout").click()
        assert page.locator("#abort-reason").evaluate("e => !e.validity.valid")  # required
        page.fill("#abort-reason", "wrong build")
        page.get_by_role("button", name="Abort this rollout").click()
        expect(page.locator(".flash-ok")).to_contain_text("is aborted")
        expect(page.locator("#rollout-live [data-live-final]")).to_have_count(1)
        expect(page.locator("#abort-confirm")).to_have_count(0)
        expect(page.locator("#rollout-live")).to_contain_text("wrong build (by admin)")
        rollout_id = page.url.rsplit("/", 1)[1]
        with view.http() as http:
            r = http.post(f"/rollouts/{rollout_id}/resume", data={"csrf_token": view.csrf()})
            assert r.status_code == 303
        view.goto(f"/rollouts/{rollout_id}")
        expect(page.locator(".flash-error code.reason")).to_have_text("illegal_transition")
    finally:
        swarm.stop()
