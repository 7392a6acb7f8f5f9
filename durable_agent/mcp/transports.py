"""The two ways to reach an MCP server: `MCPServerStdio` (a command the worker starts) and
`MCPServerStreamableHTTP` (a URL it connects to). What they share is `servers.MCPServer`."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit, urlunsplit

import httpx2
import mcp_types
from mcp import MCPError, StdioServerParameters
from mcp.client import Transport
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from ..contract.errors import AgentError, UserError
from .servers import MCPServer, ProcessToolCall
from .session import Session

__all__ = ["MCPServerStdio", "MCPServerStreamableHTTP"]


def _default_stdio_name(command: str, args: Sequence[str]) -> str:
    """The last argument that is not a flag names the server (`npx -y
    @modelcontextprotocol/server-github` → `server-github`, `python -m mcp_server_time` →
    `mcp_server_time`), else the command."""
    for arg in [*reversed(args), command]:
        if not arg or arg.startswith("-"):
            continue
        candidate = Path(arg.rstrip("/")).name
        candidate = re.split(r"(?<=.)[@:]", candidate)[0]  # a version or image tag
        candidate = re.sub(r"\.(py|js|mjs|cjs|ts|exe)$", "", candidate)
        cleaned = re.sub(r"[^A-Za-z0-9_.-]", "-", candidate).strip("-.")[:64]
        if cleaned:
            return cleaned
    return "mcp"


def _errlog() -> TextIO:
    """Where a stdio server's stderr goes: the worker's stderr (a file it can write to)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__ or open(os.devnull, "w")
    return sys.stderr


class MCPServerStdio(MCPServer):
    """An MCP server the worker (or in-process run) starts as a subprocess and talks to on
    its stdin/stdout: `MCPServerStdio("npx", ["-y", "@modelcontextprotocol/server-github"],
    env={"GITHUB_TOKEN": token}, name="github")`.

    The process inherits only PATH, HOME and a few other safe variables plus `env`; its
    stderr goes to the worker's. One process per server per worker process, kept across
    calls and runs, restarted when it dies, stopped when the worker (or run) ends.
    """

    def __init__(
        self,
        command: str,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        tool_prefix: str | None = None,
        max_retries: int = 1,
        connect_timeout_seconds: float = 10.0,
        call_timeout_seconds: float | None = None,
        process_tool_call: ProcessToolCall | None = None,
    ) -> None:
        if not isinstance(command, str) or not command.strip():
            raise UserError(f"MCPServerStdio needs a command to run, got {command!r}")
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise UserError(
                f"MCPServerStdio args must be a list of strings, got {args!r} (split a command "
                "line into its arguments)"
            )
        if env is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise UserError("MCPServerStdio env must map strings to strings")
        self.command = command
        self.args = list(args)
        self._env = dict(env) if env is not None else None
        self.cwd = cwd
        super().__init__(
            name=name if name is not None else _default_stdio_name(command, self.args),
            tool_prefix=tool_prefix,
            max_retries=max_retries,
            connect_timeout_seconds=connect_timeout_seconds,
            call_timeout_seconds=call_timeout_seconds,
            process_tool_call=process_tool_call,
        )

    @property
    def env_names(self) -> list[str]:
        """The names of the variables `env` sets (their values are not shown anywhere)."""
        return sorted(self._env or {})

    def describe(self) -> str:
        return "command " + repr(" ".join([self.command, *self.args]))

    def secrets(self) -> Sequence[str]:
        return list((self._env or {}).values())

    async def open_transport(self, stack: contextlib.AsyncExitStack, session: Session) -> Transport:
        params = StdioServerParameters(
            command=self.command, args=self.args, env=self._env, cwd=self.cwd
        )
        return stdio_client(params, errlog=_errlog())

    def classify(self, error: BaseException, session: Session) -> AgentError | None:
        if isinstance(error, FileNotFoundError | NotADirectoryError):
            where = f" in {self.cwd}" if self.cwd is not None else ""
            return self.misconfigured(
                f"cannot start {self.command!r}{where}: no such command; install it on the "
                "worker (is it on the worker's PATH?) or give its full path"
            )
        if isinstance(error, PermissionError):
            return self.misconfigured(
                f"cannot start {self.command!r}: permission denied; make it executable"
            )
        if isinstance(error, MCPError) and error.code == mcp_types.CONNECTION_CLOSED:
            if session.protocol_errors:
                return self.misconfigured(
                    "it does not speak MCP: it wrote lines to stdout that are not JSON-RPC "
                    "messages (an MCP server keeps stdout for MCP and logs to stderr); run the "
                    "command yourself to see what it prints"
                )
            return self.unavailable(
                "it exited before completing the MCP handshake; its stderr (in the worker's "
                "log) says why"
            )
        if isinstance(error, MCPError):
            return self.misconfigured(
                f"it refused the MCP handshake (MCP error {error.code}: {error.message})"
            )
        if isinstance(error, RuntimeError) and "protocol version" in str(error):
            return self.misconfigured(f"{error}; use a server built on a current MCP SDK")
        return None


