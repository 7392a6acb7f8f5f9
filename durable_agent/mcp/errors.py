"""What can go wrong with an MCP server, split by whether a retry can help.

`MCPServerUnavailable` (retryable): the server is down, slow, crashed or closed the
connection; on Temporal the activity is retried under the tool's activity options, and a
worker restarts the server for the next attempt. `MCPServerMisconfigured` (not retryable):
the command does not exist, the endpoint is not an MCP server, a schema is invalid; the
run fails at once (or the worker refuses to start) with what to change.

Messages name the server and what it runs or where it is (`MCPServer.describe()`), never
the values of its `env` or `headers`: they end up in logs and in Temporal's history.
"""

from __future__ import annotations

from ..contract.toolsets import ToolsetError, ToolsetMisconfigured

__all__ = ["MCPServerMisconfigured", "MCPServerUnavailable"]


class MCPServerUnavailable(ToolsetError):
    """The server could not be reached, or failed mid-call; a later attempt may succeed."""

    kind = "mcp_server_unavailable"


class MCPServerMisconfigured(ToolsetMisconfigured):
    """The server cannot work as configured; the message says what to change."""

    kind = "mcp_server_misconfigured"
