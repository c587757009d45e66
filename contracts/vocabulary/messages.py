"""Why the Console dropped an agent's message: the ``reason`` label of
``proxima_messages_rejected_total{kind, reason}`` (a bounded set, so a hostile agent cannot grow
the metric's series)."""

from enum import StrEnum


class MessageKind(StrEnum):
    """The messages an agent sends on NATS that the Console stores."""

    HEARTBEAT = "heartbeat"
    METRICS = "metrics"
    RESULT = "result"
    INVENTORY = "inventory"


class RejectionReason(StrEnum):
    """Why one message was dropped rather than stored."""

    INVALID = "invalid"
    """It did not parse, or a field broke its bound (``contracts.bounds``): never queued."""
    UNWRITABLE = "unwritable"
    """The database refused it on its own (its batch was split until it stood alone), every
    time it was tried (``PROXIMA_INGEST_ROW_ATTEMPTS``): the rest of its batch was written."""
