"""The kinds of agent the Console enrolls (defined in :mod:`contracts.vocabulary.agents`)."""

from contracts.vocabulary.agents import AgentType

__all__ = ["AgentType"]
