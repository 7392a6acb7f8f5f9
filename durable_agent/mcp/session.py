"""One live session with an MCP server, in a task of its own.

The SDK's client is a stack of anyio task groups and cancel scopes, and anyio requires a
scope to be left by the task that entered it. Activities, runs and the worker's shutdown
are different tasks, so the session is entered and left by one long-lived task here; every
other task only sends requests through it (which the SDK allows from any task).

The session also watches the server: a transport failure, a crash or a closed pipe marks it
broken, so the next call opens a new one (restarting a stdio server), and a
`tools/list_changed` notification (legacy protocol) or event (2026 `subscriptions/listen`)
forgets the digest of the last listing, so the next `tools_changed` question lists again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Protocol, TypeVar

import anyio
import mcp_types
import structlog
from mcp import Client, MCPError
from mcp.client import Transport
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["CLIENT_INFO", "Session", "SessionOwner"]

log = structlog.get_logger("durable_agent.mcp")
T = TypeVar("T")


def _version() -> str:
    try:
        return version("durable-agent")
    except PackageNotFoundError:  # run from a checkout that is not installed
        return "0+unknown"


CLIENT_INFO = mcp_types.Implementation(name="durable-agent", version=_version())
"""How this client introduces itself to servers: the installed release's own version."""
CLOSE_TIMEOUT_SECONDS = 10.0
"""The SDK gives a stdio server 2 s to exit after its stdin closes, then terminates and
kills it (2 s each): a session closes well within this."""


class SessionOwner(Protocol):
    """What a session asks of the server it belongs to (`MCPServer` and its transports):
    how to connect, and how to name what went wrong."""

    @property
    def name(self) -> str: ...

    async def open_transport(
        self, stack: contextlib.AsyncExitStack, session: Session
    ) -> Transport: ...

    def is_connection_error(self, error: MCPError) -> bool: ...

    def is_transport_error(self, error: BaseException) -> bool: ...

    def redact(self, text: str) -> str: ...

    def unavailable(self, problem: str) -> Exception: ...

    def handshake_timeout(self, timeout: float) -> Exception: ...

    def classify_open_error(self, error: BaseException, session: Session) -> Exception: ...


