"""An agent with a workspace for tests that SIGKILL worker processes
(`--agents tests.workspace_agents`); its store comes from DURABLE_AGENT_WORKSPACE_STORE.

`scribble` notes what it found (`tool_started`), writes through the file methods and in
`local_dir()`, then blocks until the test creates `release`: a worker can be killed after
it wrote and before it returned.
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
    if responses == 0:
        return ModelResponse(parts=[ToolCallPart(id="s1", name="scribble", arguments={})])
    if responses == 1:
        return ModelResponse(parts=[ToolCallPart(id="r1", name="read_state", arguments={})])
    return ModelResponse(parts=[TextPart(text="scribbled")])


async def scribble(ctx: ToolContext) -> str:
    workspace = ctx.workspace
    assert workspace is not None
    found = workspace.read_text("state.txt")
    extra = sorted(p.name for p in workspace.local_dir().iterdir())
    _append("tool_started", f"{found} {','.join(extra)}")
    attempt = len((_dir() / "tool_started").read_text().splitlines())
    workspace.write_text("state.txt", f"written by attempt {attempt}")
    (workspace.local_dir() / f"attempt-{attempt}.txt").write_text("left in local_dir")
    while not (_dir() / "release").exists():
        await asyncio.sleep(0.05)
    return "scribbled"


async def read_state(ctx: ToolContext) -> str:
    assert ctx.workspace is not None
    return ctx.workspace.read_text("state.txt") + " | " + ",".join(ctx.workspace.list())


scribbler = (
    AgentBuilder(FunctionModel(_script, name="scribble-script"))
    .name("ws-scribbler")
    .tool(scribble)
    .tool(read_state)
    .workspace({"state.txt": "clean"})
    .build()
)

AGENTS = [
    AgentRegistration(
        scribbler,
        AgentActivityConfig(
            tool_call=fast_activity(start_to_close=60, maximum_interval=60),
            model_request=fast_activity(start_to_close=120, maximum_interval=60),
        ),
    )
]
