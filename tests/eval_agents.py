"""The agent the evaluation tests run, in-process, on a test environment and in worker
processes (`--agents tests.eval_agents`).

`forecaster` takes three steps (two tool calls, then its answer), each model request
priced at $0.001 and counted: one line `WORKFLOW_OR_PROMPT STEP` per request in
`$DA_TEST_DIR/model_requests` (when set), so a test can tell a case paid twice. `slow`
makes its tool take `EVAL_TOOL_SECONDS` (default 0), for a worker killed mid-evaluation.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from durable_agent import AgentBuilder, FunctionModel, ModelMessage, ModelResponse, TextPart, Usage
from durable_agent.models import AgentInfo
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.helpers import call, tool_response
from tests.temporal_support import fast_activity

__all__ = ["AGENTS", "deployer", "forecaster"]


def _prompt(messages: list[ModelMessage]) -> str:
    first = messages[0]
    for part in getattr(first, "parts", []):
        if part.kind == "user_prompt":
            return str(part.text)
    return "?"


def _answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    responses = sum(1 for m in messages if m.kind == "response")
    prompt = _prompt(messages)
    folder = os.environ.get("DA_TEST_DIR")
    if folder:
        with (Path(folder) / "model_requests").open("a") as log:
            log.write(f"{prompt}|{responses + 1}\n")
    usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15, cost=0.001)
    if responses < 2:
        city = prompt.split()[-1].rstrip("?")
        response = tool_response(call("forecast", f"f{responses}", city=city, day=responses))
        return response.model_copy(update={"usage": usage})
    return ModelResponse(parts=[TextPart(text=f"Sunny in {prompt.split()[-1]}")], usage=usage)


async def forecast(city: str, day: int) -> str:
    """The forecast for a city, `day` days ahead."""
    await asyncio.sleep(float(os.environ.get("EVAL_TOOL_SECONDS", "0")))
    return f"sunny in {city} on day {day}"


def deploy(env: str) -> str:
    return f"deployed to {env}"


forecaster = AgentBuilder(FunctionModel(_answer)).name("forecaster").tool(forecast).build()

deployer = (
    AgentBuilder(FunctionModel(_answer))
    .name("eval-deployer")
    .tool(deploy)
    .tool(forecast)
    .approval_required_tools(["forecast"])
    .build()
)

AGENTS = [
    AgentRegistration(
        forecaster, AgentActivityConfig(model_request=fast_activity(), tool_call=fast_activity())
    ),
]
