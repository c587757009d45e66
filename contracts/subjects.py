"""NATS subjects. Every agent publishes only under its own prefix and receives only its commands.

The server enforces this with per-user permissions (see ``docs/nats.md``):

- publish:   ``proxima.agent.<agent_id>.>``
- subscribe: ``proxima.cmd.<agent_id>.>`` and its reply inbox ``proxima.inbox.<agent_id>.>``
  (the Console's acknowledgements of its command results; nats-py's ``inbox_prefix``)
"""

AGENT_ROOT = "proxima.agent"
COMMAND_ROOT = "proxima.cmd"
INBOX_ROOT = "proxima.inbox"


def agent_prefix(agent_id: str) -> str:
    return f"{AGENT_ROOT}.{agent_id}"


def heartbeat(agent_id: str) -> str:
    return f"{agent_prefix(agent_id)}.heartbeat"


def metrics(agent_id: str) -> str:
    return f"{agent_prefix(agent_id)}.metrics"


def command_result(agent_id: str) -> str:
    return f"{agent_prefix(agent_id)}.result"


def inventory(agent_id: str) -> str:
    return f"{agent_prefix(agent_id)}.inventory"


def commands(agent_id: str) -> str:
    return f"{COMMAND_ROOT}.{agent_id}"


def agent_inbox_prefix(agent_id: str) -> str:
    """The agent's own reply inbox (nats-py ``inbox_prefix``): replies to its requests land
    under ``<prefix>.>``, which no other agent may read."""
    return f"{INBOX_ROOT}.{agent_id}"


def agent_publish_allow(agent_id: str) -> list[str]:
    return [f"{agent_prefix(agent_id)}.>"]


def agent_subscribe_allow(agent_id: str) -> list[str]:
    return [
        f"{COMMAND_ROOT}.{agent_id}",
        f"{COMMAND_ROOT}.{agent_id}.>",
        f"{agent_inbox_prefix(agent_id)}.>",
    ]


ALL_HEARTBEATS = f"{AGENT_ROOT}.*.heartbeat"
ALL_METRICS = f"{AGENT_ROOT}.*.metrics"
ALL_RESULTS = f"{AGENT_ROOT}.*.result"
ALL_INVENTORY = f"{AGENT_ROOT}.*.inventory"


def agent_id_of(subject: str) -> str:
    """The agent id in a subject under ``proxima.agent.<id>.…``."""
    parts = subject.split(".")
    if len(parts) < 4 or f"{parts[0]}.{parts[1]}" != AGENT_ROOT:
        raise ValueError(f"not an agent subject: {subject!r}")
    return parts[2]