class Session:
    def __init__(self, server: SessionOwner) -> None:
        self.server = server
        self.client: Client | None = None
        self.broken = False
        self.protocol_errors = 0
        """Lines or frames the server sent that are not MCP (its output is not JSON-RPC)."""
        self.listed_digest: str | None = None
        """The digest of this session's last listing; None until listed, and again after
        the server said its tools changed."""
        self.state: dict[str, Any] = {}
        """Whatever the server's transport wants to remember about this session (e.g. the
        last HTTP status, to tell a refused token from a server that is down)."""
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # The outcome of the handshake is read by `open`; this keeps an unread failure
        # (an abandoned open) from being reported as "never retrieved".
        self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
        self.in_flight = 0
        self._retiring = False
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        """The scope the whole session runs in: cancelling it is the one way to stop a
        session stuck in its handshake (asyncio's task.cancel() does not reach into the
        SDK's anyio scopes reliably)."""

    # -- life cycle ------------------------------------------------------------------------

    async def open(self, timeout: float) -> None:
        """Connects and completes the MCP handshake, or raises the server's classified error."""
        # A fresh context: the session outlives the activity (or run) that opened it, and
        # must not carry that caller's context variables along.
        self._task = asyncio.create_task(
            self._run(), name=f"mcp session {self.server.name}", context=contextvars.Context()
        )
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except TimeoutError:
            await self.close(force=True)
            raise self.server.handshake_timeout(timeout) from None
        except asyncio.CancelledError:
            self._cancel()  # the caller gave up: do not leave a half-open session behind
            raise

    async def close(self, *, force: bool = False) -> None:
        """Ends the session: a stdio server is asked to exit, then stopped. `force` (or a
        session that does not end in time) cancels whatever it is waiting for."""
        self.broken = True
        self._stop.set()
        if force:
            self._cancel()
        task = self._task
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_SECONDS)
        except TimeoutError:
            self._cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(task), CLOSE_TIMEOUT_SECONDS)
        except Exception:  # already logged by the session task
            pass

    def retire(self) -> asyncio.Task[None] | None:
        """Ends the session once no request is in flight on it: a session replaced by a
        new one must not cut a call that may still complete. Returns its task, which the
        caller keeps until it is done."""
        self.broken = True
        self._retiring = True
        if self.in_flight == 0:
            self._stop.set()
        return self._task if self._task is not None and not self._task.done() else None

    def _cancel(self) -> None:
        self._stop.set()
        if self._scope is not None:
            self._scope.cancel()

    async def _run(self) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self._stop.is_set():
                    scope.cancel()
                await self._serve()
            if scope.cancelled_caught:
                self._fail(None)
        except asyncio.CancelledError:
            self._fail(None)
            raise
        except BaseException as error:
            self._fail(error)
        finally:
            self.broken = True
            self.client = None

    async def _serve(self) -> None:
        async with contextlib.AsyncExitStack() as stack:
            transport: Transport = await self.server.open_transport(stack, self)
            client = Client(
                transport,
                cache=None,
                message_handler=self._on_message,
                client_info=CLIENT_INFO,
            )
            await stack.enter_async_context(client)
            self.client = client
            listening = self._listen_for_changes(client)
            self._ready.set_result(None)
            try:
                await self._stop.wait()
            finally:
                if listening is not None:
                    listening.cancel()
                    with contextlib.suppress(BaseException):
                        await listening

    def _fail(self, error: BaseException | None) -> None:
        self.broken = True
        if not self._ready.done():
            classified = (
                self.server.classify_open_error(error, self)
                if error is not None
                else self.server.unavailable("the connection attempt was cancelled")
            )
            self._ready.set_exception(classified)
        elif error is not None and not self._stop.is_set():
            log.warning(
                "MCP session ended; the next call reconnects",
                server=self.server.name,
                error=self.server.redact(repr(error)),
            )

    # -- what the server tells us ----------------------------------------------------------

    async def _on_message(self, message: Exception | mcp_types.ServerNotification) -> None:
        if isinstance(message, Exception):
            self.protocol_errors += 1
            log.warning(
                "MCP server sent something that is not MCP",
                server=self.server.name,
                error=type(message).__name__,
            )
        elif isinstance(message, mcp_types.ToolListChangedNotification):
            self.listed_digest = None

    def _listen_for_changes(self, client: Client) -> asyncio.Task[None] | None:
        """On 2026 connections the server sends change events only to a listen stream."""
        tools = client.server_capabilities.tools
        if client.protocol_version not in MODERN_PROTOCOL_VERSIONS or not (
            tools and tools.list_changed
        ):
            return None

        async def listen() -> None:
            subscribed = False
            try:
                async with client.listen(tools_list_changed=True) as subscription:
                    subscribed = True
                    async for _event in subscription:
                        self.listed_digest = None
            except Exception as error:
                if not subscribed:
                    log.info(
                        "MCP server offers no tool change events; changes are noticed when "
                        "a new session lists its tools",
                        server=self.server.name,
                        error=type(error).__name__,
                    )
                    return
                if not self._stop.is_set():
                    # The stream dropped: the server died, or the connection did. The next
                    # use opens a new session (and a new subscription).
                    self.broken = True
                    log.info(
                        "MCP session lost its change subscription; the next call reconnects",
                        server=self.server.name,
                        error=type(error).__name__,
                    )

        return asyncio.create_task(listen(), name=f"mcp listen {self.server.name}")

    # -- requests --------------------------------------------------------------------------

    async def request(self, call: Callable[[Client], Awaitable[T]]) -> T:
        """Sends one request; a failure of the connection itself marks the session broken
        (the next request reconnects) before it propagates."""
        client = self.client
        if client is None or self.broken:
            raise self.server.unavailable("the session is closed")
        self.in_flight += 1
        try:
            return await call(client)
        except MCPError as error:
            if self.server.is_connection_error(error):
                self.broken = True
                self._stop.set()
            raise
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self.server.is_transport_error(error):
                self.broken = True
                self._stop.set()
            raise
        finally:
            self.in_flight -= 1
            if self._retiring and self.in_flight == 0:
                self._stop.set()
