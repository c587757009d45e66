"""A stop is never lost in a timed wait (found by the command round-trip benchmark, which hung).

On Python 3.11 ``asyncio.wait_for(event.wait(), t)`` swallows a cancellation that arrives in the
same turn of the loop as the event being set: it returns the event's result instead of raising,
and a loop around it carries on, so whoever cancelled it (a stop) waits for ever. The code waits
with ``async with asyncio.timeout(t): await event.wait()``, which delivers the cancellation.
"""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest

from agent.heartbeat import Ticker

ROOT = Path(__file__).resolve().parents[2]


def _timed_event_waits(path: Path) -> list[str]:
    """``asyncio.wait_for(<x>.wait(), …)`` calls: a timed wait on an event or a condition."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "wait_for"
            and node.args
            and isinstance(node.args[0], ast.Call)
            and isinstance(node.args[0].func, ast.Attribute)
            and node.args[0].func.attr == "wait"
            and not node.args[0].args
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_product_code_waits_on_an_event_with_wait_for() -> None:
    found = [
        hit
        for package in ("agent", "console", "flows", "contracts", "rollout_policy")
        for path in sorted((ROOT / package).rglob("*.py"))
        for hit in _timed_event_waits(path)
    ]
    assert found == []


@pytest.mark.asyncio
async def test_a_ticker_cancelled_as_it_is_kicked_is_cancelled() -> None:
    ticker = Ticker(interval=30.0)
    waiting = asyncio.create_task(ticker.wait())
    await asyncio.sleep(0)  # the task is now inside its timed wait
    ticker.kick()
    waiting.cancel()  # same turn of the loop as the kick: wait_for returned here on 3.11
    with pytest.raises(asyncio.CancelledError):
        await waiting
