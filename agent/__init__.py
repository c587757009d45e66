"""The ``proxima-agent`` program: identity, enrollment, NATS session, heartbeats and commands.

The agent stays light: it imports :mod:`contracts` and a handful of client libraries, never the
Console, the flows or server frameworks. Entry point: :func:`agent.cli.main`.

``__version__`` is the version stamped into a build by ``scripts/build_agent.py``
(``agent/_build.json`` inside the zipapp); a working tree without one reports
``contracts.VERSION``.
"""

from __future__ import annotations

import json
import os

from contracts import VERSION

__all__ = ["BUILD_FILE", "__version__", "build_info"]

BUILD_FILE = "_build.json"


def build_info() -> dict[str, object]:
    """What the build stamped (``version``, ``mode``, …); empty outside a build."""
    path = os.path.join(os.path.dirname(__file__), BUILD_FILE)
    loader = globals().get("__loader__")
    get_data = getattr(loader, "get_data", None)
    try:
        # The loader reads inside a zipapp as well as from a directory.
        if get_data is not None:
            raw = get_data(path)
        else:
            with open(path, "rb") as handle:
                raw = handle.read()
    except OSError:
        return {}
    try:
        info = json.loads(raw)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


__version__: str = str(build_info().get("version") or VERSION)
