"""The package's public surface and its purity (import-linter checks the same in CI)."""

import ast
import sys
from pathlib import Path

import fleet_policy

PACKAGE = Path(fleet_policy.__file__).parent


def test_everything_in_all_exists_and_nothing_is_listed_twice() -> None:
    names = fleet_policy.__all__
    assert names
    assert len(names) == len(set(names))
    for name in names:
        assert hasattr(fleet_policy, name), name


def test_the_package_imports_only_the_standard_library_and_itself() -> None:
    modules = sorted(PACKAGE.glob("*.py"))
    assert modules, f"no modules under {PACKAGE}"
    for module in modules:
        for node in ast.walk(ast.parse(module.read_text(), filename=str(module))):
            if isinstance(node, ast.Import):
                roots = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                roots = [node.module.split(".")[0]]
            else:
                continue
            for root in roots:
                assert root == "fleet_policy" or root in sys.stdlib_module_names, (
                    f"{module.name} imports {root}"
                )


def test_every_exception_ends_in_error() -> None:
    exceptions = [
        name
        for name in fleet_policy.__all__
        if isinstance(value := getattr(fleet_policy, name), type)
        and issubclass(value, BaseException)
    ]
    assert exceptions, "fleet_policy exports no exception"
    for name in exceptions:
        assert name.endswith("Error"), name
