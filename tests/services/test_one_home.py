"""One vocabulary, one home each: every name below is defined in one place and reached one way,
and these scans fail when a second definition or a second way in appears (the companion of
``test_one_implementation.py``, which holds the rules' implementations).

- ``AgentType``: ``contracts.vocabulary`` is its one spelling (a re-export shim made three);
- the pure core: ``from rollout_policy import X``, its ``__all__`` and nothing else;
- modules stay under 500 lines;
- the ``agent`` extra: what the agent imports, so what its image ships;
- the back-off: ``contracts.backoff.Backoff``;
- data repairs: Alembic migrations, not a sweep at every start;
- the agent's flags: built from ``AgentSettings``, each default written once.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pkgutil
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import rollout_policy
from agent.settings import default_text, flags, is_duration
from contracts.durations import parse_duration
from testkit import REPO
from testkit.agents import agent_env

PRODUCT = ("agent", "console", "flows", "contracts", "rollout_policy")
CALLERS = (*PRODUCT, "testkit", "tests", "bench", "scripts")


@functools.cache
def parsed(*roots: str) -> dict[Path, ast.Module]:
    """Every module under ``roots``, parsed once per run."""
    found = {
        path: ast.parse(path.read_text(), str(path))
        for root in roots
        for path in sorted((REPO / root).rglob("*.py"))
    }
    assert found, f"no sources under {roots}: the packages moved, update this test"
    return found


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(REPO)}:{getattr(node, 'lineno', '?')}"


def imports(tree: ast.Module) -> list[tuple[ast.AST, str, list[str]]]:
    """Each import as (node, module, the names it takes); ``import a.b`` takes no name."""
    found: list[tuple[ast.AST, str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node, node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(node, a.name, []) for a in node.names]
    return found


# -- AgentType: contracts.vocabulary --------------------------------------------------------------


def agent_type_spellings(sources: dict[Path, ast.Module]) -> list[str]:
    """Every import of ``AgentType`` from anywhere but ``contracts.vocabulary``."""
    return [
        f"{where(path, node)} from {module}"
        for path, tree in sources.items()
        if "vocabulary" not in path.parent.name  # its home, and the package that exports it
        for node, module, names in imports(tree)
        if "AgentType" in names and module != "contracts.vocabulary"
    ]


def test_agent_type_is_imported_one_way():
    """``contracts/agent_types.py`` re-exported the enum, so it was imported as
    ``contracts.agent_types``, ``contracts.vocabulary.agents`` and ``contracts.vocabulary``."""
    assert not (REPO / "contracts" / "agent_types.py").exists()
    assert agent_type_spellings(parsed(*CALLERS)) == []


def test_the_agent_type_scan_finds_a_second_spelling():
    planted = ast.parse(
        "from contracts.agent_types import AgentType\n"
        "from contracts.vocabulary.agents import AgentStatus, AgentType\n"
        "from contracts.vocabulary import AgentType\n"
    )
    assert len(agent_type_spellings({REPO / "planted.py": planted})) == 2


# -- the pure core: rollout_policy's __all__ -------------------------------------------------------


def submodule_imports(sources: dict[Path, ast.Module]) -> list[str]:
    """Every reach past ``rollout_policy``'s surface from outside it: ``from rollout_policy.x
    import …``, ``import rollout_policy.x``, ``from rollout_policy import x`` (a module)."""
    modules = {m.name for m in pkgutil.iter_modules(rollout_policy.__path__)}
    return [
        f"{where(path, node)} {module} {names}"
        for path, tree in sources.items()
        if "rollout_policy" not in path.relative_to(REPO).parts[:1]
        for node, module, names in imports(tree)
        if module.startswith("rollout_policy.")
        or (module == "rollout_policy" and modules & set(names))
    ]


def test_callers_reach_the_pure_core_through_its_surface_only():
    """The pure core was imported two ways (``from rollout_policy import X`` and ``from
    rollout_policy.waves import X``); the import-linter contract "one way into the pure core"
    holds the same line."""
    assert submodule_imports(parsed(*CALLERS)) == []


def test_the_surface_scan_finds_a_second_way_in():
    planted = ast.parse(
        "from rollout_policy.waves import plan_waves\n"
        "import rollout_policy.identities as identities\n"
        "from rollout_policy import identities\n"
        "from rollout_policy import plan_waves\n"
        "import rollout_policy\n"
    )
    assert len(submodule_imports({REPO / "planted.py": planted})) == 3


def test_the_surface_exports_every_public_name_of_its_modules():
    """So no caller needs a module: what a module lists in ``__all__``, the package does."""
    surface = set(rollout_policy.__all__)
    missing = [
        f"rollout_policy.{m.name}.{name}"
        for m in pkgutil.iter_modules(rollout_policy.__path__)
        for name in getattr(importlib.import_module(f"rollout_policy.{m.name}"), "__all__", ())
        if name not in surface
    ]
    assert missing == []


# -- module size ----------------------------------------------------------------------------------


def test_product_modules_stay_under_500_lines():
    long = {
        str(path.relative_to(REPO)): n
        for path in parsed(*PRODUCT)
        if (n := len(path.read_text().splitlines())) >= 500 and "migrations" not in path.parts
    }
    assert long == {}


# -- the agent extra: what the agent imports ------------------------------------------------------


def third_party_imports(*roots: str) -> set[str]:
    """The top-level modules outside the stdlib and the repo that ``roots`` import."""
    own = {p.name for p in REPO.iterdir() if (p / "__init__.py").exists()}
    return {
        module.split(".")[0]
        for tree in parsed(*roots).values()
        for _node, module, _names in imports(tree)
        if module.split(".")[0] not in sys.stdlib_module_names | own
    }


def test_the_agent_extra_lists_only_what_the_agent_imports():
    """The ``agent`` extra pinned httpx and pydantic-settings, which the agent never imports
    (it speaks HTTP through urllib, its settings are a plain pydantic model), so its image
    shipped them; ``docker/agent-constraints.txt`` holds the extra's closure."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extra = {
        re.split(r"[<>=!~\[; ]", r)[0].lower() for r in project["optional-dependencies"]["agent"]
    }
    provides: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            provides.setdefault(dist.lower(), set()).add(module)
    imported = third_party_imports("agent", "contracts")
    unused = sorted(name for name in extra if not provides.get(name, set()) & imported)
    assert unused == []
    pins = (REPO / "docker" / "agent-constraints.txt").read_text()
    assert "httpx==" not in pins and "pydantic-settings==" not in pins


