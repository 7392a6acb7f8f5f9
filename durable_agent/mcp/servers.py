"""MCP servers as toolsets: `MCPServerStdio` (a command the worker starts) and
`MCPServerStreamableHTTP` (a URL it connects to).

A server object is configuration plus at most one live session per process. It is opened
(`async with server:`, counted) for as long as it may be used: an in-process run opens it
for the run, a worker for its lifetime. The session itself is made on first use and made
again after it broke, so a crashed stdio server is restarted by the next call (on Temporal:
the next attempt of the activity).

`env` and `headers` stay in this object: they are never serialized, never part of a
listing, an activity input or an error message, so they never reach Temporal's history.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Self, cast

import anyio
import httpx2
import mcp_types
import structlog
from mcp import Client, MCPError
from mcp.client import Transport
from pydantic import ValidationError

from ..contract.errors import AgentError, UserError
from ..contract.tools import ToolContext
from ..contract.toolsets import ToolsetListing, ToolsetResult, ToolsetTool, listing_digest
from .errors import MCPServerMisconfigured, MCPServerUnavailable
from .results import to_toolset_result
from .schemas import SchemaChecker
from .session import Session

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "CallMCPTool",
    "MCPServer",
    "ProcessToolCall",
]

CallMCPTool = Callable[[dict[str, Any]], Awaitable[ToolsetResult]]
"""Calls the tool on the server with the given arguments."""

ProcessToolCall = Callable[[ToolContext, CallMCPTool, dict[str, Any]], Awaitable[ToolsetResult]]
"""Wraps every call of a server's tools: decide by `ctx.tool_name` (the name the model
sees) and `ctx.approved` whether to `raise ApprovalRequired(...)` or `CallDeferred(...)`,
change the arguments, or post-process the result of `await call_tool(arguments)`."""

IDEMPOTENCY_META_KEY = "durable-agent/idempotency-key"
"""Sent in each call's `_meta`: the same on every attempt of one tool call, so a server
with side effects can tell a retried call from a new one."""

log = structlog.get_logger("durable_agent.mcp")

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_NOT_TOOL_CHARS = re.compile(r"[^A-Za-z0-9_-]")
MAX_PAGES = 100
"""A server whose tool list never ends (a cursor bug) is cut off here, not followed forever."""


def _leaves(error: BaseException) -> list[BaseException]:
    """The real errors inside the SDK's nested task-group exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


