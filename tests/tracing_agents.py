"""An agent for the tracing tests that run real worker processes (`--agents
tests.tracing_agents`): a slow tool (a worker can be killed in it), a tool that needs
approval, a final answer, and a continue-as-new after every model request. Side effects go
to files under $DA_TEST_DIR, through `tests.worker_agents`' helpers."""

from __future__ import annotations

import asyncio

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolContext,
    Usage,
)
from durable_agent.models import AgentInfo
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.temporal_support import fast_activity
from tests.worker_agents import _append, _dir

__all__ = ["AGENTS", "SECRET"]

SECRET = "the-launch-code-is-4711"
"""Said in the prompt and by the tools: it must never appear in a span unless asked for."""


def _script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    responses = sum(1 for m in messages if isinstance(m, ModelResponse))
    _append("model_requests", f"request {responses + 1}")
    usage = Usage(input_tokens=100 * (responses + 1), output_tokens=7)
    if responses == 0:
        call = ToolCallPart(id="slow_1", name="slow_tool", arguments={"label": SECRET})
        return ModelResponse(parts=[call], usage=usage, finish_reason="tool_calls")
    if responses == 1:
        call = ToolCallPart(id="deploy_1", name="deploy", arguments={"env": "prod"})
        return ModelResponse(parts=[call], usage=usage, finish_reason="tool_calls")
    return ModelResponse(parts=[TextPart(text=f"done {SECRET}")], usage=usage, finish_reason="stop")


async def slow_tool(ctx: ToolContext, label: str) -> str:
    """Blocks until the test creates the `release` file, so a worker can be killed mid-call."""
    _append("tool_started", label)
    while not (_dir() / "release").exists():
        await asyncio.sleep(0.05)
    return f"{label} done"


def deploy(env: str) -> str:
    """Deploys (after a human approved)."""
    _append("deployed", env)
    return f"deployed to {env} with {SECRET}"


tracing_agent = (
    AgentBuilder(FunctionModel(_script, name="trace-script"))
    .name("trace-demo")
    .tool(slow_tool)
    .tool(deploy)
    .approval_required_tools(["deploy"])
    .build()
)

AGENTS = [
    AgentRegistration(
        tracing_agent,
        AgentActivityConfig(
            tool_call=fast_activity(start_to_close=60, maximum_interval=2),
            model_request=fast_activity(start_to_close=60, maximum_interval=2),
            continue_as_new_after_steps=1,
        ),
    )
]
