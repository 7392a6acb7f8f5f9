"""Agents behind the release histories (tests/histories/v*/) and the upgrade test.

Workers load this module as `--agents upgrade_agents` with this directory on PYTHONPATH,
from the previous release's tree as well as from today's, so it uses only the stable core
API of `durable_agent` and imports the registry from wherever the running release has it.
Names, scripts, tools and activity options are fixed: the recorded histories depend on them.

Models are `FunctionModel` scripts keyed on how many responses the conversation already
has, so a request retried on another worker (or another release) gets the same answer.
Side effects go to files under $UPGRADE_TEST_DIR, one line per event, so a test can count
them across worker processes:

- `imports`: `<pid> <durable_agent.__file__>` per process that imported this module;
- `model_requests`: `<workflow id> <step> <agent>` per model request served;
- `tool_runs`: `<workflow id> <call id> <tool>` per completed call of the quick tools;
- `tool_started` / `tool_finished`: `<workflow id> <call id> <pid> <idempotency key>` per
  attempt of `slow_step`, which blocks until the file `release` exists.

(The first fields are those `tests/faults/support.py`'s `Faults.lines` and `.steps` read.)
"""

from __future__ import annotations

import asyncio
import importlib
import os
from pathlib import Path
from typing import Any

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

# Which release is running is decided by the files of the `durable_agent` actually imported,
# not by trying an import: under the previous release's tree, `import durable_agent.temporal`
# would fall through to the editable install of today's tree and mix the two releases.
if (Path(durable_agent.__file__).parent / "temporal").is_dir():  # since 4f4c538
    from datetime import timedelta

    from temporalio.common import RetryPolicy

    from durable_agent.temporal.registry import ActivityConfig, AgentActivityConfig

    # The module itself: releases up to v0.3.0 export a `registry` object from
    # `durable_agent.temporal`, which `import ... as` would find in its place.
    registry_module = importlib.import_module("durable_agent.temporal.registry")

    # Up to v0.3.0 one registry per process, filled when this module is imported; since,
    # each worker hosts what AGENTS lists.
    registry = getattr(registry_module, "registry", None)

    def fast_activity(start_to_close: float) -> Any:
        """Heartbeat every 2 s, retry after 0.2 s (since 8c9c1f1: Temporal's own types)."""
        return ActivityConfig(
            start_to_close_timeout=timedelta(seconds=start_to_close),
            heartbeat_timeout=timedelta(seconds=2),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=0.2),
                backoff_coefficient=2.0,
                maximum_interval=timedelta(seconds=60),
                maximum_attempts=5,
            ),
        )

else:  # v0.1.0 (ad71c7d): the registry is part of the application
    from activities.registry import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        ActivityConfig,
        AgentActivityConfig,
        registry,
    )

    def fast_activity(start_to_close: float) -> Any:
        """The same options in v0.1.0's terms."""
        return ActivityConfig(  # type: ignore[typeddict-unknown-key,unused-ignore]
            start_to_close_seconds=start_to_close,
            heartbeat_seconds=2,
            initial_interval_seconds=0.2,
            backoff_coefficient=2.0,
            maximum_interval_seconds=60,
            maximum_attempts=5,
        )


__all__ = ["AGENTS", "register_upgrade_agents"]

RELEASE_FILE = "release"


def side_effect_dir() -> Path:
    path = Path(os.environ.get("UPGRADE_TEST_DIR", "/tmp/durable-agent-upgrade-test"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def _append(name: str, line: str) -> None:
    with open(side_effect_dir() / name, "a") as handle:
        handle.write(line + "\n")


if "UPGRADE_TEST_DIR" in os.environ:
    _append("imports", f"{os.getpid()} {durable_agent.__file__}")


def _workflow_id() -> str:
    from temporalio import activity

    return (activity.info().workflow_id or "?") if activity.in_activity() else "in-process"


def _step(messages: list[ModelMessage], agent: str) -> int:
    """The 0-based step of this request; records it in `model_requests`."""
    step = sum(1 for m in messages if isinstance(m, ModelResponse))
    _append("model_requests", f"{_workflow_id()} {step} {agent}")
    return step


def _last_return(messages: list[ModelMessage]) -> ToolReturnPart:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in reversed(message.parts):
                if isinstance(part, ToolReturnPart):
                    return part
    raise AssertionError("no tool return in the conversation")


def _returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


def _calls(*calls: tuple[str, str, dict[str, Any]]) -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart(id=call_id, name=name, arguments=args) for name, call_id, args in calls]
    )


