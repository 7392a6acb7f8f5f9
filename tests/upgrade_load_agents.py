"""Agents of the rolling upgrade under load (tests/upgrade_load.py): one of each kind of run
a fleet has mid-flight when it is upgraded.

Workers of the previous release (80075cc) and of today's tree both load this module as
`--agents upgrade_load_agents` (tests/ on PYTHONPATH), so it uses only what both releases
export: `AgentBuilder`, `FunctionModel`, `ToolContext`, `OpenAIChatModel` and the
registry's `ActivityConfig` / `AgentActivityConfig` / `AgentRegistration`.

- `load-deployer`: asks to `deploy` (needs approval), then says whether it did;
- `load-slow`: calls `slow_step`, which blocks until the file `release` exists;
- `load-lead`: delegates to the sub-agent `load-publisher`, whose `publish` needs approval;
- `load-quoted`: an `OpenAIChatModel` on the test's chat-completions server
  ($OPENAI_BASE_URL), limited by the workers' `--quota`: one `lookup` call, then a text.

Scripts are keyed on the responses the conversation already has, so a request retried on
another worker or release gets the same answer. Side effects go to files under
$UPGRADE_TEST_DIR, one line each, so the test counts them across processes:
`imports` (`<pid> <durable_agent.__file__>`, what `TreeWorkers` checks), `tool_runs`
(`<workflow id> <call id> <tool>` per completed call of `deploy` or `publish`, as
tests/subagent_agents.py's `_record` does), `tool_started` / `tool_finished`
(`<workflow id> <call id> <pid>` per attempt of `slow_step`).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.common import RetryPolicy

import durable_agent
from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolContext,
    ToolReturnPart,
)
from durable_agent.models.openai import OpenAIChatModel

registry = importlib.import_module("durable_agent.temporal.registry")

__all__ = ["AGENTS", "QUOTA_KEY", "QUOTA_MODEL"]

QUOTA_MODEL = "gpt-4o-mini"
QUOTA_KEY = f"openai:{QUOTA_MODEL}"
RELEASE_FILE = "release"


def side_effect_dir() -> Path:
    path = Path(os.environ.get("UPGRADE_TEST_DIR", "/tmp/durable-agent-upgrade-load"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _append(name: str, line: str) -> None:
    # One write of a short line in append mode: lines of concurrent processes do not mix.
    with open(side_effect_dir() / name, "a") as handle:
        handle.write(line + "\n")


if "UPGRADE_TEST_DIR" in os.environ:
    _append("imports", f"{os.getpid()} {durable_agent.__file__}")


def _workflow_id() -> str:
    from temporalio import activity

    return (activity.info().workflow_id or "?") if activity.in_activity() else "in-process"


def _step(messages: list[ModelMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, ModelResponse))


def _last_return(messages: list[ModelMessage]) -> ToolReturnPart:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, ToolReturnPart):
                    return part
    raise AssertionError("no tool return in the conversation")


def _call(name: str, call_id: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(id=call_id, name=name, arguments=args)])


def _text(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text=text)])


def _outcome(messages: list[ModelMessage], done: str) -> ModelResponse:
    """`done: <tool result>` when the call ran, `not done` when it was denied."""
    last = _last_return(messages)
    return _text("not done" if last.is_error else f"{done}: {last.content}")


# -- tools --------------------------------------------------------------------------------


def deploy(ctx: ToolContext, env: str) -> str:
    """Deploys to an environment (needs approval)."""
    _append("tool_runs", f"{_workflow_id()} {ctx.tool_call_id} deploy")
    return f"deployed to {env}"


def publish(ctx: ToolContext, title: str) -> str:
    """Publishes an article (needs approval)."""
    _append("tool_runs", f"{_workflow_id()} {ctx.tool_call_id} publish")
    return f"published {title}"


async def slow_step(ctx: ToolContext, label: str) -> str:
    """Blocks until the `release` file exists, so the kill finds it mid-call."""
    _append("tool_started", f"{_workflow_id()} {ctx.tool_call_id} {os.getpid()}")
    while not (side_effect_dir() / RELEASE_FILE).exists():
        await asyncio.sleep(0.2)
    _append("tool_finished", f"{_workflow_id()} {ctx.tool_call_id} {os.getpid()}")
    return f"{label} done"


def lookup(key: int) -> str:
    """Looks a key up."""
    return f"value {key}"


# -- agents -------------------------------------------------------------------------------


def _deployer(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages) == 0:
        return _call("deploy", "d1", {"env": "prod"})
    return _outcome(messages, "deployed")


def _slow(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages) == 0:
        return _call("slow_step", "s1", {"label": "slow"})
    return _outcome(messages, "finished")


def _publisher(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages) == 0:
        return _call("publish", "p1", {"title": "tides"})
    return _outcome(messages, "published")


def _lead(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages) == 0:
        return _call("load-publisher", "c1", {"prompt": "publish on tides"})
    return _text(f"lead: {_last_return(messages).content}")


publisher = (
    AgentBuilder(FunctionModel(_publisher, name="load-publisher-script"))
    .name("load-publisher")
    .tool(publish)
    .approval_required_tools(["publish"])
    .build()
)

UPGRADE_LOAD_AGENTS: list[Agent[Any]] = [
    AgentBuilder(FunctionModel(_deployer, name="load-deployer-script"))
    .name("load-deployer")
    .tool(deploy)
    .approval_required_tools(["deploy"])
    .build(),
    AgentBuilder(FunctionModel(_slow, name="load-slow-script"))
    .name("load-slow")
    .tool(slow_step)
    .build(),
    AgentBuilder(FunctionModel(_lead, name="load-lead-script"))
    .name("load-lead")
    .subagent(publisher)
    .build(),
    AgentBuilder(OpenAIChatModel(QUOTA_MODEL, api_key="sk-test"))
    .name("load-quoted")
    .instructions("Look the key up, then answer.")
    .tool(lookup)
    .build(),
]

_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=5),
)
SLOW_CALL = registry.ActivityConfig(
    start_to_close_timeout=timedelta(minutes=30),
    heartbeat_timeout=timedelta(seconds=15),
    retry_policy=_RETRY,
)
"""The blocked call outlives any wait for the kill; a killed attempt is retried once its
heartbeat (15 s) is missed, on whichever worker is up. Not shorter: hundreds of calls
heartbeating every second are more writes than the dev server's SQLite file keeps up
with (attempts then time out while their worker lives)."""

AGENTS: list[Any] = [
    registry.AgentRegistration(
        agent,
        registry.AgentActivityConfig(tool_call=SLOW_CALL)
        if agent.name == "load-slow"
        else registry.AgentActivityConfig(),
    )
    for agent in UPGRADE_LOAD_AGENTS
]
