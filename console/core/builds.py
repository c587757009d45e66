"""What the Console checks in an agent build before hosting it: the fleet's signature and the
version stamped inside.

Formats are the ones ``scripts/build_agent.py`` writes and agents check
(``agent/selfupdate/signatures.py``): a signing public key is the 32 raw ed25519 key bytes in
base64url (padding optional); a signature is base64url ed25519 over the file's SHA-256 digest
(the 32 raw bytes). A build is a zipapp carrying ``agent/_build.json`` (``{"version": …}``), at
the top for a thin build, under ``site-packages/`` for a self-contained (shiv) one: that is
where ``proxima-agent version --json`` reads its version.
"""

from __future__ import annotations

import base64
import binascii
import json
import zipfile
import zlib
from pathlib import Path

import nacl.exceptions
import nacl.signing

__all__ = ["BUILD_INFO_NAMES", "BuildFileError", "parse_signing_key", "stamped_version", "verifies"]

BUILD_INFO_NAMES = ("agent/_build.json", "site-packages/agent/_build.json")
_BUILD_INFO_MAX_BYTES = 4096
_UNREADABLE = (zipfile.BadZipFile, zlib.error, OSError, EOFError, RuntimeError, NotImplementedError)


class BuildFileError(ValueError):
    """The file is not an agent build with a readable stamped version."""


def _b64url(text: str) -> bytes:
    text = text.strip()
    padded = (text + "=" * (-len(text) % 4)).replace("+", "-").replace("/", "_")
    return base64.b64decode(padded, altchars=b"-_", validate=True)


def parse_signing_key(text: str) -> bytes:
    """The raw key; ``ValueError`` unless ``text`` is 32 bytes of base64url."""
    try:
        raw = _b64url(text)
    except (binascii.Error, ValueError):
        raise ValueError(f"signing public key {text!r} is not base64url") from None
    if len(raw) != 32:
        raise ValueError(f"an ed25519 public key is 32 bytes, {text!r} is {len(raw)}")
    return raw


def verifies(keys: list[bytes], digest: bytes, signature: str) -> bool:
    """Whether ``signature`` is one of ``keys``' ed25519 signature of ``digest``."""
    try:
        raw_signature = _b64url(signature)
    except (binascii.Error, ValueError):
        return False
    for key in keys:
        try:
            nacl.signing.VerifyKey(key).verify(digest, raw_signature)
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            continue
        return True
    return False


def stamped_version(path: Path) -> str:
    """The version ``scripts/build_agent.py`` stamped into the zipapp at ``path``.

    Reads one small member and nothing else (a hostile archive's other members are never
    inflated); raises :class:`BuildFileError` with a one-line reason."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = set(archive.namelist())
            name = next((n for n in BUILD_INFO_NAMES if n in names), None)
            if name is None:
                raise BuildFileError("no agent/_build.json inside: not built by build_agent.py")
            with archive.open(name) as member:
                raw = member.read(_BUILD_INFO_MAX_BYTES + 1)
    except _UNREADABLE as e:
        raise BuildFileError(f"not a zipapp ({e})") from None
    if len(raw) > _BUILD_INFO_MAX_BYTES:
        raise BuildFileError("agent/_build.json is too large")
    try:
        version = json.loads(raw)["version"]
    except (ValueError, KeyError, TypeError):
        raise BuildFileError("agent/_build.json has no version") from None
    if not isinstance(version, str):
        raise BuildFileError("agent/_build.json has no version")
    return version
