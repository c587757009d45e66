"""Noticing SIGTERM/SIGINT during a long wait at start.

uvicorn takes the stop signals before the application starts, but only looks at them once
start-up is over: a start that waits (for an external NATS, up to
``PROXIMA_NATS_CONNECT_WAIT_SECONDS``) would ignore ``kubectl delete pod`` or Ctrl-C until the
wait ends. :func:`stop_requested` chains a handler in front of whatever handles the signals now
(uvicorn's, which still records them and exits after start-up fails) and sets an event the wait
can race against."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_requested() -> Iterator[asyncio.Event]:
    """An event set when SIGTERM or SIGINT arrives inside the block (call it in the event
    loop's thread). Outside the main thread, signals cannot be caught: the event never fires."""
    stop = asyncio.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(stop.set)
        before = previous.get(signum)
        if callable(before):
            before(signum, frame)
        elif before == signal.SIG_DFL and signum == signal.SIGINT:
            raise KeyboardInterrupt

    for sig in STOP_SIGNALS:
        previous[sig] = signal.signal(sig, handler)
    try:
        yield stop
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)