# -- data repairs: Alembic migrations, never a start-time sweep ---------------------------------


def start_time_writes(tree: ast.Module) -> list[str]:
    """Calls in ``ConsoleRuntime.start`` that write through a unit of work (``write=True``)."""
    return [
        ast.unparse(node)
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "ConsoleRuntime"
        for method in cls.body
        if isinstance(method, ast.AsyncFunctionDef) and method.name == "start"
        for node in ast.walk(method)
        if isinstance(node, ast.Call)
        and any(k.arg == "write" and ast.unparse(k.value) == "True" for k in node.keywords)
    ]


def test_the_console_start_repairs_no_data_outside_alembic():
    """Stored values over their bounds were cleared by a sweep at every Console start
    (``console/services/repairs.py``); a data repair is a migration, run once."""
    assert not (REPO / "console" / "services" / "repairs.py").exists()
    runtime = REPO / "console" / "runtime" / "__init__.py"
    assert "migrate(" in runtime.read_text(), "the start runs the migrations"
    assert start_time_writes(parsed("console")[runtime]) == []


def test_the_start_time_write_scan_finds_a_sweep():
    planted = ast.parse(
        "class ConsoleRuntime:\n"
        "    async def start(self):\n"
        "        await self.units.run(lambda uow: sweep(uow.session), write=True)\n"
    )
    assert start_time_writes(planted) == [
        "self.units.run(lambda uow: sweep(uow.session), write=True)"
    ]


# -- the back-off: contracts.backoff.Backoff ------------------------------------------------------

# Not a back-off: the leader election waits its fixed retry period, jittered upwards as client-go
# does, so a standby never renews later than the Lease's timing allows.
FIXED_PERIOD = {"agent/cluster/election.py"}


