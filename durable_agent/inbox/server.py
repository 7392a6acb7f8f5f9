"""Serving the inbox: uvicorn on a socket we bind ourselves, inside the caller's event loop.

`durable-agent inbox`, the worker's `--dev` and the tests all run it the same way. The
socket is bound before uvicorn starts, so a port in use is an error naming the port instead
of uvicorn's `sys.exit` from deep inside its start-up; uvicorn's own signal handling and
logging set-up are left out, since the process that hosts the inbox (a CLI command, a worker)
already owns both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
from collections.abc import Iterator, Mapping

import uvicorn
from starlette.applications import Starlette

from .auth import InboxConfigError

__all__ = ["DEFAULT_PORT", "SECRET_ENV", "InboxServer", "serve_inbox", "session_secret"]

DEFAULT_PORT = 8234
SECRET_ENV = "DURABLE_AGENT_INBOX_SECRET"
log = logging.getLogger("durable_agent.inbox")


def session_secret(environ: Mapping[str, str] = os.environ) -> str:
    """DURABLE_AGENT_INBOX_SECRET, or a random one (sessions then end with the process)."""
    secret = environ.get(SECRET_ENV, "")
    if secret:
        if len(secret) < 32:
            raise InboxConfigError(
                f"{SECRET_ENV} is {len(secret)} characters; use at least 32 random ones "
                '(python -c "import secrets; print(secrets.token_urlsafe(32))")'
            )
        return secret
    return secrets.token_urlsafe(32)


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """The hosting process handles SIGINT/SIGTERM and calls `stop()`."""
        yield


class InboxServer:
    """The inbox app served on `host:port` until `stop()`."""

    def __init__(self, app: Starlette, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = "localhost" if self.host in ("127.0.0.1", "0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError as error:
            sock.close()
            raise InboxConfigError(
                f"the inbox cannot listen on {self.host}:{self.port}: {error.strerror}; "
                "pick another port with --port"
            ) from None
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        return sock

    async def start(self) -> None:
        sock = self._bind()
        config = uvicorn.Config(
            self.app,
            log_config=None,
            access_log=False,
            lifespan="off",
            server_header=False,
            log_level="warning",
        )
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                await self._task  # raises what stopped it
                raise InboxConfigError(f"the inbox stopped while starting on {self.url}")
            await asyncio.sleep(0.02)

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        await self._task

    async def __aenter__(self) -> InboxServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_inbox(
    app: Starlette, host: str, port: int, stop: asyncio.Event, announce: str = ""
) -> None:
    """Serves `app` until `stop` is set; prints `announce` (with `{url}`) once listening."""
    async with InboxServer(app, host, port) as server:
        if announce:
            print(announce.format(url=server.url), flush=True)
        log.info("inbox listening on %s", server.url)
        await stop.wait()
