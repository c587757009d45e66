"""The suite's lanes: which machine-wide things a test needs, and which tests share one worker
when pytest-xdist runs the suite in parallel (``scripts/dev.py test`` runs ``-n``).

A pytest plugin (``tests/conftest.py`` loads it beside ``testkit.fixtures``):

- **Needs.** ``scripts/dev.py test <selection>`` collects the selection with
  ``PROXIMA_TEST_NEEDS=<file>`` set; this plugin writes there, as JSON, what the collected tests
  need beyond the venv (``control-plane``, ``release-tools``, ``chromium``, ``postgres``), and
  dev.py prepares only that.
- **Groups.** The tests of ``tests/cluster`` share one Kubernetes control plane, those of
  ``tests/release`` one registry and published image, and the release lane installs that image
  onto the same control plane: session resources too heavy to start on every worker. Under
  ``-n`` with ``--dist loadgroup`` (pyproject's addopts) the two directories are one work unit:
  their tests run on one worker, in order, against one instance of each, while every other test
  goes to whichever worker is free (they are safe to spread: free ports, ``tmp_path``, a
  PostgreSQL server and a Prefect test harness per worker). The grouping is done here, by path,
  in the scheduler: pytest-xdist 3.8's ``xdist_group`` marks are silently ignored under pytest
  9.2 (xdist rewrites a node id field pytest no longer reads). A test elsewhere that asks for one
  of these resources is refused at collection, so the path rule is the whole rule.
- **Homes.** Each worker gets a Prefect home of its own (``PREFECT_HOME``), so two harnesses never
  share a profile or local result storage.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

#: need -> (test directory, fixtures, marker): a test has the need if it lives in the directory,
#: asks for one of the fixtures (directly or through another fixture) or carries the marker.
NEEDS: dict[str, tuple[str | None, frozenset[str], str | None]] = {
    "control-plane": ("tests/cluster", frozenset({"kube_cluster"}), None),
    "release-tools": ("tests/release", frozenset({"oci_registry"}), None),
    "chromium": ("tests/web", frozenset({"browser"}), None),
    "postgres": (None, frozenset({"postgres"}), "postgres"),
}

#: the directories of the one xdist group (see "Groups" above), and its name
GROUP_DIRECTORIES = ("tests/cluster/", "tests/release/")
GROUP = "cluster-and-release"
#: the group's session resources: only tests in its directories may ask for them
GROUP_FIXTURES = ("kube_cluster", "oci_registry")


def group_of(nodeid: str) -> str | None:
    return GROUP if nodeid.startswith(GROUP_DIRECTORIES) else None


def needs_of(item: pytest.Item) -> set[str]:
    path = Path(str(item.path)).resolve()
    rootdir = Path(str(item.config.rootpath)).resolve()
    relative = path.relative_to(rootdir).as_posix() if path.is_relative_to(rootdir) else ""
    fixtures = set(getattr(item, "fixturenames", ()))
    found = set()
    for need, (directory, needs_fixtures, marker) in NEEDS.items():
        if (
            (directory and relative.startswith(directory + "/"))
            or fixtures & needs_fixtures
            or (marker and item.get_closest_marker(marker))
        ):
            found.add(need)
    return found


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and "PREFECT_HOME" not in os.environ:
        home = tempfile.mkdtemp(prefix=f"proxima-prefect-home-{worker}-")
        os.environ["PREFECT_HOME"] = home
        config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in GROUP_FIXTURES:
            if fixture in getattr(item, "fixturenames", ()) and not group_of(item.nodeid):
                raise pytest.UsageError(
                    f"{item.nodeid} uses {fixture}: tests that do live in "
                    f"{' or '.join(GROUP_DIRECTORIES)}, which a parallel run keeps on one worker "
                    "(testkit/lanes.py)"
                )


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup``: xdist's group scheduling, each directory of GROUPS one group."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class LaneScheduling(LoadGroupScheduling):  # type: ignore[misc]  # xdist: no types here
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid) or super()._split_scope(nodeid)

    return LaneScheduling(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    target = os.environ.get("PROXIMA_TEST_NEEDS")
    if not target:
        return
    needs = set().union(*(needs_of(item) for item in session.items))
    Path(target).write_text(json.dumps({"tests": len(session.items), "needs": sorted(needs)}))
