"""A webhook receiver on loopback for the subscription tests: records every POST and can be told to fail."""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Received:
    """One POST as the receiver saw it."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    at: float

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Receiver:
    """The recorded POSTs and the answers still to give (status, headers, delay) before answering 200."""

    url: str
    posts: list[Received] = field(default_factory=list)
    script: list[tuple[int, dict[str, str], float]] = field(default_factory=list)
    delay_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def fail_next(self, *answers: int | tuple[int, dict[str, str]]) -> None:
        """Answer the next POSTs with these statuses (optionally with headers), then 200 again."""
        with self.lock:
            for answer in answers:
                status, headers = answer if isinstance(answer, tuple) else (answer, {})
                self.script.append((status, headers, 0.0))

    def acknowledged(self) -> list[Received]:
        with self.lock:
            return [p for p in self.posts if 200 <= p.status < 300]

    def clear(self) -> None:
        with self.lock:
            self.posts.clear()
            self.script.clear()


def _handler(receiver: Receiver):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if receiver.delay_s:
                time.sleep(receiver.delay_s)
            with receiver.lock:
                status, headers, _ = receiver.script.pop(0) if receiver.script else (200, {}, 0.0)
                receiver.posts.append(Received(self.path, dict(self.headers.items()), body, status, time.time()))
            answer = json.dumps({"status": status}).encode()
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


def start_receiver(path: str = "/hook", tls: tuple[Path, Path] | None = None) -> Iterator[Receiver]:
    """Serve a Receiver on 127.0.0.1 (an ephemeral port) in a thread until the generator is closed.

    Args:
        path: the URL path the receiver's URL names.
        tls: (certificate, key) PEM files: serve HTTPS with them.
    """
    server = ThreadingHTTPServer(("127.0.0.1", 0), None)
    scheme = "http"
    if tls is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*tls)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    receiver = Receiver(url=f"{scheme}://127.0.0.1:{server.server_address[1]}{path}")
    server.RequestHandlerClass = _handler(receiver)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
