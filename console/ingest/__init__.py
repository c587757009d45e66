"""The NATS adapter: what agents send (heartbeats, metrics, results, inventory) and refused
connections, from NATS into the services in batches.

- :mod:`~console.ingest.ingester`: the :class:`Ingester` (queues, batches, answers results);
- :mod:`~console.ingest.chunks`: inventory chunks in flight, within their limits;
- :mod:`~console.ingest.rejections`: one bad row never fails its batch; dropped messages counted.
"""

from console.ingest.chunks import ChunkLimits, ChunkRefusedError, PendingChunks
from console.ingest.ingester import IdentityChange, Ingester, InstanceTracker
from console.ingest.rejections import REJECTED, RowFailures, isolate

__all__ = [
    "REJECTED",
    "ChunkLimits",
    "ChunkRefusedError",
    "IdentityChange",
    "Ingester",
    "InstanceTracker",
    "PendingChunks",
    "RowFailures",
    "isolate",
]
