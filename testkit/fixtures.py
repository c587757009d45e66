"""Every shared pytest fixture, as one plugin: ``tests/conftest.py`` loads it through
``pytest_plugins = ["testkit.fixtures"]``. A directory's ``conftest.py`` keeps only what no
other directory uses (the browser of ``tests/web``, for instance).

Groups: the databases and Consoles; the Prefect harness; the agent's nats-server, fake Console,
builds and processes; the Kubernetes API double; helm and kubectl; the Kubernetes agents' Console
and NATS observer; a real control plane (``tests/cluster``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import kubernetes.client
import pytest

from testkit.agents import AgentProcess
from testkit.builds import ArtifactServer, Builds, make_builds
from testkit.chart import CI_VALUES, RELEASE, Helm, load_tools
from testkit.chart_repos import RepoUsers
from testkit.cluster import ClusterStartError, KubeCluster
from testkit.cluster_cli import ClusterCli
from testkit.console import QUIET_ENV, ConsoleFactory, ConsoleProcess
from testkit.fake_console import FakeConsole
from testkit.k8s import MAX_PAYLOAD, NatsObserver
from testkit.kube import KubeApiDouble
from testkit.nats import NatsServer
from testkit.postgres import PostgresUnavailableError, ThrowawayPostgres
from testkit.release import OciRegistry, missing_tools

if TYPE_CHECKING:  # the Console's services load only for the tests that ask for them
    from testkit.services import InProcessConsole

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

# -- databases and Consoles ------------------------------------------------------------------------


@contextlib.contextmanager
def _throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    """A started cluster, stopped on exit. Where PROXIMA_REQUIRE_POSTGRES=1 (CI) its absence
    fails the test; elsewhere it skips it."""
    try:
        pg = ThrowawayPostgres()
        pg.start()
    except (PostgresUnavailableError, OSError) as exc:
        if os.environ.get("PROXIMA_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"the PostgreSQL lane could not start: {exc}")
        pytest.skip(f"PostgreSQL lane unavailable here: {exc}")
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture(scope="session")
def postgres() -> Iterator[ThrowawayPostgres]:
    """One throwaway cluster per run."""
    with _throwaway_postgres() as pg:
        yield pg


@pytest.fixture
def own_postgres() -> Iterator[ThrowawayPostgres]:
    """A cluster of the test's own, for tests that stop it (``halt``/``resume``), which the
    session's shared one must never see."""
    with _throwaway_postgres() as pg:
        yield pg


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'console.db'}"
    pg: ThrowawayPostgres = request.getfixturevalue("postgres")
    return pg.create_database()


@pytest.fixture
def console_factory(tmp_path: Path) -> Iterator[ConsoleFactory]:
    """``make(name="console", **ConsoleProcess kwargs)``: a started Console under
    ``tmp_path/name``, stopped after the test."""
    started: list[ConsoleProcess] = []

    def make(name: str = "console", **kwargs: Any) -> ConsoleProcess:
        proc = ConsoleProcess(tmp_path / name, **kwargs)
        started.append(proc)
        return proc.start()

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def console(console_factory: ConsoleFactory, database_url: str) -> ConsoleProcess:
    """A Console with a short quiet window, on SQLite and (postgres lane) PostgreSQL."""
    return console_factory(database_url=database_url, env=dict(QUIET_ENV))


@pytest.fixture(scope="session")
def prefect_api_url() -> Iterator[str]:
    """One Prefect test harness per test run (it takes ~15 s to start here)."""
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_API_URL
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        url = PREFECT_API_URL.value()
        assert url, "the harness did not set PREFECT_API_URL"
        yield str(url)


@pytest.fixture
def flow_console(
    console_factory: ConsoleFactory, prefect_api_url: str, monkeypatch: pytest.MonkeyPatch
) -> ConsoleProcess:
    """A Console that starts and resumes flow runs through the harness's Prefect API; the
    flows under test reach it through ``PROXIMA_CONSOLE_URL`` / ``PROXIMA_CONSOLE_TOKEN``."""
    console = console_factory(
        name="flow-console",
        env={"PROXIMA_PREFECT_API_URL": prefect_api_url, "PROXIMA_AGENT_STALE_SECONDS": "30"},
    )
    monkeypatch.setenv("PROXIMA_CONSOLE_URL", console.url)
    monkeypatch.setenv("PROXIMA_CONSOLE_TOKEN", console.worker_token())
    return console


# -- the Console's services in-process -------------------------------------------------------------


