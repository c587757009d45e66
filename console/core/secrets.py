"""Token material: generated with ``secrets``, stored only as SHA-256.

Tokens are 256-bit random strings, so a plain SHA-256 is enough to make the stored value
useless to a reader of the database (no password stretching needed).
"""

import hashlib
import secrets

API_TOKEN_PREFIX = "pxa_"
INSTALL_TOKEN_PREFIX = "pxi_"


def new_token(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def display_prefix(token: str) -> str:
    """What lists show so an operator can tell tokens apart without the secret."""
    return token[:10]


def evidence_hash(kind: str, value: str) -> str:
    return hashlib.sha256(f"{kind}:{value.strip().lower()}".encode()).hexdigest()


def loggable_prefix(token: str | None) -> str | None:
    """The display prefix of something shaped like one of our tokens, for logs and rate-limit
    keys; None for anything else (a password pasted into the wrong field is never logged)."""
    if token and token.startswith((API_TOKEN_PREFIX, INSTALL_TOKEN_PREFIX)) and len(token) > 20:
        return display_prefix(token)
    return None
