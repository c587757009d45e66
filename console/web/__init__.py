"""The Console's web UI: server-rendered pages over the same functions and scopes as the API.

``mount(app)`` adds the pages, the static files and the web sessions. See docs/web-ui.md.
"""

from console.web.mount import mount

__all__ = ["mount"]
