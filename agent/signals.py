"""Identity signals of the machine under the agent, read from the host root when mounted.

The Console re-binds a returning machine onto its own quiet record when one of these matches
evidence the record already carries; see ``docs/identity.md``.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from contracts.enrollment import IdentitySignals

__all__ = ["dmi_uuid_paths", "machine_id_path", "read_signals"]

log = logging.getLogger(__name__)

_MAX = 128
# Firmware placeholders shared by many machines: worse than nothing as identity evidence.
_PLACEHOLDER_UUIDS = {
    "00000000-0000-0000-0000-000000000000",
    "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "03000200-0400-0500-0006-000700080009",
}
_MACHINE_ID = re.compile(r"^[0-9a-f]{32}$")


def machine_id_path(host_root: Path) -> Path:
    return host_root / "etc" / "machine-id"


def dmi_uuid_paths(host_root: Path, host_sys: Path | None = None) -> list[Path]:
    """Where the SMBIOS/DMI product uuid may be: under the host root, else the host's /sys."""
    paths = [host_root / "sys" / "class" / "dmi" / "id" / "product_uuid"]
    if host_sys is not None:
        paths.append(host_sys / "class" / "dmi" / "id" / "product_uuid")
    return paths


def _read_first_line(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    except OSError as e:
        log.debug("cannot read identity signal %s: %s", path, e)
        return None
    value = text.strip().splitlines()[0].strip() if text.strip() else ""
    return value or None


def _machine_id(host_root: Path) -> str | None:
    value = _read_first_line(machine_id_path(host_root))
    if value is None:
        return None
    value = value.lower()
    # systemd writes "uninitialized" until first boot completes.
    if not _MACHINE_ID.match(value):
        log.debug("ignoring machine-id that is not 32 hex digits")
        return None
    return value


def _product_uuid(host_root: Path, host_sys: Path | None) -> str | None:
    for path in dmi_uuid_paths(host_root, host_sys):
        value = _read_first_line(path)
        if value is None:
            continue
        value = value.lower()
        if value in _PLACEHOLDER_UUIDS or len(value) > _MAX:
            log.debug("ignoring placeholder DMI product uuid at %s", path)
            return None
        return value
    return None


def read_signals(host_root: Path, host_sys: Path | None = None) -> IdentitySignals:
    """Machine-id and DMI product uuid, each ``None`` when absent, unreadable or a placeholder."""
    return IdentitySignals(
        machine_id=_machine_id(host_root), product_uuid=_product_uuid(host_root, host_sys)
    )