def _safe_url(url: str) -> str:
    """The URL without user:password or query (either may carry a token)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class MCPServerStreamableHTTP(MCPServer):
    """An MCP server the worker reaches over streamable HTTP:
    `MCPServerStreamableHTTP("https://mcp.example.com/mcp", headers={"Authorization":
    f"Bearer {token}"}, name="docs")`.

    `headers` go with every request and stay in this process: messages show the URL without
    its query string or user info, never a header.
    """

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        tool_prefix: str | None = None,
        max_retries: int = 1,
        connect_timeout_seconds: float = 10.0,
        call_timeout_seconds: float | None = None,
        process_tool_call: ProcessToolCall | None = None,
    ) -> None:
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise UserError(
                f"MCPServerStreamableHTTP needs an http(s) URL such as "
                f"'http://localhost:8000/mcp', got {url!r}"
            )
        if headers is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise UserError("MCPServerStreamableHTTP headers must map strings to strings")
        self.url = url
        self._headers = dict(headers or {})
        default = re.sub(r"[^A-Za-z0-9_.-]", "-", parts.hostname)[:64]
        super().__init__(
            name=name if name is not None else default,
            tool_prefix=tool_prefix,
            max_retries=max_retries,
            connect_timeout_seconds=connect_timeout_seconds,
            call_timeout_seconds=call_timeout_seconds,
            process_tool_call=process_tool_call,
        )

    @property
    def header_names(self) -> list[str]:
        return sorted(self._headers)

    def describe(self) -> str:
        return _safe_url(self.url)

    def secrets(self) -> Sequence[str]:
        parts = urlsplit(self.url)
        extra = [parts.password] if parts.password else []
        if parts.query:
            extra.append(parts.query)
        return [*self._headers.values(), *extra]

    async def open_transport(self, stack: contextlib.AsyncExitStack, session: Session) -> Transport:
        async def remember_status(response: httpx2.Response) -> None:
            if response.status_code >= 400:
                session.state["status"] = response.status_code

        http = httpx2.AsyncClient(
            headers=self._headers,
            timeout=httpx2.Timeout(30.0, read=300.0),
            event_hooks={"response": [remember_status]},
        )
        await stack.enter_async_context(http)
        return streamable_http_client(self.url, http_client=http)

    def is_connection_error(self, error: MCPError) -> bool:
        # A restarted server has forgotten our session: the next call opens a new one.
        return super().is_connection_error(error) or (
            error.code == mcp_types.INVALID_REQUEST and "Session terminated" in error.message
        )

    def classify(self, error: BaseException, session: Session) -> AgentError | None:
        if isinstance(error, httpx2.UnsupportedProtocol | httpx2.InvalidURL):
            return self.misconfigured(f"the URL cannot be used ({error}); give an http(s) URL")
        if isinstance(error, httpx2.TransportError):
            return self.unavailable(
                f"no answer ({type(error).__name__}: {error}); check the URL and that the "
                "server is running"
            )
        status = session.state.get("status")
        if isinstance(error, MCPError) and isinstance(status, int):
            if status in (401, 403):
                return self.misconfigured(
                    f"it refused our requests (HTTP {status}); check the credentials in headers"
                )
            if status == 429 or status >= 500:
                return self.unavailable(f"it answered HTTP {status}; it may recover")
            return self.misconfigured(
                f"it answered HTTP {status}: is this the server's MCP endpoint (often "
                "ending in /mcp)?"
            )
        if isinstance(error, MCPError):
            return self.misconfigured(
                f"it answered, but not as an MCP server (MCP error {error.code}: "
                f"{error.message}); is this the server's MCP endpoint?"
            )
        return None
