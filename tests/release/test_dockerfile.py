"""docker/agent.Dockerfile builds the image the release builds (no engine here to run it): the
same user, environment, entrypoint, working directory, venv and pins."""

from __future__ import annotations

import importlib.util
import re
import sys

from testkit.release import REPO

DOCKERFILE = (REPO / "docker" / "agent.Dockerfile").read_text()


def _oci_image():
    name = "proxima_scripts_oci_image"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "oci_image.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _instruction(name: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(name + " ")]


def test_user_workdir_entrypoint_and_cmd_match_the_released_image():
    image = _oci_image()
    assert _instruction("USER") == [f"{image.UID}:{image.UID}"]
    assert _instruction("WORKDIR")[-1] == image.DATA_DIR
    assert _instruction("ENTRYPOINT") == [f'["{image.ENTRYPOINT[0]}"]']
    assert _instruction("CMD")[-1] == '["run"]'


def test_the_environment_matches_the_released_image():
    image = _oci_image()
    (env_line,) = _instruction("ENV")
    env = dict(pair.split("=", 1) for pair in env_line.split())
    assert env == image.ENV


def test_both_install_the_pinned_wheels_into_the_same_venv_as_the_same_user():
    assert "-c agent-constraints.txt" in DOCKERFILE
    assert "python3 -m venv --without-pip /opt/proxima-agent" in DOCKERFILE
    assert "--invalidation-mode unchecked-hash" in DOCKERFILE
    image = _oci_image()
    for hook in image.BASE_HOOKS:
        command = hook.replace('"$1', "").replace('"', "")
        if command.startswith(("echo", "install", "chmod")):  # the user, its data dir, modes
            assert command in DOCKERFILE, command
