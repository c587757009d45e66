"""The one test kit of the repository: real processes and doubles that tests and benchmarks
start, the waits they use, and every shared pytest fixture (``testkit.fixtures``, loaded from
``tests/conftest.py`` through ``pytest_plugins``).

Modules, each with one job:

- ``waiting`` — ``wait_for`` / ``await_for``: poll a condition against a deadline.
- ``net`` — ``free_port``.
- ``console`` — ``ConsoleProcess`` (a real Console), ``Identity`` (an agent's key pair driving
  the API directly).
- ``agents`` — ``AgentProcess`` (a real ``proxima-agent run``), ``agent_env``, ``run_cli``.
- ``nats`` — ``NatsServer`` (a bare nats-server with nkey users, for agent tests).
- ``fake_console`` — ``FakeConsole``: a tiny HTTP Console answering enrollment as told.
- ``agent_state`` — keys and state files of an enrolled agent, made without enrolling.
- ``runtime`` — the agent's runtime run in-process (settings, ``running``, commands).
- ``services`` — the Console's services in-process (in-memory SQLite, a fake clock, after-commit
  effects recorded): the ``services`` fixture of ``tests/services``.
- ``builds`` — zipapp builds of the agent (good and broken) and an artifact server.
- ``postgres``, ``rollouts``, ``swarm`` — a throwaway PostgreSQL, rollout creation, simulated
  agents.
- ``kube`` — the Kubernetes API double (``python -m testkit.kube`` serves one).
- ``k8s`` — the Kubernetes agents' harness (NATS observer, fake kubelet, cluster agents).
- ``migration`` — the hostDataDir migration harness (fake nodes, a kubelet that rolls pods).
- ``chart``, ``pod_security``, ``values_doc`` — helm rendering and what chart tests read in it.
- ``collector`` — a simulated cluster collector for the web UI tests.
- ``scaled`` — ``deploy/scaled/`` on one machine: a NATS cluster running its config verbatim,
  the Console settings its ``console.env`` names.
- ``proxy`` — ``RoundRobinProxy``: a TCP load balancer in front of Console replicas.

The kit never imports ``tests`` or ``bench`` (an import-linter contract holds it).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
