"""``self_update``: download a signed build, prove it runs, swap it in, and hand over to it.

One module per phase, in the order a command goes through them (``docs/self-update.md``)::

    handler      the command: checks it, then ties the phases below together
    download     download, sha256, signature, the new build's ``version --json``
    install      backup (<program> → <program>.bak), then the new build in its place
    trial        the new build runs as a child (health and NATS only) and must be ready in time
    handover     marker phase "handover", NATS drained, ``execv`` of the new program
    probation    at every start, settle the marker the previous build left; the new build
                 reports the result once it is healthy, or the old one comes back

and what they share: :mod:`~agent.selfupdate.marker` (``update.json``, the memory that
survives the exec), :mod:`~agent.selfupdate.program` (the program file and the one seam that
renames it), :mod:`~agent.selfupdate.signatures` (the fleet's signing key) and
:mod:`~agent.selfupdate.failures` (why an update failed). The runtime holds a
:class:`~agent.selfupdate.feature.SelfUpdateFeature`.

Nothing is imported here: the runtime loads the light modules at start and the handler's on
the first ``self_update`` only.
"""
