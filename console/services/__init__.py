"""The Console's use cases: the one place where what the Console does is decided and done.

API routes (``console.api``), pages (``console.web``) and the NATS adapter (``console.ingest``)
parse their input, call a service, and present what it returns. Each service call runs its
database work in a unit of work (``unit_of_work``) on the running Console; what reaches outside
the database runs after commit.

- ``access``: who is calling (an API token, for the API and the pages alike)
- ``fleet``: the agent list, one agent, the versions the fleet runs
- ``identities``: enrollment and re-bind, release (with a dry run), revoke, credential rotation
  (a package)
- ``heartbeats``: heartbeat and metrics batches, shared identities, refused connections
- ``rollouts``: planning, dispatch, results, lifecycle, reads (a package)
- ``clusters``: register, list, inspect, inventory, warnings
- ``onboarding``: the onboarding gates of one cluster
- ``tokens``: install tokens and API tokens
- ``artifacts``: hosted agent builds
- ``audit``: fleet audit runs
- ``published_settings``: the windows other processes must agree with
- ``presenters``: agent and token records into their API shapes
- ``agent_records``: what the agent use cases share ("online", evidence, events, key retirement)
"""
