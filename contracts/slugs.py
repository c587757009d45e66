"""The cluster slug: the URL-safe identifier the Console matches a cluster's inventory on.

The same rule as the chart's ``proxima-agent.slugify`` helper (docs/chart.md): replace runs of
anything but ASCII letters, digits and ``-`` by one ``-`` *before* lowercasing (so ``İ`` and the
Kelvin sign agree across Go and Python), collapse ``-`` runs, trim, cut to 63, trim again.
"""

import re

_NOT_ALLOWED = re.compile(r"[^A-Za-z0-9-]+")
_DASHES = re.compile(r"-+")
_DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

MAX_SLUG = 63


def slugify(name: str) -> str:
    slug = _NOT_ALLOWED.sub("-", name).lower()
    slug = _DASHES.sub("-", slug).strip("-")
    return slug[:MAX_SLUG].rstrip("-")


def is_dns_label(slug: str) -> bool:
    return bool(_DNS_LABEL.match(slug))
