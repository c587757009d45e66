"""Run ``console serve`` under cProfile, every thread included, and write the merged stats.

    PROXIMA_PROFILE_OUT=/tmp/enroll.prof python -m bench.profiled_console

The database work of a request runs in worker threads, so the main thread's profile alone
would miss it: each thread gets its own profiler and all are merged at exit. The timer is
each thread's CPU time (``time.thread_time``): waiting for a lock, the GIL or the network
costs nothing, so on a busy shared machine the figures show where the CPU goes (after uvicorn's
shutdown, SIGTERM exits through Python, so ``atexit`` runs). Used by ``bench.enrollment --profile``.
"""

from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import signal
import sys
import threading
import time

_profiles: list[cProfile.Profile] = []
_lock = threading.Lock()


def _thread_profile(*_args: object) -> None:
    profile = cProfile.Profile(time.thread_time)
    with _lock:
        _profiles.append(profile)
    sys.setprofile(None)  # the hook only starts this thread's profiler
    profile.enable()


def _dump(path: str) -> None:
    for p in _profiles:
        p.disable()
    stats: pstats.Stats | None = None
    for p in _profiles:
        try:
            p.create_stats()
        except Exception:
            continue
        if stats is None:
            stats = pstats.Stats(p)
        else:
            stats.add(p)
    if stats is not None:
        stats.dump_stats(path)


def main() -> None:
    out = os.environ.get("PROXIMA_PROFILE_OUT", "console.prof")
    main_profile = cProfile.Profile(time.thread_time)
    _profiles.append(main_profile)
    threading.setprofile(_thread_profile)
    atexit.register(_dump, out)
    # uvicorn restores this handler after its shutdown and raises the signal again: exit
    # through Python so ``atexit`` writes the stats.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    sys.argv = ["console", "serve"]
    from console.cli import main as console_main

    main_profile.enable()
    try:
        console_main()
    except SystemExit:
        pass


if __name__ == "__main__":
    main()
