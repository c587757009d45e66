"""A tiny HTTP Console for agent tests: it answers enrollment as the test tells it."""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.httpclient import HttpResponse
from testkit.nats import NatsServer
from testkit.net import send_json


def answer(status: int, json_body: Any = None, *, text: str | None = None) -> HttpResponse:
    """What a fake Console transport returns: a JSON body, or plain text."""
    if text is not None:
        return HttpResponse(status, text.encode())
    return HttpResponse(
        status, json.dumps(json_body).encode(), {"content-type": "application/json"}
    )


@dataclass
class FakeConsole:
    """A tiny HTTP Console. ``enroll_answers`` are consumed in order; the last one repeats.

    Each answer is ``(status, body)``, or a callable taking the request JSON and returning one.
    ``on_enrolled`` runs before a 2xx answer is sent (e.g. to authorize the key in NATS).
    """

    nats: NatsServer | None = None
    enroll_answers: list[Any] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    rotations: list[dict[str, Any]] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def success(self, request: dict[str, Any], *, agent_id: str | None = None) -> dict[str, Any]:
        agent_id = agent_id or "ag_" + uuid.uuid4().hex[:12]
        if self.nats is not None:
            self.nats.allow(request["public_key"], agent_id)
            self.nats.reload()
        return {
            "agent_id": agent_id,
            "agent_type": request["agent_type"],
            "name": request["name"],
            "client_id": "cl_1",
            "environment_id": "env_1",
            "nats_url": self.nats.url if self.nats else "nats://127.0.0.1:9",
            "rebound": False,
        }

    def _answer(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if path == "/api/v1/agents/enroll":
            self.requests.append(body)
            if not self.enroll_answers:
                return 201, self.success(body)
            answer = self.enroll_answers[0]
            if len(self.enroll_answers) > 1:
                self.enroll_answers.pop(0)
            status, reply = answer(body) if callable(answer) else answer
            return int(status), dict(reply)
        if path.startswith("/api/v1/agents/") and path.endswith("/credentials"):
            self.rotations.append(body)
            return 200, {}
        return 404, {"reason": "not_found", "message": path}

    def start(self) -> None:
        console = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, answer = console._answer(self.path, body)
                send_json(self, status, answer)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