@pytest.fixture(scope="session")
def console_schema(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated once per run by the Console's Alembic migrations."""
    from testkit.services import migrated_template

    return migrated_template(tmp_path_factory.mktemp("console-schema"))


@pytest.fixture
def services(console_schema: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InProcessConsole]:
    """The Console's services on a real ``ServiceRuntime`` in this process: in-memory SQLite
    (``sqlite://``, a ``StaticPool``, the migrated schema copied in), a ``clock`` the test
    advances instead of sleeping, and ``effects``: what ran after commit (identity changes,
    command sends, Prefect start/resume), recorded instead of delivered.

    It does NOT exercise NATS (no server, no JWTs, nothing delivered), HTTP (no routes, status
    codes or auth headers: services raise ``console.errors``), nor threads at once (one call at
    a time on one shared connection), the ingester's batching, the sweeper's timer or
    PostgreSQL: ``tests/console`` and ``tests/e2e`` do. See ``testkit.services``."""
    from testkit.services import in_process_console

    with in_process_console(console_schema, monkeypatch.setattr) as console:
        yield console


# -- agents ----------------------------------------------------------------------------------------


@pytest.fixture
def agents(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    """``make(console, name, token, *, data=None, start=True, **AgentProcess kwargs)``: an agent
    of ``console`` enrolling with ``token``, its data in ``tmp_path/agents/<data or name>``;
    stopped after the test."""
    started: list[AgentProcess] = []

    def make(
        console: ConsoleProcess,
        name: str,
        token: str,
        *,
        data: str | None = None,
        start: bool = True,
        **kwargs: Any,
    ) -> AgentProcess:
        kwargs.setdefault("data_dir", tmp_path / "agents" / (data or name))
        kwargs.setdefault("backend_url", console.url)
        proc = AgentProcess(name=name, install_token=token, **kwargs)
        started.append(proc)
        return proc.start() if start else proc

    yield make
    for proc in started:
        proc.stop()


@pytest.fixture
def agent_processes() -> Iterator[list[AgentProcess]]:
    """Collects agent processes a test starts and stops them all at the end."""
    started: list[AgentProcess] = []
    try:
        yield started
    finally:
        for proc in started:
            proc.stop()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(workdir=tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake_console() -> Iterator[FakeConsole]:
    console = FakeConsole()
    console.start()
    try:
        yield console
    finally:
        console.stop()


@pytest.fixture(scope="session")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Builds:
    """0.8.0 and 0.9.0, and three broken 0.9.x builds, made once by the real build script."""
    return make_builds(tmp_path_factory.mktemp("builds"))


@pytest.fixture
def artifacts(builds: Builds) -> Iterator[ArtifactServer]:
    server = ArtifactServer(builds.dist)
    try:
        yield server
    finally:
        server.stop()


# -- the Kubernetes API double ---------------------------------------------------------------------


@pytest.fixture
def kube_api() -> Iterator[KubeApiDouble]:
    """A running double on a free 127.0.0.1 port, stopped after the test."""
    with KubeApiDouble() as double:
        yield double


@pytest.fixture
def kube_client(kube_api: KubeApiDouble) -> Iterator[kubernetes.client.ApiClient]:
    """An official-client ApiClient pointed at `kube_api` (its own Configuration, no globals)."""
    client = kube_api.api_client()
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call]


@pytest.fixture
def kube_kubeconfig(kube_api: KubeApiDouble, tmp_path: Path) -> Path:
    """A kubeconfig file for subprocesses: pass `kube_api.subprocess_env(path)` in their env."""
    return kube_api.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_env(kube_api: KubeApiDouble, tmp_path: Path) -> dict[str, str]:
    """What a collector process needs to reach the double (``KUBECONFIG`` …)."""
    path = kube_api.write_kubeconfig(tmp_path / "kubeconfig")
    return kube_api.subprocess_env(path)


# -- helm and kubectl, extracted by scripts/tools.py -----------------------------------------------


@pytest.fixture(scope="session")
def tools() -> ModuleType:
    """scripts/tools.py as a module."""
    return load_tools()


@pytest.fixture(scope="session")
def helm_binary(tools: Any) -> Path:
    return Path(tools.ensure_tool("helm").path)


@pytest.fixture(scope="session")
def kubectl_binary(tools: Any) -> Path:
    return Path(tools.ensure_tool("kubectl").path)


@pytest.fixture(scope="session")
def helm(helm_binary: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Helm v4 with an empty home: no repositories, no kubeconfig, no cluster."""
    return Helm(helm_binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def helm3(tools: Any, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    """Helm 3.17 (the page says Helm 3.x or 4.x) with an empty home."""
    return Helm(Path(tools.ensure_tool("helm3").path), tmp_path_factory.mktemp("helm3-home"))


@pytest.fixture(scope="session")
def ci_values() -> dict[str, Path]:
    """The scenario values files in chart/ci/, by scenario name."""
    return {path.stem: path for path in sorted(CI_VALUES.glob("*.yaml"))}


# -- the Kubernetes agents' Console ----------------------------------------------------------------


@pytest.fixture(scope="session")
def k8s_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleProcess]:
    """One Console for the Kubernetes agents' tests, its NATS ``max_payload`` lowered so that a
    5,000-pod inventory must be chunked."""
    console = ConsoleProcess(
        tmp_path_factory.mktemp("k8s-console"),
        env={
            "PROXIMA_NATS_MAX_PAYLOAD": str(MAX_PAYLOAD),
            # The collectors under test sync every 0.5 s: so does "the backend's copy".
            "PROXIMA_K8S_SYNC_INTERVAL": "0.5s",
        },
    )
    console.start()
    try:
        yield console
    finally:
        console.stop()


@pytest.fixture(scope="session")
def observer(k8s_console: ConsoleProcess) -> Iterator[NatsObserver]:
    """Every agent's heartbeats, metrics and inventory chunks, seen with the Console's trust."""
    nats_observer = NatsObserver(k8s_console).start()
    try:
        yield nats_observer
    finally:
        nats_observer.stop()


# -- a real control plane (tests/cluster) ----------------------------------------------------------

CLUSTER_NODES = 3


@pytest.fixture(scope="session")
def kube_cluster(tools: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """etcd, kube-apiserver, controller-manager, scheduler and kwok with three simulated nodes,
    on 127.0.0.1; built by ``scripts/tools.py control-plane`` (cached). Skips with the reason
    where it cannot start; under ``CI=true`` fails instead."""
    cluster = start_kube_cluster(tools, tmp_path_factory.mktemp("kube-cluster"))
    try:
        yield cluster
    finally:
        cluster.stop()


def start_kube_cluster(tools: Any, workdir: Path, **options: Any) -> KubeCluster:
    """A started ``KubeCluster`` (``options``: its fields, e.g. ``pod_security``); skips with
    the reason where it cannot start, under ``CI=true`` fails instead. The caller stops it."""
    try:
        binaries = {name: tool.path for name, tool in tools.ensure_control_plane().items()}
        return KubeCluster(workdir, binaries, nodes=CLUSTER_NODES, **options).start()
    except (tools.ToolError, ClusterStartError, OSError) as exc:
        reason = f"the Kubernetes control plane could not start: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster_cli(
    kube_cluster: KubeCluster,
    helm_binary: Path,
    kubectl_binary: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> ClusterCli:
    """helm and kubectl with the cluster's admin kubeconfig and an empty helm home."""
    return ClusterCli(kube_cluster, helm_binary, kubectl_binary, tmp_path_factory.mktemp("cli"))


@pytest.fixture
def namespace(cluster_cli: ClusterCli, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace name unique to the test. Afterwards the release in it is uninstalled (so no
    cluster-scoped RBAC object of a failed test stays behind) and the namespace is deleted."""
    words = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower().removeprefix("test_"))
    digest = hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:8]
    name = f"{words[:40].strip('-')}-{digest}"
    yield name
    cluster_cli.helm("uninstall", RELEASE, "-n", name, "--ignore-not-found", check=False)
    cluster_cli.kubectl("delete", "namespace", name, "--ignore-not-found", "--wait=false")


# -- an OCI registry (tests/release) ---------------------------------------------------------------


@pytest.fixture(scope="session")
def repo_users(tmp_path_factory: pytest.TempPathFactory) -> RepoUsers:
    """The release's publisher and a read-only deploy token, passwords made now, in bcrypt
    htpasswd files. Skips where the release tools are missing; under ``CI=true`` fails instead
    (scripts/dev.py installs them)."""
    missing = missing_tools()
    if missing:
        reason = f"the release lane needs {', '.join(missing)} (scripts/dev.py installs them)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return RepoUsers.make(tmp_path_factory.mktemp("repo-users"))


@pytest.fixture(scope="session")
def oci_registry(
    repo_users: RepoUsers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OciRegistry]:
    """Debian's ``docker-registry`` (the CNCF distribution server) on 127.0.0.1, plain HTTP,
    every request wanting ``repo_users``' credentials (htpasswd, bcrypt), stopped after the
    run."""
    registry = OciRegistry(tmp_path_factory.mktemp("oci-registry"), repo_users.readers).start()
    try:
        yield registry
    finally:
        registry.stop()