def growing_waits(path: Path, tree: ast.Module) -> list[str]:
    """A wait computed to grow outside ``Backoff``: ``wait *= 2``, ``min(wait * 2, cap)``,
    ``base ** attempt``, or a table of delays (``RETRY_DELAYS = (0.2, 0.5, 1.0)``)."""

    def grows(node: ast.AST) -> bool:
        return any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult | ast.Pow)
            for n in ast.walk(node)
        )

    def waity(name: str) -> bool:
        return any(w in name.lower() for w in ("backoff", "delay", "wait", "step", "sleep"))

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Mult | ast.Pow):
            if waity(ast.unparse(node.target)):
                found.append(where(path, node))
        elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if not any(waity(ast.unparse(t)) for t in targets):
                continue
            value = node.value
            table = isinstance(value, ast.Tuple | ast.List) and len(value.elts) > 1
            if table and all(isinstance(e, ast.Constant) for e in value.elts):
                found.append(where(path, node))
            elif isinstance(value, ast.Call) and ast.unparse(value.func) == "min" and grows(value):
                found.append(where(path, node))
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            if "attempt" in ast.unparse(node.right):
                found.append(where(path, node))
    return found


def test_every_retry_waits_with_the_one_backoff():
    """Three back-offs grew waits their own way (the agent's ``Backoff``, the nats-server
    supervisor's ``min(backoff * 2, 30.0)``, the Prefect client's table of delays); each now
    names its knobs in a ``contracts.backoff.Backoff``."""
    home = REPO / "contracts" / "backoff.py"
    offenders = [
        spot
        for path, tree in parsed(*PRODUCT).items()
        if path != home and str(path.relative_to(REPO)) not in FIXED_PERIOD
        for spot in growing_waits(path, tree)
    ]
    assert offenders == []
    assert growing_waits(home, parsed("contracts")[home]), "the home itself grows a wait"


def test_the_backoff_scan_finds_a_second_backoff():
    planted = ast.parse(
        "backoff = min(backoff * 2, 30.0)\n"
        "delay *= 2\n"
        "RETRY_DELAYS = (0.2, 0.5, 1.0)\n"
        "wait = base * 2 ** attempt\n"
    )
    assert len(growing_waits(REPO / "planted.py", planted)) == 4


# -- the agent's flags: AgentSettings -------------------------------------------------------------

SENTINEL_HELP = """
import sys
from agent.settings import AgentSettings
field = AgentSettings.model_fields["heartbeat_interval"]
field.default, field.description = 42.0, "SENTINEL"
from agent.cli import main
main(["run", "--help"])
"""


def test_the_agent_cli_takes_each_flag_its_help_and_its_default_from_the_settings():
    """Every agent CLI default was written in the settings and again in a help string; the
    options are now built from the fields, so a changed field shows in ``--help`` unchanged."""
    done = subprocess.run(
        [sys.executable, "-c", SENTINEL_HELP],
        env=agent_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "--heartbeat-interval <duration> SENTINEL (default 42s)" in text
    for field, flag in flags().items():
        assert flag.split("/")[0] in text, flag
        assert f"[env: PROXIMA_{field.upper()}]" in text.replace("- ", "-"), field


def written_defaults(tree: ast.Module) -> list[str]:
    """Help text that states a default itself: ``"(default 30s)"``, ``help="… default 60s"``."""
    return [
        repr(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.search(r"default:? [\w/.]", node.value)
    ]


def test_the_agent_cli_writes_no_default_of_its_own():
    cli = REPO / "agent" / "cli.py"
    assert written_defaults(parsed("agent")[cli]) == []
    planted = ast.parse('typer.Option("--metrics-interval", help=f"(default 60s) {env}")')
    assert written_defaults(planted) == ["'(default 60s) '"]


def test_the_agent_page_lists_every_flag_with_the_settings_default():
    """``docs/agent.md``'s table of flags states each default in words a reader can use; it
    must say what the settings do."""
    rows = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in (REPO / "docs" / "agent.md").read_text().splitlines()
        if line.startswith("| `--")
    ]
    documented = {row[0].strip("`").split("/")[0]: row for row in rows}
    assert set(documented) == set(flags().values())
    for field, flag in flags().items():
        _, variable, default, _meaning = documented[flag]
        assert variable == f"`PROXIMA_{field.upper()}`"
        shown = default_text(field)
        if shown is None:
            assert not default.startswith("`"), f"{flag}: the settings have no default"
        elif is_duration(field):
            assert parse_duration(default.strip("`")) == parse_duration(shown), flag
        else:
            assert default.strip("`") == shown, flag
