"""Integers past the database's range: ``offset`` or ``wave`` past 2^63 made the API and the
web pages answer 500 (the driver's overflow). Every integer a request hands to SQL is bounded
by ``contracts.bounds.MAX_SQL_INT`` and answered 422 past it, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contracts.bounds import MAX_SQL_INT
from testkit.console import ConsoleProcess
from testkit.rollouts import create_rollout
from testkit.signing_in import browser, signed_in

HUGE = [2**63, 2**64, 10**30]


def integer_parameters(spec: dict[str, Any]) -> list[tuple[str, str, str, str, dict]]:
    """(method, path, where, name, schema) of every integer parameter the API declares."""
    found = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            for p in op.get("parameters", []):
                schemas = [p["schema"], *p["schema"].get("anyOf", [])]
                for schema in schemas:
                    if schema.get("type") == "integer":
                        found.append((method, path, p["in"], p["name"], schema))
    return found


def test_every_integer_parameter_is_bounded_by_the_databases_range(console: ConsoleProcess):
    spec = httpx.get(f"{console.url}/openapi.json").json()
    params = integer_parameters(spec)
    assert {name for *_, name, _s in params} >= {"offset", "wave", "limit"}
    unbounded = [(m, p, n) for m, p, _w, n, s in params if s.get("maximum", 2**64) > MAX_SQL_INT]
    assert not unbounded


@pytest.mark.parametrize("huge", HUGE, ids=["2^63", "2^64", "10^30"])
def test_an_integer_past_the_databases_range_is_a_422_not_a_500(console: ConsoleProcess, huge: int):
    """Every integer query and path parameter of the API, sent past 2^63."""
    rollout = create_rollout(console, "bounds")
    with console.client() as c:
        cluster = c.post("/api/v1/clusters", json={"name": "bounds"}).json()
    fill = {"rollout_id": rollout["id"], "slug": cluster["slug"]}
    spec = httpx.get(f"{console.url}/openapi.json").json()
    answers = {}
    with console.client() as c:
        for method, path, where, name, _schema in integer_parameters(spec):
            values = {**fill, name: huge} if where == "path" else fill
            url = path.format_map({k: values.get(k, "x") for k in _names(path)})
            params = {name: str(huge)} if where == "query" else None
            answers[(method, path, name)] = c.request(method, url, params=params).status_code
    assert answers and set(answers.values()) == {422}, answers


def _names(path: str) -> list[str]:
    return [part[1:-1] for part in path.split("/") if part.startswith("{")]


def test_the_agents_page_answers_an_offset_past_the_range_with_a_422(console: ConsoleProcess):
    with browser(console.url) as b:
        signed_in(b, console.token)
        assert b.get("/agents", params={"offset": "9"}).status_code == 200
        answer = b.get("/agents", params={"offset": str(2**63)})
    assert answer.status_code == 422, answer.text[:300]
