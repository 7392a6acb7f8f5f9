"""python -m tests.support.marathon OUTCOME.json [STEPS]

A 5,000-step agent run through continue-as-new, on a dev server and worker of its own, its
outcome written as JSON. It spends about eight minutes waiting on the server (two activity
round trips a step) and little CPU, so the suite starts it at the session's beginning (see
`tests/head_start.py`) and `test_long_runs.py::test_five_thousand_step_run` reads the
outcome when its turn comes. A failure leaves the traceback on stderr and exits 1.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from durable_agent import (
    AgentBuilder,
    FunctionModel,
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UsageLimits,
)
from durable_agent.cli.logs import configure_logging
from durable_agent.models import AgentInfo
from durable_agent.temporal import AgentWorkflow
from durable_agent.temporal.devserver import DevServer
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration

from ..temporal_support import (
    fast_activity,
    file_storage_client,
    free_port,
    new_worker,
    start_agent,
    unique,
)

__all__ = ["FAST", "marathon"]

FAST = fast_activity(start_to_close=120, heartbeat=None, maximum_interval=60)
"""Long runs' activity options (`tests/test_long_runs.py` uses them too)."""


def _agent(steps: int) -> AgentRegistration:
    async def step(n: int) -> str:
        return f"step {n} ok"

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        done = sum(1 for m in messages if isinstance(m, ModelResponse))
        assert len(messages) == 2 * done + 1, f"model saw {len(messages)} messages at step {done}"
        if done < steps:
            return ModelResponse(
                parts=[ToolCallPart(id=f"s{done}", name="step", arguments={"n": done})]
            )
        return ModelResponse(parts=[TextPart(text=f"done after {done} steps")])

    agent = (
        AgentBuilder(FunctionModel(respond))
        .name(unique("marathon"))
        .tool(step)
        .usage_limits(UsageLimits(request_limit=None))
        .build()
    )
    return AgentRegistration(agent, AgentActivityConfig(model_request=FAST, tool_call=FAST))


async def marathon(steps: int, directory: Path) -> dict[str, Any]:
    """Runs the agent to its end; what the test checks of the run."""
    server = DevServer(directory / "dev.db", port=free_port(), ui_port=None)
    await server.start()
    try:
        # The run carries its conversation across continue-as-new; at thousands of steps
        # that is more than one payload holds, so it goes to external storage (files).
        client = await file_storage_client(server.address, directory)
        hosted = _agent(steps)
        started = time.monotonic()
        async with new_worker(client, max_concurrent_activities=8, agents=[hosted]) as worker:
            handle = await start_agent(client, worker, hosted.agent.name, "a long job")
            result = await asyncio.wait_for(handle.result(), 1500)
            view = await handle.query(AgentWorkflow.status)
        return {
            "steps": steps,
            "output": result.output,
            "run_step": result.run_step,
            "tool_calls": result.usage.tool_calls,
            "continued_as_new": view.continued_as_new,
            "checkpoint_count": view.checkpoint_count,
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        server.stop()


def main() -> None:
    configure_logging("console", level=logging.WARNING)  # 25,000 step logs help no one
    out = Path(sys.argv[1])
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    with tempfile.TemporaryDirectory(prefix="marathon-") as directory:
        outcome = asyncio.run(marathon(steps, Path(directory)))
    out.write_text(json.dumps(outcome))


if __name__ == "__main__":
    main()
