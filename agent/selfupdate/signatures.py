"""The fleet's build-signing key as the agent holds it: one ed25519 public key, fixed at install.

Format (shared with ``scripts/build_agent.py``): the public key is the 32 raw key bytes in
base64url, padding optional; a signature is base64url ed25519 over the artifact's SHA-256 digest
(the 32 raw bytes, not the hex text).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import Path

from agent.errors import ConfigError

__all__ = ["SigningPublicKey", "decode_base64url", "load_signing_key"]


def decode_base64url(text: str) -> bytes:
    """base64url with or without padding; standard base64 is accepted too."""
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    alphabet = padded.replace("+", "-").replace("/", "_")
    return base64.b64decode(alphabet, altchars=b"-_", validate=True)


@dataclass(frozen=True)
class SigningPublicKey:
    raw: bytes

    @classmethod
    def parse(cls, text: str) -> SigningPublicKey:
        """``ValueError`` unless ``text`` is 32 bytes of base64url."""
        try:
            raw = decode_base64url(text)
        except (binascii.Error, ValueError):
            raise ValueError("not base64url") from None
        if len(raw) != 32:
            raise ValueError(f"an ed25519 public key is 32 bytes, this is {len(raw)}")
        return cls(raw)

    @property
    def text(self) -> str:
        return base64.urlsafe_b64encode(self.raw).decode().rstrip("=")

    def verifies(self, digest: bytes, signature: str) -> bool:
        """Whether ``signature`` is this key's ed25519 signature of ``digest``."""
        import nacl.exceptions
        import nacl.signing

        try:
            raw_signature = decode_base64url(signature)
        except (binascii.Error, ValueError):
            return False
        try:
            nacl.signing.VerifyKey(self.raw).verify(digest, raw_signature)
        except (nacl.exceptions.BadSignatureError, ValueError, TypeError):
            return False
        return True


def load_signing_key(text: str | None, file: Path | None) -> SigningPublicKey | None:
    """The configured key (the value wins over the file), ``None`` when neither is set.

    A key that is set but unusable stops the agent at startup: an operator who configured one
    meant updates to be possible, and finding out at the first rollout is too late.
    """
    if text is not None and text.strip():
        try:
            return SigningPublicKey.parse(text)
        except ValueError as e:
            raise ConfigError("--signing-public-key / PROXIMA_SIGNING_PUBLIC_KEY", str(e)) from None
    if file is not None:
        label = "--signing-public-key-file / PROXIMA_SIGNING_PUBLIC_KEY_FILE"
        try:
            content = file.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as e:
            detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            raise ConfigError(label, f"cannot read {file}: {detail}") from None
        try:
            return SigningPublicKey.parse(content.split()[-1] if content else "")
        except ValueError as e:
            raise ConfigError(label, f"{file}: {e}") from None
    return None
