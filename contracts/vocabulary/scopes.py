"""The scopes of an API token: what each Console route and page requires, what a token may
grant, and what the flows' worker token holds."""

from enum import StrEnum

__all__ = ["Scope"]


class Scope(StrEnum):
    AGENTS_READ = "agents:read"
    AGENTS_WRITE = "agents:write"
    TOKENS_READ = "tokens:read"
    TOKENS_WRITE = "tokens:write"
    ROLLOUTS_READ = "rollouts:read"
    ROLLOUTS_WRITE = "rollouts:write"
    CLUSTERS_READ = "clusters:read"
    CLUSTERS_WRITE = "clusters:write"
