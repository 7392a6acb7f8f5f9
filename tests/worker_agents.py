"""Agents for tests that run real worker processes (`--agents tests.worker_agents`).

Side effects go to files under $DA_TEST_DIR so the test process can count them across
worker processes: one line per model request served and per tool call started/finished.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolContext,
)
from durable_agent.models import AgentInfo
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.temporal_support import fast_activity

__all__ = ["AGENTS"]


def _dir() -> Path:
    path = Path(os.environ.get("DA_TEST_DIR", "/tmp/durable-agent-worker-test"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _append(name: str, line: str) -> None:
    with open(_dir() / name, "a") as handle:
        handle.write(line + "\n")


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    responses = sum(1 for m in messages if isinstance(m, ModelResponse))
    _append("model_requests", f"request {responses + 1}")
    if responses == 0:
        return ModelResponse(
            parts=[ToolCallPart(id="slow_1", name="slow_tool", arguments={"label": "first"})]
        )
    return ModelResponse(parts=[TextPart(text="finished after the slow tool")])


async def slow_tool(ctx: ToolContext, label: str) -> str:
    """Blocks until the test creates the `release` file, so a worker can be killed mid-call."""
    _append("tool_started", f"{label} {ctx.idempotency_key}")
    while not (_dir() / "release").exists():
        await asyncio.sleep(0.05)
    _append("tool_finished", f"{label} {ctx.idempotency_key}")
    return f"{label} done"


crash_agent = (
    AgentBuilder(FunctionModel(_script, name="crash-script"))
    .name("crash-demo")
    .tool(slow_tool)
    .build()
)

AGENTS = [
    AgentRegistration(
        crash_agent,
        AgentActivityConfig(
            tool_call=fast_activity(start_to_close=60, maximum_interval=60),
            model_request=fast_activity(start_to_close=120, maximum_interval=60),
        ),
    )
]
