"""Identifiers the policy speaks in.

They are plain strings at runtime; the ``NewType`` keeps an agent id from being passed where a
node name is expected.
"""

from typing import NewType

AgentId = NewType("AgentId", str)
EnvironmentId = NewType("EnvironmentId", str)
NodeName = NewType("NodeName", str)
