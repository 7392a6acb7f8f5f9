"""Tools from MCP servers (the Model Context Protocol), on the official `mcp` SDK.

    from durable_agent.mcp import MCPServerStdio, MCPServerStreamableHTTP

    github = MCPServerStdio("npx", ["-y", "@modelcontextprotocol/server-github"],
                            env={"GITHUB_PERSONAL_ACCESS_TOKEN": token}, name="github")
    docs = MCPServerStreamableHTTP("https://docs.example.com/mcp",
                                   headers={"Authorization": f"Bearer {key}"}, name="docs")
    agent = AgentBuilder(model).toolset(github).toolset(docs).build()

The servers' tools behave as function tools do: the model sees their schemas, arguments are
checked against them before the call, `approval_required_tools` names them (with the
server's `tool_prefix`, if any), and an `isError` result reaches the model as an error
return. Needs the extra: `pip install 'durable-agent[mcp]'`.
"""

from __future__ import annotations

try:
    import jsonschema as _jsonschema  # noqa: F401
    import mcp as _sdk  # noqa: F401  (the SDK; this package is named after it)
except ImportError as error:  # pragma: no cover - depends on the installation
    raise ImportError(
        "durable_agent.mcp needs the MCP SDK: pip install 'durable-agent[mcp]'"
    ) from error

from .errors import MCPServerMisconfigured, MCPServerUnavailable
from .results import to_toolset_result
from .servers import (
    IDEMPOTENCY_META_KEY,
    CallMCPTool,
    MCPServer,
    ProcessToolCall,
)
from .transports import MCPServerStdio, MCPServerStreamableHTTP

__all__ = [
    "IDEMPOTENCY_META_KEY",
    "CallMCPTool",
    "MCPServer",
    "MCPServerMisconfigured",
    "MCPServerStdio",
    "MCPServerStreamableHTTP",
    "MCPServerUnavailable",
    "ProcessToolCall",
    "to_toolset_result",
]