class MCPServer(ABC):
    """One MCP server an agent takes tools from (see the module docstring)."""

    kind = "mcp"
    """What activity summaries call it: `mcp github:create_issue · call_1`."""

    def __init__(
        self,
        *,
        name: str,
        tool_prefix: str | None = None,
        max_retries: int = 1,
        connect_timeout_seconds: float = 10.0,
        call_timeout_seconds: float | None = None,
        process_tool_call: ProcessToolCall | None = None,
    ) -> None:
        if not isinstance(name, str) or not _SERVER_NAME.match(name):
            raise UserError(
                f"MCP server name {name!r} is not allowed: use 1-64 letters, digits, '_', '-' "
                "or '.' (it names the server in summaries, errors and run state)"
            )
        if tool_prefix is not None and not _TOOL_NAME.match(tool_prefix):
            raise UserError(
                f"tool_prefix {tool_prefix!r} of MCP server {name!r} is not allowed: use "
                "letters, digits, '_' or '-'"
            )
        if max_retries < 0:
            raise UserError(f"max_retries of MCP server {name!r} must be 0 or more")
        if connect_timeout_seconds <= 0:
            raise UserError(f"connect_timeout_seconds of MCP server {name!r} must be above 0")
        self._name = name
        self.tool_prefix = tool_prefix
        self._max_retries = max_retries
        self.connect_timeout_seconds = connect_timeout_seconds
        self.call_timeout_seconds = call_timeout_seconds
        self.process_tool_call = process_tool_call
        self._users = 0
        self._session: Session | None = None
        self._retired: set[asyncio.Task[None]] = set()
        self._lock: asyncio.Lock | None = None
        self._schemas = SchemaChecker(name)
        self.sessions_opened = 0
        """How many sessions this process opened (each starts a stdio server's process)."""

    # -- what the Toolset protocol asks for ------------------------------------------------

    @property
    def name(self) -> str:
        return self._name

    @property
    def max_retries(self) -> int:
        return self._max_retries

    @property
    def is_open(self) -> bool:
        return self._users > 0

    async def __aenter__(self) -> Self:
        """Keeps the server usable until the matching exit; connects on first use."""
        self._users += 1
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._users = max(self._users - 1, 0)
        if self._users == 0:
            await self.close()
            # The next opening may come from another event loop (a later asyncio.run).
            self._lock = None

    async def close(self) -> None:
        """Ends the live session now (a later use of an open server reconnects)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        retired, self._retired = list(self._retired), set()
        for task in retired:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 15)

    async def list_tools(self) -> ToolsetListing:
        session = await self._connected()
        try:
            return await self._list(session)
        except MCPServerUnavailable:
            if not session.broken:
                raise
            # The session had died (a server killed between uses is noticed only now).
            # Listing changes nothing on the server, so it is asked once more, anew.
            return await self._list(await self._connected())

    def argument_problem(self, tool: ToolsetTool, arguments: dict[str, Any]) -> str | None:
        return self._schemas.problem(tool.remote_name, tool.parameters_json_schema, arguments)

    async def call_tool(
        self, ctx: ToolContext, tool: ToolsetTool, arguments: dict[str, Any]
    ) -> ToolsetResult:
        async def call(args: dict[str, Any]) -> ToolsetResult:
            return await self._call(ctx, tool, args)

        if self.process_tool_call is None:
            return await call(arguments)
        return await self.process_tool_call(ctx, call, arguments)

    async def tools_changed(self, digest: str) -> bool:
        """Asked after each call: compares with this session's own last listing (listing
        again only when there is none, or the server announced a change since)."""
        session = self._session
        if session is None or session.broken:
            return False  # a new session lists at its first call and tells then
        if session.listed_digest is None:
            try:
                await self._list(session)
            except AgentError as error:
                log.warning(
                    "could not list tools after a call", server=self.name, error=error.message
                )
                return False
        return session.listed_digest != digest

    # -- what servers differ in ------------------------------------------------------------

    @abstractmethod
    def describe(self) -> str:
        """What the server runs or where it is, for messages: never a secret."""

    @abstractmethod
    def secrets(self) -> Sequence[str]:
        """Values that must not appear in any message (env values, header values)."""

    @abstractmethod
    async def open_transport(self, stack: contextlib.AsyncExitStack, session: Session) -> Transport:
        """The SDK transport for a new session; resources it needs go on `stack`."""

    @abstractmethod
    def classify(self, error: BaseException, session: Session) -> AgentError | None:
        """This kind of server's reading of a failed connection attempt, or None."""

    def is_connection_error(self, error: MCPError) -> bool:
        """Whether an MCP error means the session is gone (and the next call reconnects)."""
        return error.code == mcp_types.CONNECTION_CLOSED

    def is_transport_error(self, error: BaseException) -> bool:
        return isinstance(
            error,
            httpx2.TransportError
            | anyio.ClosedResourceError
            | anyio.BrokenResourceError
            | anyio.EndOfStream
            | ConnectionError,
        )

    # -- errors ----------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        for secret in self.secrets():
            if len(secret) >= 3:
                text = text.replace(secret, "***")
        return text

    def unavailable(self, problem: str) -> MCPServerUnavailable:
        return MCPServerUnavailable(
            self.redact(f"MCP server {self.name!r} ({self.describe()}): {problem}")
        )

    def misconfigured(self, problem: str) -> MCPServerMisconfigured:
        return MCPServerMisconfigured(
            self.redact(f"MCP server {self.name!r} ({self.describe()}): {problem}")
        )

    def handshake_timeout(self, timeout: float) -> MCPServerUnavailable:
        return self.unavailable(
            f"no MCP handshake within {timeout:g} s (connect_timeout_seconds); the server is "
            "slow to start, stuck, or does not speak MCP"
        )

    def classify_open_error(self, error: BaseException, session: Session) -> AgentError:
        for leaf in _leaves(error):
            if isinstance(leaf, AgentError):
                return leaf
            classified = self.classify(leaf, session)
            if classified is not None:
                return classified
        leaf = _leaves(error)[0]
        return self.unavailable(f"could not connect: {type(leaf).__name__}: {leaf}")

    # -- internals -------------------------------------------------------------------------

    async def _connected(self) -> Session:
        if not self.is_open:
            raise UserError(
                f"MCP server {self.name!r} is not open: run the agent with agent.run(...) "
                "(which opens its servers for the run), use `async with server:`, or host "
                "the agent on a worker with DurableAgentPlugin"
            )
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            session = self._session
            if session is not None and not session.broken:
                return session
            if session is not None:
                task = session.retire()
                if task is not None:
                    self._retired.add(task)
                    task.add_done_callback(self._retired.discard)
            self._session = None
            fresh = Session(self)
            self.sessions_opened += 1
            await fresh.open(self.connect_timeout_seconds)
            self._session = fresh
            return fresh

    async def _list(self, session: Session) -> ToolsetListing:
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            try:
                page = await session.request(_list_page(cursor))
            except MCPError as error:
                raise self._request_error(error, "listing its tools") from None
            except ValidationError as error:
                raise self.misconfigured(
                    f"its tool list is not valid MCP ({error.error_count()} problem(s), first: "
                    f"{error.errors()[0]['msg']}); fix the server"
                ) from None
            except AgentError:
                raise
            except Exception as error:
                raise self._failed(error, "listing its tools") from error
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        else:
            raise self.misconfigured(
                f"its tool list did not end after {MAX_PAGES} pages; fix the server's paging"
            )
        tools = [self._tool(tool) for tool in listed]
        seen: dict[str, str] = {}
        for tool in tools:
            if tool.name in seen:
                raise self.misconfigured(
                    f"tools {seen[tool.name]!r} and {tool.remote_name!r} both become "
                    f"{tool.name!r} for the model; rename one on the server"
                )
            seen[tool.name] = tool.remote_name
        listing = ToolsetListing(toolset=self.name, tools=tools, digest=listing_digest(tools))
        session.listed_digest = listing.digest
        return listing

    def _tool(self, tool: mcp_types.Tool) -> ToolsetTool:
        name = _NOT_TOOL_CHARS.sub("_", tool.name)
        if self.tool_prefix:
            name = f"{self.tool_prefix}_{name}"
        if not _TOOL_NAME.match(name):
            raise self.misconfigured(
                f"tool {tool.name!r} would be called {name!r} by the model, which models "
                "refuse (at most 64 letters, digits, '_' or '-'); use a shorter tool_prefix"
            )
        schema = dict(tool.input_schema)
        self._schemas.compile(tool.name, schema)
        return ToolsetTool(
            name=name,
            toolset=self.name,
            remote_name=tool.name,
            description=tool.description or tool.title or "",
            parameters_json_schema=schema,
        )

    async def _call(
        self, ctx: ToolContext, tool: ToolsetTool, arguments: dict[str, Any]
    ) -> ToolsetResult:
        session = await self._connected()
        meta = cast(mcp_types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: ctx.idempotency_key})
        try:
            result = await session.request(
                lambda client: client.call_tool(
                    tool.remote_name,
                    arguments,
                    read_timeout_seconds=self.call_timeout_seconds,
                    meta=meta,
                )
            )
        except MCPError as error:
            if self.is_connection_error(error) or error.code == mcp_types.REQUEST_TIMEOUT:
                raise self._request_error(error, f"calling {tool.remote_name!r}") from None
            # The server refused the call itself (unknown tool, bad params): the model reads
            # why, as it reads a tool's own error.
            return ToolsetResult(
                content=f"MCP error {error.code}: {error.message}",
                is_error=True,
                error_kind="mcp_error",
            )
        except ValidationError as error:
            raise self.misconfigured(
                f"tool {tool.remote_name!r} returned a result that is not valid MCP "
                f"({error.errors()[0]['msg']}); fix the server"
            ) from None
        except AgentError:
            raise
        except RuntimeError as error:
            if self.is_transport_error(error):
                raise self._failed(error, f"calling {tool.remote_name!r}") from error
            # The SDK checks structured results against the tool's output schema.
            return ToolsetResult(
                content=f"The tool's result was rejected: {error}",
                is_error=True,
                error_kind="mcp_invalid_result",
            )
        except Exception as error:
            raise self._failed(error, f"calling {tool.remote_name!r}") from error
        return to_toolset_result(result)

    def _request_error(self, error: MCPError, doing: str) -> AgentError:
        if self.is_connection_error(error):
            return self.unavailable(
                f"the connection closed while {doing} (the server crashed, exited or "
                "restarted); the next attempt reconnects"
            )
        if error.code == mcp_types.REQUEST_TIMEOUT:
            return self.unavailable(f"timed out while {doing} (call_timeout_seconds)")
        return self.misconfigured(f"refused {doing}: MCP error {error.code}: {error.message}")

    def _failed(self, error: BaseException, doing: str) -> AgentError:
        return self.unavailable(f"failed while {doing}: {type(error).__name__}: {error}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, {self.describe()})"


def _list_page(cursor: str | None) -> Callable[[Client], Awaitable[mcp_types.ListToolsResult]]:
    async def page(client: Client) -> mcp_types.ListToolsResult:
        return await client.list_tools(cursor=cursor)

    return page
