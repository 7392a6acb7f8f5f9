"""What a model is told about a tool, and what a tool is told about its call.

Both are shared nouns: model providers read `ToolDefinition`s, toolsets (MCP servers) and
function tools receive a `ToolContext`, and neither needs the engine that runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from .environment import Workspace

__all__ = ["OUTPUT_TOOL_NAME", "ToolContext", "ToolDefinition"]

OUTPUT_TOOL_NAME = "final_result"
"""The tool a model calls to return structured output when it cannot use a JSON schema."""


class ToolDefinition(BaseModel):
    """What a model is told about a tool."""

    name: str
    description: str = ""
    parameters_json_schema: dict[str, Any]
    strict: bool | None = None


@dataclass(frozen=True)
class ToolContext:
    """Handed to a tool whose first parameter is annotated `ToolContext`.

    `idempotency_key` is stable across retries of the same call (run or workflow id plus the
    tool call id): a tool with side effects uses it to make a retried call safe.

    `workspace` is the run's file tree for this call (`AgentBuilder.workspace`), None for
    an agent without one.
    """

    run_id: str
    conversation_id: str
    run_step: int
    tool_name: str
    tool_call_id: str
    retry: int = 0
    approved: bool = False
    idempotency_key: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    workspace: Workspace | None = None
