"""The Console's rollout hot paths at fleet size, in one process, against a SQLite file.

    .venv/bin/python -m bench.rollout_paths [--sizes 2000,20000] [--against 6a93444]

Times what the flow makes the Console do per wave: read the rollout's counts
(``present(with_targets=False)``, every poll), mark a wave of half the targets dispatched
(``dispatch_wave`` + commit), and record a batch of up to 2,000 results (``record_results`` +
commit). ``--against COMMIT`` also times that commit's versions of the three modules (read
with ``git show``) in the same process, for a before/after on the same machine and minute.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlalchemy import Engine, insert
from sqlmodel import Session

from console.bootstrap import bootstrap
from console.core.db import make_engine, migrate
from console.models import Agent, Rollout, RolloutTarget, new_id
from contracts.messages import CommandKind, CommandResult, CommandStatus

MODULES = ("reads", "dispatch", "results")


def _modules_at(commit: str, tmp: Path) -> dict[str, ModuleType]:
    found = {}
    for name in MODULES:
        path = tmp / f"at_{name}.py"
        path.write_text(
            subprocess.run(
                ["git", "show", f"{commit}:console/services/rollouts/{name}.py"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        )
        spec = importlib.util.spec_from_file_location(f"at_{commit}_{name}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        found[name] = module
    return found


def _current() -> dict[str, ModuleType]:
    return {n: importlib.import_module(f"console.services.rollouts.{n}") for n in MODULES}


def _setup(tmp: Path, size: int) -> tuple[Engine, str]:
    url = f"sqlite:///{tmp}/console.db"
    migrate(url)
    engine = make_engine(url)
    with Session(engine) as s:
        b = bootstrap(s, client_name="acme", environment_name="prod")
    now = datetime.now(UTC)
    ids = [new_id() for _ in range(size)]
    rid = uuid.uuid4().hex
    half = size // 2
    artifact = {"version": "0.9.0", "url": "http://x/a", "sha256": "0" * 64, "signature": "s" * 86}
    owner = {"client_id": b.client_id, "environment_id": b.environment_id}
    with engine.begin() as c:
        c.execute(
            insert(Agent),
            [
                {**owner, "id": i, "agent_type": "host", "name": f"a{n:06d}", "version": "0.8.0"}
                | {"labels": {}, "enrolled_at": now, "last_seen_at": now, "conflict_count": 0}
                for n, i in enumerate(ids)
            ],
        )
        c.execute(
            insert(Rollout),
            [
                {**owner, "id": rid, "name": "r", "target_version": "0.9.0", "artifact": artifact}
                | {"selector": {}, "wave_spec": {}, "criteria": [], "exclusions": []}
                | {"waves": [{"index": 0, "kind": "canary", "size": half}]}
                | {"wave_timeout_seconds": 600, "seed": "s", "state": "running", "baseline": {}}
                | {"created_at": now}
            ],
        )
        c.execute(
            insert(RolloutTarget),
            [
                {"rollout_id": rid, "agent_id": i, "agent_name": f"a{n:06d}", "wave": 0}
                | {"status": "pending", "old_version": "0.8.0"}
                for n, i in enumerate(ids[:half])
            ]
            + [
                {"rollout_id": rid, "agent_id": i, "agent_name": f"a{n:06d}", "wave": 1}
                | {"status": "pending", "old_version": "0.8.0"}
                for n, i in enumerate(ids[half:])
            ],
        )
    return engine, rid


def _timed(engine: Engine, work: Callable[[Session], Any]) -> tuple[float, Any]:
    with Session(engine) as s:
        t0 = time.perf_counter()
        out = work(s)
        s.commit()
        return time.perf_counter() - t0, out


def run(size: int, mods: dict[str, ModuleType]) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        engine, rid = _setup(Path(tmp), size)
        read, _ = _timed(
            engine, lambda s: mods["reads"].present(s, s.get(Rollout, rid), with_targets=False)
        )
        dispatched, d = _timed(
            engine, lambda s: mods["dispatch"].dispatch_wave(s, rollout=s.get(Rollout, rid), wave=0)
        )
        batch = [
            (
                agent_id,
                CommandResult(
                    command_id=cid,
                    agent_id=agent_id,
                    kind=CommandKind.SELF_UPDATE,
                    status=CommandStatus.SUCCEEDED,
                    finished_at=datetime.now(UTC),
                    detail={"new_version": "0.9.0"},
                ),
            )
            for agent_id, cid in d.to_send[:2000]
        ]
        recorded, _ = _timed(engine, lambda s: mods["results"].record_results(s, batch))
        engine.dispose()
    return (
        f"counts read {read * 1000:.0f} ms; dispatch of {len(d.to_send):,} {dispatched * 1000:.0f} "
        f"ms; {len(batch):,} results recorded {recorded * 1000:.0f} ms "
        f"({recorded / max(1, len(batch)) * 1e6:.0f} µs each)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,20000")
    parser.add_argument("--against", default=None, help="a commit to time as 'before'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        versions = {"now": _current()}
        if args.against:
            versions = {f"at {args.against}": _modules_at(args.against, Path(tmp)), **versions}
        for size in (int(s) for s in args.sizes.split(",")):
            for label, mods in versions.items():
                print(f"{size:,} targets, {label}: {run(size, mods)}", flush=True)


if __name__ == "__main__":
    main()
