"""Stand-ins for outside services that answer JSON over HTTP on loopback (token endpoints, key sets, registries)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any


class JsonHandler(BaseHTTPRequestHandler):
    """A request handler whose answers are JSON documents; it logs nothing, the tests read what it was asked."""

    content_type = "application/json"

    def answer_json(self, status: int, body: Any) -> None:
        """Send `body` as a JSON document with `status`."""
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", self.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass
