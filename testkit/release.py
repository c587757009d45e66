"""The release pipeline's test harness: Debian's OCI registry (``docker-registry``, the CNCF
distribution server) on 127.0.0.1 behind htpasswd auth (the classic Helm repository, nginx
behind basic auth, is in ``testkit/chart_repos.py``),
``scripts/release.py`` run as a subprocess, and the published image run from an unpacked
bundle with ``crun`` (root, no network namespace, read-only root, UID 65532)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from testkit.chart_repos import ChartRepository, RepoUsers
from testkit.net import free_port
from testkit.waiting import wait_for

REPO = Path(__file__).resolve().parent.parent
RELEASE_SCRIPT = REPO / "scripts" / "release.py"


def _dev_release_tools() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location(
        "proxima_scripts_dev", REPO / "scripts" / "dev.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return tuple(module.RELEASE_TOOLS)


#: The binaries the lane needs: scripts/dev.py's list, which it installs from Debian
RELEASE_TOOLS = _dev_release_tools()
UID = 65532
HYBRID_CGROUP2 = "/sys/fs/cgroup/unified"


def missing_tools() -> list[str]:
    missing = [tool for tool in RELEASE_TOOLS if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root (mmdebstrap's root mode, chroot and crun)")
    return missing


class OciRegistry:
    """``docker-registry serve`` with filesystem storage under ``workdir``, plain HTTP on a free
    loopback port (skopeo and helm talk to it with --dest-tls-verify=false / --plain-http);
    with ``htpasswd`` (bcrypt) it wants basic-auth credentials for every request."""

    def __init__(self, workdir: Path, htpasswd: Path | None = None) -> None:
        self.workdir = workdir
        self.htpasswd = htpasswd
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> OciRegistry:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.workdir / 'data'}\n"
            "  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.host}\n"
            + (
                f"auth:\n  htpasswd:\n    realm: proxima\n    path: {self.htpasswd}\n"
                if self.htpasswd
                else ""
            )
        )
        with open(self.workdir / "registry.log", "ab") as log:
            self.process = subprocess.Popen(
                ["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT
            )

        def up() -> bool:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited: {self.log()[-500:]}")
            try:
                answer = httpx.get(f"http://{self.host}/v2/", timeout=2).status_code
                return answer == (401 if self.htpasswd else 200)
            except httpx.HTTPError:
                return False

        wait_for(up, timeout=30, what="the registry answers /v2/")
        return self

    def log(self) -> str:
        path = self.workdir / "registry.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def run_release(
    *args: str, env: dict[str, str] | None = None, timeout: float = 1200
) -> subprocess.CompletedProcess[str]:
    """``python scripts/release.py <args>`` to its exit, output captured."""
    return subprocess.run(
        [sys.executable, str(RELEASE_SCRIPT), *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def publish(
    registry: OciRegistry,
    repo: ChartRepository,
    users: RepoUsers,
    out: Path,
    gpg_home: Path | None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the whole pipeline, the publisher's credentials in its environment; its ``--json``
    report. It uploads to ``repo`` (its local copy is ``out/repo``)."""
    signing = ["--gpg-home", str(gpg_home)] if gpg_home else ["--no-sign"]
    done = run_release(
        "publish",
        "--registry",
        registry.host,
        "--plain-http",
        "--repo-url",
        repo.url,
        "--out",
        str(out),
        *signing,
        "--json",
        env={**users.release_env(), **(env or {})},
    )
    if done.returncode != 0:
        raise AssertionError(f"release.py publish failed: {done.stderr[-2000:]}")
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def crun_config(
    rootfs: Path, args: list[str], env: dict[str, str], mounts: dict[str, Path]
) -> dict[str, Any]:
    """An OCI runtime config: the image's user and a read-only root, host network (the Console
    is on loopback), a tmpfs /tmp and ``mounts`` (container path -> host dir) read-write, all
    capabilities dropped, no new privileges: what the chart's securityContext asks of a pod."""
    binds = [
        {"destination": dest, "type": "bind", "source": str(src), "options": ["rbind", "rw"]}
        for dest, src in mounts.items()
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False,
            "user": {"uid": UID, "gid": UID},
            "args": args,
            "env": [f"{k}={v}" for k, v in env.items()],
            "cwd": "/var/lib/proxima-agent",
            "capabilities": {"bounding": [], "effective": [], "permitted": []},
            "noNewPrivileges": True,
        },
        "root": {"path": str(rootfs), "readonly": True},
        "hostname": "proxima-agent",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "strictatime", "mode=755", "size=65536k"],
            },
            {
                "destination": "/tmp",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "mode=1777", "size=65536k"],
            },
            *binds,
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"],
        },
    }


class ImageRun:
    """One container started by ``crun run`` from an unpacked bundle (``umoci unpack``)."""

    def __init__(
        self,
        bundle: Path,
        name: str,
        args: list[str],
        env: dict[str, str],
        mounts: dict[str, Path],
        log: Path,
    ) -> None:
        self.bundle = bundle
        self.name = name
        self.log_path = log
        original = bundle / "config.image.json"  # umoci's, kept: each run writes its own
        if not original.exists():
            shutil.copy2(bundle / "config.json", original)
        image_config = json.loads(original.read_text())
        image_env = dict(e.split("=", 1) for e in image_config["process"]["env"])
        config = crun_config(bundle / "rootfs", args, {**image_env, **env}, mounts)
        (bundle / "config.json").write_text(json.dumps(config, indent=2))
        self.state_root = bundle.parent / "crun-state"
        self.process: subprocess.Popen[bytes] | None = None

    def _crun(self, *args: str) -> list[str]:
        """crun without cgroups (a test needs no limits). On a host with cgroup v1 and v2
        mounted side by side ("hybrid": cgroup2 at /sys/fs/cgroup/unified) crun refuses to
        start at all, so it runs in a private mount namespace without that mount (the host's
        mounts are untouched)."""
        crun = ["crun", "--cgroup-manager=disabled", "--root", str(self.state_root), *args]
        if not os.path.ismount(HYBRID_CGROUP2):
            return crun
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'umount {HYBRID_CGROUP2} && exec "$@"',
            "crun-without-cgroup2",
            *crun,
        ]

    def start(self) -> ImageRun:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self._crun("run", "--bundle", str(self.bundle), self.name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def wait(self, timeout: float = 60) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            subprocess.run(self._crun("kill", self.name, "TERM"), capture_output=True, check=False)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                subprocess.run(
                    self._crun("kill", self.name, "KILL"), capture_output=True, check=False
                )
                self.process.wait(timeout=15)
        subprocess.run(self._crun("delete", "--force", self.name), capture_output=True, check=False)
