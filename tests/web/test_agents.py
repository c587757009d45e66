"""The fleet pages: filters and flags, and the identity actions with the API's refusals."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from datetime import UTC, datetime

import nats
from playwright.sync_api import expect

from contracts import subjects
from testkit.console import QUIET_SECONDS, Identity
from testkit.swarm import Swarm
from testkit.waiting import wait_for


def test_release_is_refused_while_the_agent_is_live_and_allowed_once_it_is_quiet(
    web_console, ui, agents
):
    live = agents(web_console, "host-web-1", web_console.install_token())
    live.wait_ready()
    agent_id = live.agent_id()
    wait_for(lambda: web_console.agent(agent_id)["status"] == "online", what="online")
    view = ui(web_console)
    page = view.page
    view.goto(f"/agents/{agent_id}")
    page.get_by_role("link", name="Release identity", exact=True).click()
    expect(page.locator("h1")).to_have_text("Release identity: host-web-1?")
    view.shot("agent-confirm")
    page.get_by_role("button", name="Yes, release identity").click()
    page.wait_for_url(re.compile(rf"/agents/{agent_id}$"))
    refusal = page.locator(".flash-error")
    expect(refusal.locator("code.reason")).to_have_text("agent_recently_seen")
    message = refusal.locator(".flash-message").inner_text()
    assert re.fullmatch(
        rf"agent {agent_id} was seen \d+ s ago, within the {QUIET_SECONDS:g} s quiet window: "
        r"a live agent's name is never freed underneath it",
        message,
    ), message
    view.shot("agent-refused")
    assert web_console.agent(agent_id)["status"] == "online"

    page.get_by_role("link", name="Rotate credentials", exact=True).click()
    page.get_by_role("button", name="Yes, rotate credentials").click()
    expect(page.locator(".flash-ok")).to_contain_text("Credentials rotated")
    expect(page.locator(".history")).to_contain_text("credentials_rotated")

    live.stop()
    wait_for(
        lambda: web_console.agent(agent_id)["seconds_since_seen"] > QUIET_SECONDS + 0.3,
        what="quiet past the window",
    )
    page.get_by_role("link", name="Release identity", exact=True).click()
    page.get_by_role("button", name="Yes, release identity").click()
    expect(page.locator(".flash-ok")).to_contain_text(
        "Identity of host-web-1 released: its next enrollment re-binds it."
    )
    expect(page.locator("h1 .badge")).to_have_text("released")
    expect(page.locator(".history")).to_contain_text("identity released by api token 'admin'")
    view.shot("agent")
    assert web_console.agent(agent_id)["status"] == "released"


class SecondProcess:
    """Another process heartbeating on a live identity (another instance id and version), the
    way two agents on one data directory do, until stopped."""

    def __init__(self, nats_url: str, ident: Identity, agent_id: str) -> None:
        self.nats_url, self.ident, self.agent_id = nats_url, ident, agent_id
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        nc = await nats.connect(self.nats_url, **self.ident.nats_options())
        try:
            while not self.stopping.is_set():
                body = {
                    "agent_id": self.agent_id,
                    "instance_id": "second-process",
                    "agent_type": "host",
                    "version": "0.7.9",
                    "sent_at": datetime.now(UTC).isoformat(),
                    "uptime_seconds": 1.0,
                    "heartbeat_interval_seconds": 0.5,
                }
                await nc.publish(subjects.heartbeat(self.agent_id), json.dumps(body).encode())
                await nc.flush()
                await asyncio.sleep(0.35)
        finally:
            await nc.close()

    def __enter__(self) -> SecondProcess:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)


def test_the_fleet_list_filters_and_flags_shared_identities_and_409s(web_console, ui):
    swarm = Swarm(web_console, 4, prefix="web", heartbeat_seconds=0.5).start()
    try:
        wait_for(
            lambda: all(web_console.agent(a.agent_id)["status"] == "online" for a in swarm.agents),
            what="swarm online",
        )
        node = Identity(name="node-9", agent_type="k8s-node-monitor")
        node.enroll(web_console, web_console.install_token(), version="0.7.1")
        clash = Identity(name="web-00000").enroll(web_console, web_console.install_token())
        assert clash.status_code == 409 and clash.json()["reason"] == "name_in_use"
        shared = swarm.agents[1]
        with SecondProcess(web_console.nats_url, shared.ident, shared.agent_id):
            wait_for(
                lambda: "shared_identity" in web_console.agent(shared.agent_id)["flags"],
                what="shared identity flagged",
            )
            _check_the_fleet_pages(web_console, ui)
    finally:
        swarm.stop()


def _check_the_fleet_pages(web_console, ui) -> None:
    view = ui(web_console)
    page = view.page
    view.goto("/agents")
    rows = page.locator("#agents-table tbody tr")
    expect(rows).to_have_count(5)
    conflict = page.locator('tr[data-agent="web-00000"]')
    expect(conflict.locator(".badge-enrollment_conflict")).to_be_visible()
    expect(conflict).to_contain_text("409 name_in_use \u00d71")
    expect(page.locator('tr[data-agent="web-00001"] .badge-shared_identity')).to_be_visible()
    view.shot("agents")

    page.select_option("#f-flag", "shared_identity")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("web-00001")
    page.get_by_role("link", name="Clear").click()
    page.select_option("#f-type", "k8s-node-monitor")
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("node-9")
    view.goto("/agents?version=0.7.1")
    expect(rows).to_have_count(1)
    assert page.locator("#f-version").input_value() == "0.7.1"
    view.goto("/agents?name=web-0000&agent_type=host&status=offline")
    expect(page.locator(".empty")).to_contain_text("No agent matches these filters")

    view.goto("/agents")
    page.locator("tr", has_text="web-00001").get_by_role("link").click()
    expect(page.locator("#flags-heading")).to_be_visible()
    expect(page.locator("main")).to_contain_text("Two processes heartbeat as this identity")
