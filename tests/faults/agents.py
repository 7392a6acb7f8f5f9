"""Agents for the fault suite's worker processes (`--agents tests.faults.agents`).

Every side effect is one line appended to a file under $DA_TEST_DIR, so the test process
can count model requests and tool calls across worker processes, kills and retries. Lines
start with the workflow id, so several runs can share one directory:

- `model_requests`:  `<workflow_id> <step> <attempt>`, written when a model request starts;
- `model_responses`: `<workflow_id> <step> <attempt>`, written just before it returns;
- `model_blocked`:   a request at a step the test asked to block;
- `tool_started` / `tool_finished` / `tool_blocked`:
  `<workflow_id> <call_id> <attempt> <idempotency_key> approved=<bool>`.

Blocking points are files the test creates: `block-model-<workflow_id>-<step>` makes the
model request of that step wait, `block-tool-<workflow_id>-<call_id>` makes that tool call
wait, in both cases until `release-<workflow_id>` exists.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

from temporalio import activity

from durable_agent import (
    Agent,
    AgentBuilder,
    FunctionModel,
    ModelHTTPError,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TestModel,
    TextPart,
    ToolCallPart,
    ToolContext,
    ToolReturnPart,
)
from durable_agent.models import AgentInfo
from durable_agent.temporal.registry import AgentActivityConfig, AgentRegistration
from tests.temporal_support import fast_activity

__all__ = ["AGENTS", "STEPS_OUTPUT", "FANOUT_TOOL_STEPS", "fanout_output"]


def test_dir() -> Path:
    path = Path(os.environ.get("DA_TEST_DIR", "/tmp/durable-agent-faults"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def append(name: str, line: str) -> None:
    with open(test_dir() / name, "a") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _current() -> tuple[str, int]:
    """(workflow id, attempt) of the activity this code runs in."""
    info = activity.info()
    return info.workflow_id, info.attempt


async def _wait_for_release(blocker: str, workflow_id: str) -> None:
    directory = test_dir()
    if not (directory / blocker).exists():
        return
    while not (directory / f"release-{workflow_id}").exists():
        await asyncio.sleep(0.05)


def _step(messages: list[ModelMessage]) -> int:
    """1-based number of this model request within the run."""
    return 1 + sum(1 for m in messages if isinstance(m, ModelResponse))


def _tool_returns(messages: list[ModelMessage]) -> list[str]:
    return [
        str(part.content)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def _enter_model(messages: list[ModelMessage]) -> tuple[str, int, int]:
    workflow_id, attempt = _current()
    step = _step(messages)
    append("model_requests", f"{workflow_id} {step} {attempt}")
    blocker = f"block-model-{workflow_id}-{step}"
    if (test_dir() / blocker).exists():
        append("model_blocked", f"{workflow_id} {step} {attempt}")
        await _wait_for_release(blocker, workflow_id)
    return workflow_id, step, attempt


def _leave_model(
    workflow_id: str, step: int, attempt: int, response: ModelResponse
) -> ModelResponse:
    append("model_responses", f"{workflow_id} {step} {attempt}")
    return response


def _tool_line(ctx: ToolContext) -> tuple[str, str]:
    workflow_id, attempt = _current()
    line = (
        f"{workflow_id} {ctx.tool_call_id} {attempt} {ctx.idempotency_key} approved={ctx.approved}"
    )
    return workflow_id, line


async def _tool_body(ctx: ToolContext, *, sleep: float = 0.0) -> None:
    workflow_id, line = _tool_line(ctx)
    append("tool_started", line)
    blocker = f"block-tool-{workflow_id}-{ctx.tool_call_id}"
    if (test_dir() / blocker).exists():
        append("tool_blocked", line)
        await _wait_for_release(blocker, workflow_id)
    if sleep:
        await asyncio.sleep(sleep)
    append("tool_finished", line)


def wait_in_thread(ctx: ToolContext) -> str:
    """A sync tool that blocks its thread until released and ignores cancellation, as a
    call into a blocking client library does."""
    workflow_id, line = _tool_line(ctx)
    append("tool_started", line)
    append("tool_blocked", line)
    while not (test_dir() / f"release-{workflow_id}").exists():
        time.sleep(0.05)
    append("tool_finished", line)
    return "released"


# -- fault-steps: two tool steps, then a text answer -----------------------------------------

STEPS_OUTPUT = "done: alpha-value, beta-value"


async def fetch(ctx: ToolContext, item: str) -> str:
    """Fetches one item.

    Args:
        item: the item name
    """
    await _tool_body(ctx)
    return f"{item}-value"


async def _steps_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    workflow_id, step, attempt = await _enter_model(messages)
    if step == 1:
        response = ModelResponse(
            parts=[ToolCallPart(id="call_fetch_1", name="fetch", arguments={"item": "alpha"})]
        )
    elif step == 2:
        response = ModelResponse(
            parts=[
                TextPart(text="one more"),
                ToolCallPart(id="call_fetch_2", name="fetch", arguments={"item": "beta"}),
            ]
        )
    else:
        response = ModelResponse(
            parts=[TextPart(text="done: " + ", ".join(_tool_returns(messages)))]
        )
    return _leave_model(workflow_id, step, attempt, response)


steps_agent = (
    AgentBuilder(FunctionModel(_steps_script, name="fault-steps-script"))
    .name("fault-steps")
    .instructions("Fetch alpha, then beta, then summarize.")
    .tool(fetch)
    .build()
)


# -- fault-approval: one tool that needs a human, then a text answer ---------------------------


async def deploy(ctx: ToolContext, env: str) -> str:
    """Deploys to an environment.

    Args:
        env: where to deploy
    """
    await _tool_body(ctx)
    return f"deployed to {env}"


async def _approval_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    workflow_id, step, attempt = await _enter_model(messages)
    returns = _tool_returns(messages)
    if step == 1:
        response = ModelResponse(
            parts=[ToolCallPart(id="call_fetch_1", name="fetch", arguments={"item": "alpha"})]
        )
    elif step == 2:
        response = ModelResponse(
            parts=[ToolCallPart(id="call_deploy_1", name="deploy", arguments={"env": "prod"})]
        )
    else:
        response = ModelResponse(parts=[TextPart(text=f"result: {returns[-1]}")])
    return _leave_model(workflow_id, step, attempt, response)


def _approval_agent(name: str) -> Agent:
    return (
        AgentBuilder(FunctionModel(_approval_script, name="approval-script"))
        .name(name)
        .tools([fetch, deploy])
        .approval_required_tools(["deploy"])
        .build()
    )


approval_agent = _approval_agent("fault-approval")
approval_can_agent = _approval_agent("fault-approval-can")
"""The same agent, registered to continue as new after every model request."""


# -- fault-flaky / fault-bad-request: model errors -------------------------------------------


async def _flaky_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """503, 503, then a plain TimeoutError, then an answer: all within the retry policy."""
    workflow_id, step, attempt = await _enter_model(messages)
    if attempt <= 2:
        raise ModelHTTPError(
            "upstream overloaded", status_code=503, model_name="flaky", body={"error": "busy"}
        )
    if attempt == 3:
        raise TimeoutError("model request timed out")
    return _leave_model(
        workflow_id, step, attempt, ModelResponse(parts=[TextPart(text="recovered")])
    )


async def _bad_request_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    await _enter_model(messages)
    raise ModelHTTPError(
        "invalid request: context length exceeded",
        status_code=400,
        model_name="bad",
        body={"error": "context_length_exceeded"},
    )


flaky_agent = (
    AgentBuilder(FunctionModel(_flaky_script, name="flaky-script")).name("fault-flaky").build()
)
bad_request_agent = (
    AgentBuilder(FunctionModel(_bad_request_script, name="bad-script"))
    .name("fault-bad-request")
    .build()
)


# -- fault-fanout: three tool steps with short sleeps, for the random-kill test ----------------

FANOUT_TOOL_STEPS = 3


def fanout_output(workflow_id: str) -> str:
    return f"{workflow_id}: " + " ".join(f"w{n}" for n in range(1, FANOUT_TOOL_STEPS + 1))


async def work(ctx: ToolContext, n: int) -> str:
    """One unit of work.

    Args:
        n: which unit
    """
    await _tool_body(ctx, sleep=0.2)
    return f"w{n}"


async def _fanout_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    workflow_id, step, attempt = await _enter_model(messages)
    if step <= FANOUT_TOOL_STEPS:
        response = ModelResponse(
            parts=[ToolCallPart(id=f"call_work_{step}", name="work", arguments={"n": step})]
        )
    else:
        response = ModelResponse(
            parts=[TextPart(text=f"{workflow_id}: " + " ".join(_tool_returns(messages)))]
        )
    return _leave_model(workflow_id, step, attempt, response)


fanout_agent = (
    AgentBuilder(FunctionModel(_fanout_script, name="fanout-script"))
    .name("fault-fanout")
    .tool(work)
    .build()
)


sync_block_agent = (
    AgentBuilder(
        TestModel.with_responses(
            [
                ModelResponse(parts=[ToolCallPart(id="w1", name="wait_in_thread", arguments={})]),
                ModelResponse(parts=[TextPart(text="waited")]),
            ]
        )
    )
    .name("fault-sync-block")
    .tool(wait_in_thread)
    .build()
)

# -- fault-stream: one streamed answer, for kills in the middle of a stream -------------------

STREAM_TEXT = "The first half of this answer is written, then the second half of it follows."


async def _stream_script(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | ModelResponse]:
    """Streams `STREAM_TEXT` eight characters at a time; with a blocker for step 1 it stops
    halfway (`model_blocked`) until released, so a test can kill the worker mid-stream."""
    workflow_id, attempt = _current()
    step = _step(messages)
    append("model_requests", f"{workflow_id} {step} {attempt}")
    half = len(STREAM_TEXT) // 2
    blocker = f"block-model-{workflow_id}-{step}"
    for start in range(0, len(STREAM_TEXT), 8):
        blocked = (test_dir() / blocker).exists()
        if start >= half and blocked and not (test_dir() / f"release-{workflow_id}").exists():
            append("model_blocked", f"{workflow_id} {step} {attempt}")
            await _wait_for_release(blocker, workflow_id)
        yield STREAM_TEXT[start : start + 8]
        await asyncio.sleep(0.03)
    append("model_responses", f"{workflow_id} {step} {attempt}")


stream_agent = (
    AgentBuilder(FunctionModel(stream_function=_stream_script, name="stream-script"))
    .name("fault-stream")
    .build()
)

_AGENTS = [
    steps_agent,
    stream_agent,
    sync_block_agent,
    approval_agent,
    approval_can_agent,
    flaky_agent,
    bad_request_agent,
    fanout_agent,
]


def _config(**extra: object) -> AgentActivityConfig:
    """Five attempts for a model request, ten for a tool call; `extra` overrides either.

    The random-kill test's model requests get ten as well: it SIGKILLs up to six workers
    while each model request has a 2 s heartbeat, so one request can lose an attempt to
    several kills in a row and another to a worker starved of CPU by its replacements
    importing beside it. With more attempts than kills, a run that still fails lost its
    attempts to something other than the kills.
    """
    options: dict[str, object] = {
        "prepare_model_request": fast_activity(start_to_close=10),
        "model_request": fast_activity(),
        "tool_call": fast_activity(maximum_attempts=10),
        "validate_output": fast_activity(start_to_close=10),
    }
    return AgentActivityConfig(**(options | extra))  # type: ignore[arg-type]


AGENTS = [
    AgentRegistration(
        agent,
        _config(continue_as_new_after_steps=1)
        if agent is approval_can_agent
        else _config(delta_flush_interval=timedelta(milliseconds=50))
        if agent is stream_agent
        else _config(model_request=fast_activity(maximum_attempts=10))
        if agent is fanout_agent
        else _config(),
    )
    for agent in _AGENTS
]
"""What `--agents tests.faults.agents` hosts, with these activity options."""
