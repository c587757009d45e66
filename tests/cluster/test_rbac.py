"""What the chart's ServiceAccounts may do, asked of the real RBAC
authorizer with ``kubectl auth can-i --list --as=system:serviceaccount:…``, equals the table in
docs/chart.md ("What the ServiceAccounts can do")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testkit import REPO
from testkit.chart import RELEASE
from testkit.cluster_cli import CanI, ClusterCli

pytestmark = pytest.mark.timeout(600)

DOCS = REPO / "docs" / "chart.md"
ACCOUNTS = {"node agent": f"{RELEASE}-node-agent", "cluster agent": f"{RELEASE}-cluster-agent"}
READS = {"get", "list", "watch"}


def documented_rows() -> dict[str, set[CanI]]:
    """The docs table, by ServiceAccount; ``<lease>`` stands for the release's Lease name."""
    text = DOCS.read_text()
    section = text.split("### What the ServiceAccounts can do", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[CanI]] = {name: set() for name in ACCOUNTS}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] not in ACCOUNTS:
            continue
        account, resource, names, verbs = cells
        rows[account].add(
            CanI(
                resource.strip("`"),
                tuple(
                    re.findall(r"`([^`]+)`", names.replace("<lease>", f"{RELEASE}-cluster-agent"))
                ),
                tuple(sorted(re.findall(r"`([^`]+)`", verbs))),
            )
        )
    assert all(rows.values()), f"no table rows found in {DOCS}"
    return rows


def granted(cli: ClusterCli, namespace: str, account: str) -> set[CanI]:
    """What ``account`` may do in ``namespace`` beyond what any ServiceAccount may do."""

    def rows(user: str) -> set[CanI]:
        return {
            CanI(r.resource, r.resource_names, tuple(sorted(r.verbs)))
            for r in cli.can_i_list(user, namespace)
        }

    anyone = rows(f"system:serviceaccount:{namespace}:nobody")
    return rows(f"system:serviceaccount:{namespace}:{account}") - anyone


@pytest.fixture
def installed(cluster_cli: ClusterCli, ci_values: dict[str, Path], namespace: str) -> str:
    cluster_cli.install(namespace, "-f", str(ci_values["quick-start"]), wait=False)
    return namespace


@pytest.mark.parametrize("who", list(ACCOUNTS))
def test_can_i_list_equals_the_table_in_the_docs(
    cluster_cli: ClusterCli, installed: str, who: str
) -> None:
    assert granted(cluster_cli, installed, ACCOUNTS[who]) == documented_rows()[who]


def test_the_cluster_agent_reads_no_secret_or_configmap_and_writes_only_its_lease_and_events(
    cluster_cli: ClusterCli, installed: str
) -> None:
    rows = granted(cluster_cli, installed, ACCOUNTS["cluster agent"])
    assert not [r for r in rows if r.resource.split(".")[0] in {"secrets", "configmaps"}]
    writes = {r for r in rows if set(r.verbs) - READS}
    assert writes == {
        CanI("events", (), ("create", "patch")),
        CanI("leases.coordination.k8s.io", (), ("create",)),
        CanI("leases.coordination.k8s.io", (f"{RELEASE}-cluster-agent",), ("get", "update")),
    }
    user = f"--as=system:serviceaccount:{installed}:{ACCOUNTS['cluster agent']}"
    for verb, what in [
        ("update", f"leases/{RELEASE}-cluster-agent"),
        ("update", "leases/kube-controller-manager"),
        ("get", "secrets"),
        ("list", "configmaps"),
        ("delete", "pods"),
        ("patch", "nodes"),
    ]:
        answer = cluster_cli.kubectl(
            "auth", "can-i", verb, what, user, "-n", installed, check=False
        ).stdout.strip()
        expected = "yes" if what == f"leases/{RELEASE}-cluster-agent" else "no"
        assert answer == expected, f"can-i {verb} {what}: {answer}"


def test_the_lease_role_holds_only_in_the_release_namespace(
    cluster_cli: ClusterCli, installed: str
) -> None:
    elsewhere = cluster_cli.can_i_list(
        f"system:serviceaccount:{installed}:{ACCOUNTS['cluster agent']}", "default"
    )
    assert not [r for r in elsewhere if r.resource.startswith(("leases", "events"))]
