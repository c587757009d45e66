"""Health that tells the truth: /livez, /readyz with detail, /healthz kept compatible; a NATS
outage answers 503 ``nats_unavailable`` on /readyz and is logged once."""

import re

import httpx
import psutil

from testkit.waiting import wait_for


def test_a_healthy_console_is_live_and_ready_with_detail(console):
    live = httpx.get(f"{console.url}/livez", timeout=5)
    assert live.status_code == 200 and live.json()["status"] == "ok"
    ready = httpx.get(f"{console.url}/readyz", timeout=5)
    assert ready.status_code == 200, ready.text
    checks = ready.json()["checks"]
    assert checks["database"]["ok"] is True and checks["nats"]["ok"] is True
    assert "since" in checks["database"]
    legacy = httpx.get(f"{console.url}/healthz", timeout=5).json()
    assert legacy["status"] == "ok" and legacy["nats"] == console.nats_url
    assert legacy["ready"] is True and "version" in legacy


def test_a_dead_nats_server_makes_readyz_503_and_is_logged_once(console_factory):
    """Broke: with NATS down /healthz stayed 200 and said nothing."""
    console = console_factory()
    (server,) = [c for c in psutil.Process(console.process.pid).children() if "nats" in c.name()]
    server.kill()  # the Console does not reap it (nor restart it: not supervised yet)
    ready = wait_for(
        lambda: (r := httpx.get(f"{console.url}/readyz", timeout=5)).status_code == 503 and r,
        timeout=20,
        what="/readyz to say NATS is down",
    )
    body = ready.json()
    assert body["reason"] == "nats_unavailable"
    assert body["checks"] == {
        "database": body["checks"]["database"],
        "nats": {"ok": False, "problem": body["checks"]["nats"]["problem"]},
    }
    assert body["checks"]["database"]["ok"] is True
    assert httpx.get(f"{console.url}/livez", timeout=5).status_code == 200
    legacy = httpx.get(f"{console.url}/healthz", timeout=5)
    assert legacy.status_code == 200 and legacy.json()["ready"] is False
    for _ in range(3):
        httpx.get(f"{console.url}/readyz", timeout=5)
    log = console.log_path.read_text()
    assert len(re.findall(r"nats unavailable: ", log)) == 1, log[-3000:]
