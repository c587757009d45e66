"""Rollouts in the Console: records, idempotent dispatch, results, timeouts, the threshold.

Decisions come from ``rollout_policy``; these modules only store them and enforce them:

- ``planning``: the wave plan and exclusions are decided once, at creation, and stored;
- ``dispatch``: a command is sent at most once per (rollout, agent) — marked dispatched,
  committed, then published;
- ``results``: every result is judged against the failure criteria the moment it is recorded;
  overdue targets time out;
- ``lifecycle``: the state machine's moves; ``reads``: what the API and the pages show;
  ``records``: what they share.
"""
