"""An agent whose MCP server command does not exist, for `durable-agent worker --agents`."""

from __future__ import annotations

from durable_agent import AgentBuilder, TestModel
from durable_agent.mcp import MCPServerStdio

ghost = (
    AgentBuilder(TestModel.with_text("x"))
    .name("mcp-ghost-cli")
    .toolset(MCPServerStdio("no-such-mcp-server-3f9a", name="ghost"))
    .build()
)
