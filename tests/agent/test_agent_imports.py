"""What a host or node agent imports to run: none of the Console's own wire models.

``contracts`` holds every wire shape, the Console's as well as the agent's; a module of
Console-only models (rollouts, views, inventory, audit) pulled into the agent's import graph
builds its validators at start and stays resident (idle RSS: docs/performance.md). The self_update
updater imports ``contracts.rollouts`` for an artifact when a ``self_update`` arrives.
"""

from __future__ import annotations

import json
import subprocess
import sys

from testkit.agents import agent_env

CONSOLE_ONLY = ("contracts.rollouts", "contracts.views", "contracts.inventory", "contracts.audit")

# What `proxima-agent run` imports before it is enrolled and connected, for both agent types.
PROBE = """
import json, sys
import agent.cli
from agent.runtime import AgentRuntime
from agent.collector_factory import default_collectors
import agent.node
print(json.dumps(sorted(sys.modules)))
"""


def test_a_host_or_node_agent_imports_no_console_only_models() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=agent_env(), capture_output=True, text=True, check=True
    )
    loaded = set(json.loads(done.stdout))
    assert "agent.runtime" in loaded
    assert not loaded & set(CONSOLE_ONLY)