def _text(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(text=text)])


# -- tools --------------------------------------------------------------------------------


def _ran(ctx: ToolContext) -> None:
    _append("tool_runs", f"{_workflow_id()} {ctx.tool_call_id} {ctx.tool_name}")


def _attempt(ctx: ToolContext) -> str:
    return f"{_workflow_id()} {ctx.tool_call_id} {os.getpid()} {ctx.idempotency_key}"


def get_weather(ctx: ToolContext, city: str) -> str:
    """Current weather for a city."""
    _ran(ctx)
    return f"sunny in {city}"


def check_env(ctx: ToolContext, env: str) -> str:
    """Checks that an environment is healthy."""
    _ran(ctx)
    return f"{env} healthy"


def deploy(ctx: ToolContext, env: str) -> str:
    """Deploys to an environment (needs approval)."""
    _ran(ctx)
    return f"deployed to {env}"


async def slow_step(ctx: ToolContext, label: str) -> str:
    """Blocks until the `release` file exists, so a worker can be stopped mid-call."""
    _append("tool_started", _attempt(ctx))
    while not (side_effect_dir() / RELEASE_FILE).exists():
        await asyncio.sleep(0.05)
    _append("tool_finished", _attempt(ctx))
    return f"{label} done"


# -- models -------------------------------------------------------------------------------


def _weather_script(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages, "upgrade-weather") == 0:
        return _calls(
            ("get_weather", "w1", {"city": "Paris"}), ("get_weather", "w2", {"city": "Oslo"})
        )
    return _text("weather: " + "; ".join(_returns(messages)))


def _deployer_script(messages: list[ModelMessage], info: Any) -> ModelResponse:
    step = _step(messages, "upgrade-deployer")
    if step == 0:
        return _calls(("check_env", "c1", {"env": "prod"}))
    if step == 1:
        return _calls(("deploy", "d1", {"env": "prod"}))
    last = _last_return(messages)
    if last.is_error:
        return _text(f"not deployed ({last.error_kind})")
    return _text(f"done: {last.content}")


def _blocker_script(messages: list[ModelMessage], info: Any) -> ModelResponse:
    if _step(messages, "upgrade-blocker") == 0:
        return _calls(("slow_step", "s1", {"label": "slow"}))
    return _text(f"finished: {_last_return(messages).content}")


weather_agent = (
    AgentBuilder(FunctionModel(_weather_script, name="upgrade-weather-script"))
    .name("upgrade-weather")
    .instructions("Be brief.")
    .tool(get_weather)
    .build()
)

deployer_agent = (
    AgentBuilder(FunctionModel(_deployer_script, name="upgrade-deployer-script"))
    .name("upgrade-deployer")
    .tools([check_env, deploy])
    .approval_required_tools(["deploy"])
    .build()
)

blocker_agent = (
    AgentBuilder(FunctionModel(_blocker_script, name="upgrade-blocker-script"))
    .name("upgrade-blocker")
    .tool(slow_step)
    .build()
)

UPGRADE_AGENTS: list[Agent] = [weather_agent, deployer_agent, blocker_agent]
AGENTS: list[Any] = list(UPGRADE_AGENTS)

# Short timeouts for the blocking tool: a call whose worker died is retried within seconds.
ACTIVITIES = {
    "upgrade-blocker": AgentActivityConfig(
        tool_call=fast_activity(60), model_request=fast_activity(120)
    ),
}


def register_upgrade_agents(target: Any = None, *, replace: bool = False) -> None:
    """Registers the agents with their activity options in `target` (by default the
    process-wide registry of a release that has one: its --agents loader skips agents that
    are already registered, so this also sets the options on a worker)."""
    into = registry if target is None else target
    for agent in UPGRADE_AGENTS:
        if replace or agent.name not in into:
            into.register(agent, ACTIVITIES.get(agent.name), replace=replace)


if registry is not None:
    register_upgrade_agents()
else:
    AGENTS = [
        registry_module.AgentRegistration(
            agent, ACTIVITIES.get(agent.name) or AgentActivityConfig()
        )
        for agent in UPGRADE_AGENTS
    ]
