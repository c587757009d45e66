"""The end-to-end tests' Console: the suite's short quiet window, on SQLite."""

import pytest

from testkit.console import QUIET_ENV, ConsoleFactory, ConsoleProcess


@pytest.fixture
def e2e_console(console_factory: ConsoleFactory) -> ConsoleProcess:
    return console_factory(env=dict(QUIET_ENV))
