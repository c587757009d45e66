"""HTTP for the agent: a few JSON calls to the Console and one streamed download per update.

The agent talks HTTP rarely (enroll once, rotate credentials, download a build), so it uses the
standard library instead of httpx: ``urllib`` in a worker thread, with a TLS context built only
for ``https://`` URLs. httpx with its TLS context cost ~11 MiB of resident memory that stayed
after enrollment; this costs well under 1 MiB.

A :data:`Transport` is a plain function from :class:`HttpRequest` to :class:`HttpResponse`:
tests pass one instead of patching. Network failures raise :class:`TransportError`.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl
    import urllib.request

__all__ = [
    "DownloadTooLargeError",
    "HttpRequest",
    "HttpResponse",
    "Transport",
    "TransportError",
    "UrllibTransport",
    "retry_after_seconds",
    "tls_context",
]

_CHUNK = 64 * 1024
_MAX_ANSWER_BYTES = 1024 * 1024


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    timeout: float = 15.0
    follow_redirects: bool = False

    @property
    def path(self) -> str:
        from urllib.parse import urlsplit

        return urlsplit(self.url).path


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = ""

    def json(self) -> Any:
        """The body as JSON; ``ValueError`` when it is not."""
        import json

        return json.loads(self.body)


Transport = Callable[[HttpRequest], HttpResponse]


def retry_after_seconds(response: HttpResponse, now: float | None = None) -> float | None:
    """A 429 or 503 answer's ``Retry-After`` in seconds (delay-seconds or an HTTP-date), else
    None: absent, unreadable, or on another status."""
    if response.status not in (429, 503):
        return None
    value = response.headers.get("retry-after", "").strip()
    if not value:
        return None
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    import time

    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class TransportError(Exception):
    """No HTTP answer at all: refused, DNS, timeout, TLS, reset."""

    def __init__(self, url: str, detail: str, *, refused: bool = False) -> None:
        super().__init__(f"{url}: {detail}")
        self.url = url
        self.detail = detail
        self.refused = refused


class DownloadTooLargeError(Exception):
    def __init__(self, url: str, limit: int) -> None:
        super().__init__(f"{url}: larger than the {limit // 2**20} MiB limit")
        self.url = url
        self.limit = limit


def _refused(error: BaseException) -> bool:
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionRefusedError):
            return True
        if isinstance(current, OSError) and current.errno == errno.ECONNREFUSED:
            return True
        reason = getattr(current, "reason", None)
        current = reason if isinstance(reason, BaseException) else current.__cause__
    return False


def _describe(error: BaseException) -> str:
    reason = getattr(error, "reason", None)
    if isinstance(reason, BaseException):
        error = reason
    if isinstance(error, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower() if error.strerror[:1].isupper() else error.strerror
    text = str(reason if isinstance(reason, str) else error).strip()
    return text or error.__class__.__name__


def tls_context() -> ssl.SSLContext:
    """What httpx verified against before: ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set, else
    certifi's bundle when installed, else the system store."""
    import os
    import ssl

    cafile, capath = os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR")
    if cafile or capath:
        return ssl.create_default_context(cafile=cafile or None, capath=capath or None)
    try:
        import certifi
    except ImportError:
        return ssl.create_default_context()
    return ssl.create_default_context(cafile=certifi.where())


class UrllibTransport:
    """The real network. Thread-blocking: call it through ``asyncio.to_thread``.

    Redirects are followed only when the request asks (downloads: a package registry answers
    with one to its object store, and the build is verified by digest and signature anyway);
    for the Console's API a redirect is an answer, as it was with httpx.
    """

    def __init__(self) -> None:
        self._openers: dict[tuple[bool, bool], urllib.request.OpenerDirector] = {}
        self._tls: ssl.SSLContext | None = None

    def _opener_for(self, url: str, follow: bool) -> urllib.request.OpenerDirector:
        import urllib.request

        tls = url.startswith("https://")
        opener = self._openers.get((tls, follow))
        if opener is not None:
            return opener

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args: Any, **kwargs: Any) -> None:
                return None

        handlers: list[Any] = [] if follow else [NoRedirect()]
        if tls:
            if self._tls is None:
                self._tls = tls_context()
            handlers.append(urllib.request.HTTPSHandler(context=self._tls))
        opener = urllib.request.build_opener(*handlers)
        self._openers[(tls, follow)] = opener
        return opener

    def _open(self, request: HttpRequest) -> Any:
        import urllib.error
        import urllib.request

        if not request.url.startswith(("http://", "https://")):
            raise TransportError(request.url, "only http:// and https:// URLs are used")
        raw = urllib.request.Request(  # noqa: S310 (scheme checked above)
            request.url, data=request.body, headers=request.headers, method=request.method
        )
        try:
            opener = self._opener_for(request.url, request.follow_redirects)
            return opener.open(raw, timeout=request.timeout)
        except urllib.error.HTTPError as e:
            return e  # an answer: status and body are read like a success
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise TransportError(request.url, _describe(e), refused=_refused(e)) from None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        answer = self._open(request)
        try:
            body = answer.read(_MAX_ANSWER_BYTES + 1)[:_MAX_ANSWER_BYTES]
        except OSError as e:
            raise TransportError(request.url, _describe(e)) from None
        finally:
            answer.close()
        return HttpResponse(
            status=int(answer.status if hasattr(answer, "status") else answer.code),
            body=body,
            headers={k.lower(): v for k, v in answer.headers.items()},
            reason=str(getattr(answer, "reason", "") or ""),
        )

    def download(
        self,
        request: HttpRequest,
        sink: IO[bytes],
        *,
        limit: int,
        on_chunk: Callable[[bytes], None] | None = None,
    ) -> HttpResponse:
        """Stream a 200 answer's body into ``sink`` (at most ``limit`` bytes); other answers
        are returned with their (short) body and nothing is written."""
        answer = self._open(request)
        try:
            status = int(answer.status if hasattr(answer, "status") else answer.code)
            headers = {k.lower(): v for k, v in answer.headers.items()}
            reason = str(getattr(answer, "reason", "") or "")
            if status != 200:
                return HttpResponse(status, answer.read(4096), headers, reason)
            declared = headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise DownloadTooLargeError(request.url, limit)
            size = 0
            while True:
                chunk = answer.read(_CHUNK)
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise DownloadTooLargeError(request.url, limit)
                sink.write(chunk)
                if on_chunk is not None:
                    on_chunk(chunk)
            if declared.isdigit() and size != int(declared):
                raise TransportError(
                    request.url, f"connection closed after {size} of {declared} bytes"
                )
            return HttpResponse(status, b"", headers, reason)
        except OSError as e:
            raise TransportError(request.url, _describe(e)) from None
        finally:
            answer.close()
