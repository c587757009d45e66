"""The pure parts of the ``hostdatadir-migration`` flow (``flows/migration.py``).

No Prefect and no I/O here: each module takes what the flow read (the live DaemonSet and nodes
as the Kubernetes API returns them, the Console's agent records) as plain data and decides.

- :mod:`~flows.hostdatadir.manifests`: the DaemonSet and node manifests → :class:`ClusterFacts`.
- :mod:`~flows.hostdatadir.records`: the Console's records → the plan's input.
- :mod:`~flows.hostdatadir.progress`: where each node stands while the pods move.
- :mod:`~flows.hostdatadir.verification`: the checks after the move.
- :mod:`~flows.hostdatadir.reports`: the plan description and the pass/fail report.
- :mod:`~flows.hostdatadir.errors`: ``MigrationBlockedError``, ``MigrationFailedError``.
"""
