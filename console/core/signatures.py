"""Verifying nkey signatures (ed25519) sent by agents.

The ``nkeys`` package signs but cannot load a bare public key, so decoding one (base32, prefix
byte, CRC-16) happens here and verification uses PyNaCl, which nkeys itself is built on.
"""

import base64
import binascii

import nacl.exceptions
import nacl.signing
import nkeys


class SignatureError(ValueError):
    def __init__(self, public_key: str, why: str) -> None:
        super().__init__(f"signature does not verify for {public_key}: {why}")
        self.public_key = public_key
        self.why = why


def b64decode(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(padded)


def decode_user_public_key(public_key: str) -> bytes:
    """The raw 32-byte ed25519 key inside an nkey user public key (``U…``)."""
    try:
        raw = base64.b32decode(public_key + "=" * (-len(public_key) % 8))
    except binascii.Error as exc:
        raise SignatureError(public_key, "public key is not base32") from exc
    if len(raw) != 35:
        raise SignatureError(public_key, "public key has the wrong length")
    body, crc = raw[:-2], int.from_bytes(raw[-2:], "little")
    # CRC-16/XMODEM, nkeys' checksum: ``binascii`` computes it in C (``nkeys.crc16`` loops in
    # Python, ~20x the cost, on every enrollment).
    if binascii.crc_hqx(body, 0) != crc:
        raise SignatureError(public_key, "public key checksum does not match")
    if body[0] != nkeys.PREFIX_BYTE_USER:
        raise SignatureError(public_key, "not a user nkey")
    return bytes(body[1:])


def verify(public_key: str, message: bytes, signature: str) -> None:
    key = decode_user_public_key(public_key)
    try:
        sig = b64decode(signature)
    except (binascii.Error, ValueError) as exc:
        raise SignatureError(public_key, "signature is not base64url") from exc
    try:
        nacl.signing.VerifyKey(key).verify(message, sig)
    except (nacl.exceptions.BadSignatureError, ValueError, TypeError) as exc:
        raise SignatureError(public_key, "bad signature") from exc
