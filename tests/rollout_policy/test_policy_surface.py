"""The package's public surface and its purity (import-linter checks the same in CI)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import rollout_policy

PACKAGE = Path(rollout_policy.__file__).parent


def test_everything_in_all_exists_and_nothing_is_listed_twice() -> None:
    names = rollout_policy.__all__
    assert names
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(rollout_policy, name), name


def _allowed(module: str) -> bool:
    root = module.split(".")[0]
    return (
        root == "rollout_policy"
        or root in sys.stdlib_module_names
        or module == "contracts.vocabulary"
        or module.startswith("contracts.vocabulary.")
    )


def test_the_package_imports_only_the_standard_library_the_vocabulary_and_itself() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert modules, f"no modules under {PACKAGE}"
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                assert _allowed(name), f"{module.name} imports {name}"


def test_importing_the_package_loads_no_pydantic_and_only_the_vocabulary_of_contracts() -> None:
    probe = "import json, sys, rollout_policy; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        ).stdout
    )
    assert not [m for m in loaded if m.split(".")[0] in ("pydantic", "pydantic_core")]
    contracts = [m for m in loaded if m.split(".")[0] == "contracts"]
    # The package's __init__ (and what it imports) runs first; all of it is stdlib-only.
    lean = {"contracts", "contracts.durations"}
    assert all(m in lean or m.startswith("contracts.vocabulary") for m in contracts), contracts


def test_every_exception_ends_in_error() -> None:
    exceptions = [
        name
        for name in rollout_policy.__all__
        if isinstance(value := getattr(rollout_policy, name), type)
        and issubclass(value, BaseException)
    ]
    assert exceptions, "rollout_policy exports no exception"
    for name in exceptions:
        assert name.endswith("Error"), name
