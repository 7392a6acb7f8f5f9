"""`EvalRun`: what an evaluator sees of one case's run, whichever way it ran.

A run of an agent is more than its output: evaluators check that it asked for approval,
which tools it called with what, what it cost. The same `EvalRun` comes from an in-process
run (`from_result`) and from a durable run on the workers (`durable_run`), so a dataset's
evaluators do not change with where the agent ran.

On the workers a case's run has the workflow id `eval-{name}-{case}`: evaluating the same
name again finds it (finished: its result; running: waits for it) instead of starting, and
paying for, the run again. A run that waits for a person is reported as `waiting` (with
its usage so far) rather than waited for.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, Field
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError
from temporalio.service import RPCError, RPCStatusCode

from ..agent.agent import AgentResult
from ..contract.errors import AgentError, UnknownAgentError
from ..contract.messages import ModelMessage, ModelResponse
from ..contract.usage import Usage
from ..engine.spec import AgentSpec
from ..temporal.client import AgentClient, AgentRunHandle
from ..temporal.client.calls import RunCalls
from ..temporal.run_errors import AlreadyStarted, RunFailed
from ..temporal.search_attributes import AGENT_STATUS
from ..testing.histories import fetch_chain
from ..testing.recording import recorded_steps

__all__ = ["EvalRun", "EvalToolCall", "durable_run", "eval_workflow_id", "from_result"]

POLL_SECONDS = (0.5, 1.0, 2.0)
"""How long to wait for a durable run's result before looking whether it waits for a
person (then every 2 s): a run that finishes in time is never asked."""


class EvalToolCall(BaseModel):
    """A tool call the model made: the tool's name and its arguments."""

    name: str
    arguments: Any = Field(default_factory=dict)


class EvalRun(BaseModel):
    """One case's run, as its evaluators get it (`ctx.output`).

    `status` is the run's (`completed`, `waiting` for a person, `failed`, ...), `output`
    its output (None unless completed; for an agent with an output type, that type),
    `tool_calls` every call the model made, in call order, `usage` what it used and cost
    (`usage.cost`, US dollars, None when unpriced), `workflow_id` its durable run (None
    in-process) and `error` why it failed."""

    output: Any = None
    status: str
    tool_calls: list[EvalToolCall] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    workflow_id: str | None = None
    error: str | None = None

    @property
    def cost(self) -> float | None:
        return self.usage.cost


def eval_workflow_id(name: str, case: str) -> str:
    return f"eval-{name}-{case}"


def _calls(responses: list[ModelResponse]) -> list[EvalToolCall]:
    return [
        EvalToolCall(name=call.name, arguments=call.arguments)
        for response in responses
        for call in response.tool_calls
    ]


def from_result(result: AgentResult[Any]) -> EvalRun:
    """An in-process run's `EvalRun`."""
    messages: list[ModelMessage] = list(result.messages)
    status = str(getattr(result.state.status, "value", result.state.status))
    return EvalRun(
        output=result.output if status == "completed" else None,
        status=status,
        tool_calls=_calls([m for m in messages if isinstance(m, ModelResponse)]),
        usage=result.usage,
    )


def failed_run(error: AgentError | Exception, workflow_id: str | None = None) -> EvalRun:
    message = error.message if isinstance(error, AgentError) else str(error)
    kind = getattr(error, "kind", None)
    return EvalRun(
        status="failed",
        error=f"{kind}: {message}" if kind else message,
        workflow_id=workflow_id,
    )


async def durable_run(
    client: AgentClient, agent: AgentSpec | str, prompt: str, workflow_id: str
) -> EvalRun:
    """The case's durable run: the existing one of `workflow_id`, else one started now;
    its `EvalRun` once it ended or waits for a person. A run that failed because no worker
    hosts the agent is started again (it did nothing), and raises `UnknownAgentError`."""
    name = agent if isinstance(agent, str) else agent.name
    handle = client.get(workflow_id)
    try:  # the raw call: servers word "not found" differently (the test server's names
        # the namespace), the status is what counts
        description = await client.run_handle(workflow_id).describe()
    except RPCError as error:
        if error.status != RPCStatusCode.NOT_FOUND:
            raise await RunCalls(
                handle.handle, timeout=client.timeout, namespace=client.namespace
            ).explain("describe", error) from None
        description = None
    failed = description is not None and description.status == WorkflowExecutionStatus.FAILED
    unknown = failed and await _never_hosted(handle)
    if description is None or unknown:
        try:
            handle = await client.start(name, prompt, workflow_id=workflow_id)
        except AlreadyStarted:
            handle = client.get(workflow_id)
    return await _outcome(client, handle, agent)


async def _never_hosted(handle: AgentRunHandle) -> bool:
    """Whether the closed run failed as `unknown_agent` (nothing ran: start it again)."""
    try:
        await handle.handle.result()
    except WorkflowFailureError as error:
        return "unknown_agent" in str(error.cause)
    return False


async def _outcome(client: AgentClient, handle: AgentRunHandle, agent: AgentSpec | str) -> EvalRun:
    waiting = asyncio.ensure_future(handle.result())
    try:
        for delay in _polls():
            done, _ = await asyncio.wait({waiting}, timeout=delay)
            if done:
                break
            if await _waits_for_a_person(handle):
                view = await handle.status()
                return EvalRun(
                    status="waiting",
                    tool_calls=await _tool_calls(client, handle.id),
                    usage=view.usage,
                    workflow_id=handle.id,
                )
    finally:
        if not waiting.done():
            waiting.cancel()
    try:
        result = waiting.result()
    except RunFailed as error:
        if "unknown_agent" in error.message:
            raise UnknownAgentError(
                f"no worker on task queue {client.task_queue!r} hosts agent "
                f"{agent if isinstance(agent, str) else agent.name!r} ({error.message})"
            ) from None
        run = failed_run(error, handle.id)
        return run.model_copy(update={"tool_calls": await _tool_calls(client, handle.id)})
    output = result.output
    output_type = None if isinstance(agent, str) else agent.output_type
    if result.structured_output is not None:
        output = result.structured_output
        if output_type is not None:
            output = output_type.model_validate(output)
    return EvalRun(
        output=output if result.status == "completed" else None,
        status=result.status,
        tool_calls=await _tool_calls(client, handle.id),
        usage=result.usage,
        workflow_id=handle.id,
    )


def _polls() -> Any:
    yield from POLL_SECONDS
    while True:
        yield POLL_SECONDS[-1]


async def _waits_for_a_person(handle: AgentRunHandle) -> bool:
    """From the run's `AgentStatus` search attribute (no worker needed), else its status."""
    description = await handle.describe()
    status = description.typed_search_attributes.get(AGENT_STATUS)
    if status is None:
        status = (await handle.status()).status
    return status == "waiting"


async def _tool_calls(client: AgentClient, workflow_id: str) -> list[EvalToolCall]:
    """Every tool call of the run's chain, from the responses its history records."""
    histories = await fetch_chain(client.client, workflow_id)
    steps = await recorded_steps(histories, client.client.data_converter)
    return _calls([step.response for step in steps])
