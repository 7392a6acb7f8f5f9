"""A scripted local HTTP server for fake provider APIs (standard library only).

`ScriptedServer` owns the socket, the threads, the script of replies and the record of
requests; a provider's fake (`anthropic_server`, `responses_server`) says how a request is
validated and how a reply is rendered: a JSON body (`Response`), server-sent events written
one by one with a delay between them (`Stream`, `cut_after` drops the connection midway as a
crashed proxy does), or a dropped connection (`Disconnect`).
"""

from __future__ import annotations

import json
import threading
import traceback
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from socketserver import TCPServer
from types import TracebackType
from typing import Any, Self, cast

__all__ = ["Disconnect", "RecordedRequest", "RequestError", "Response", "ScriptedServer", "Stream"]


@dataclass
class Response:
    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, status: int, data: Any, headers: Mapping[str, str] | None = None) -> Response:
        return cls(
            status,
            json.dumps(data).encode(),
            {"content-type": "application/json", **(headers or {})},
        )


@dataclass
class Stream:
    """Server-sent events: (event name or None, data) pairs."""

    events: list[tuple[str | None, str]]
    delay: float = 0.0
    cut_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Disconnect:
    pass


class RequestError(Exception):
    """A request the real API refuses: `body` is its error envelope."""

    def __init__(self, status: int, body: Any, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(json.dumps(body))
        self.status = status
        self.body = body
        self.headers = dict(headers or {})


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int | None


Outcome = Response | Stream | Disconnect


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    fake: ScriptedServer

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can stall without DNS.
        TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.fake.errors.append(traceback.format_exc())


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # one response per connection: the close ends a stream
    sys_version = ""
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        fake = cast(_HTTPServer, self.server).fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        outcome = fake.handle("POST", self.path.split("?", 1)[0], headers, raw)
        try:
            if isinstance(outcome, Disconnect):
                self.close_connection = True
            elif isinstance(outcome, Stream):
                self._stream(fake, outcome)
            else:
                self.send_response(outcome.status)
                for name, value in outcome.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(outcome.body)))
                self.end_headers()
                self.wfile.write(outcome.body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _stream(self, fake: ScriptedServer, stream: Stream) -> None:
        self.close_connection = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        for name, value in stream.headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.flush()
        for index, (event, data) in enumerate(stream.events):
            if stream.cut_after is not None and index >= stream.cut_after:
                return
            if index and stream.delay > 0 and fake.closing.wait(stream.delay):
                return
            head = f"event: {event}\n" if event else ""
            self.wfile.write(f"{head}data: {data}\n\n".encode())
            self.wfile.flush()
            fake.events_written.append(event or data)


Reply = Any
ReplyFactory = Callable[[dict[str, Any]], Any]


class ScriptedServer:
    """Answers POSTs from a script of replies (or factories of the request body)."""

    name = "FakeServer"

    def __init__(self) -> None:
        self.script: deque[Reply | ReplyFactory] = deque()
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []
        self.events_written: list[str] = []
        self.closing = threading.Event()
        self.lock = threading.Lock()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- to implement ---------------------------------------------------------------------------

    def route(self, path: str, headers: Mapping[str, str], body: Any) -> None:
        """Raises `RequestError` for a request the real API refuses."""
        raise NotImplementedError

    def render(self, body: dict[str, Any], reply: Reply) -> Outcome:
        raise NotImplementedError

    def crash_body(self, message: str) -> Any:
        return {"error": {"message": message}}

    # -- serving --------------------------------------------------------------------------------

    def handle(self, method: str, path: str, headers: Mapping[str, str], raw: bytes) -> Outcome:
        body: Any = None
        outcome: Outcome
        try:
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            self.route(path, headers, body)
            with self.lock:
                entry = self.script.popleft() if self.script else None
            if entry is None:
                raise RequestError(500, self.crash_body(f"{self.name}: script exhausted"))
            reply = entry(body) if callable(entry) else entry
            outcome = self.render(body, reply)
        except RequestError as error:
            outcome = Response.json(error.status, error.body, error.headers)
        except Exception:
            text = traceback.format_exc()
            self.errors.append(text)
            outcome = Response.json(500, self.crash_body(f"{self.name} crashed:\n{text}"))
        status = outcome.status if isinstance(outcome, Response) else 200
        with self.lock:
            self.requests.append(RecordedRequest(method, path, dict(headers), body, status))
        return outcome

    def enqueue(self, *replies: Reply | ReplyFactory) -> None:
        with self.lock:
            self.script.extend(replies)

    @property
    def pending(self) -> int:
        with self.lock:
            return len(self.script)

    @property
    def bodies(self) -> list[Any]:
        """The bodies of the requests the API accepted (status 200)."""
        with self.lock:
            return [r.body for r in self.requests if r.status == 200]

    @property
    def port(self) -> int:
        assert self._server is not None, "start the server first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._server = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self.closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
