"""The in-process driver: node work done in this process, sub-agents run as loops of their
own here.

`Agent.run` / `resume` / `resume_after_hitl` drive a run with a `DirectNodeRunner`; a
sub-agent's call runs the sub-agent's own loop on the parent's executor and ids, so its
checkpoints reach the parent's executor with their `metadata` naming the parent run and
call. (On Temporal a sub-agent is a child workflow: `durable_agent.temporal`.)
"""

from __future__ import annotations

import asyncio
import time

from ..contract.checkpoint import AgentCheckpoint, ExecutionSuspended
from ..contract.environment import ENVIRONMENT_REF, EnvironmentChange
from ..contract.errors import AgentError, UserError
from ..contract.messages import ModelRequest, ModelResponse, ToolReturn
from ..contract.state import RunStatus
from ..contract.toolsets import ToolsetListing
from ..engine import nodes, telemetry
from ..engine.controller import RunController
from ..engine.node_io import ToolCallOutcome
from ..engine.runner import Driver
from ..engine.spec import AgentSpec
from ..engine.subagents import (
    MAX_SUBAGENT_DEPTH,
    SubagentCall,
    SubagentResume,
    SubagentSuspended,
    SubagentWaiting,
    depth_exceeded,
    subagent_failure,
    subagent_finished,
    subagent_output,
)
from ..environments import EnvironmentHost, default_host
from ..models.base import DeltaSink

__all__ = ["DirectNodeRunner", "run_in_process"]


class DirectNodeRunner:
    """Calls the node functions in this process; runs with a workspace keep it in
    `environments` (default: this process's host for `DURABLE_AGENT_WORKSPACE_STORE`)."""

    def __init__(self, agent: AgentSpec, environments: EnvironmentHost | None = None) -> None:
        self.agent = agent
        self.environments = environments

    async def prepare_model_request(self, input: nodes.PrepareModelRequestInput) -> ModelRequest:
        return await nodes.prepare_model_request(self.agent, input)

    async def model_request(
        self, input: nodes.ModelRequestInput, deltas: DeltaSink | None = None
    ) -> ModelResponse:
        return await nodes.model_request(self.agent, input, on_delta=deltas)

    async def list_tools(self, input: nodes.ListToolsInput) -> ToolsetListing:
        return await nodes.list_tools(self.agent, input)

    async def tool_call(self, input: nodes.ToolCallInput) -> nodes.ToolCallOutcome:
        return await nodes.tool_call(self.agent, input, environments=self.environments)

    async def subagent_call(
        self, call: SubagentCall
    ) -> nodes.ToolCallOutcome | SubagentWaiting | SubagentSuspended:
        return await run_in_process(call, self.environments)

    async def workspace_merge(self, input: nodes.WorkspaceMergeInput) -> EnvironmentChange:
        host = self.environments or default_host()
        return await host.merge(input.base, input.current, input.changes, self.agent.workspace)

    async def validate_output(self, input: nodes.ValidateOutputInput) -> nodes.OutputOutcome:
        return await nodes.validate_output(self.agent, input)


async def run_in_process(
    call: SubagentCall, environments: EnvironmentHost | None = None
) -> ToolCallOutcome | SubagentWaiting | SubagentSuspended:
    """Runs the sub-agent's own loop here (or goes on with its waiting run once its calls
    are decided); its checkpoints go to the parent's executor, their metadata naming the
    parent run and tool call (from the child's `state.metadata`).

    A child that ends waiting for a human answers `SubagentWaiting`: the parent waits too,
    listing the child's calls. A child its executor suspends answers `SubagentSuspended`:
    the parent suspends too, and resuming the parent resumes the child there."""
    tool_call = call.input.call
    subagent = call.subagent
    if call.depth > MAX_SUBAGENT_DEPTH:
        return depth_exceeded(tool_call, call.depth)
    try:
        prompt = subagent.prompt_of(tool_call, call.input.override_arguments)
    except UserError as error:
        return subagent_failure(tool_call, error.kind, error.message)
    agent = subagent.agent
    controller = RunController(
        agent,
        Driver(
            runner=DirectNodeRunner(agent, environments),
            executor=call.executor,
            ids=call.ids,
        ),
    )
    resume = call.resume
    started = time.time_ns()
    outcome = await _run_child(call, controller, agent, prompt, resume)
    returned: ToolReturn | None = getattr(outcome, "tool_return", None)
    if returned is not None:  # finished or failed (not left waiting or suspended)
        telemetry.record_subagent_tool_span(
            call.parent_agent,
            tool_call.name,
            tool_call.id,
            started,
            returned.metadata.get("subagent_error_kind") if returned.is_error else None,
        )
    return outcome


async def _run_child(
    call: SubagentCall,
    controller: RunController,
    agent: AgentSpec,
    prompt: str,
    resume: SubagentResume | AgentCheckpoint | None,
) -> ToolCallOutcome | SubagentWaiting | SubagentSuspended:
    tool_call = call.input.call
    subagent = call.subagent
    try:
        async with agent.open_toolsets():
            if isinstance(resume, AgentCheckpoint):
                state = resume.state
                drive = controller.resume(resume)
            elif resume is not None:
                state = resume.state
                drive = controller.continue_after_hitl(state, resume.approvals, resume.results)
            else:
                state = controller.new_state(prompt, metadata=call.metadata)
                drive = controller.start(state)
            # The sub-agent's run span, inside its parent's (the current span).
            with telemetry.invoke_agent_span(agent.name, state, new_run=resume is None) as span:
                if subagent.timeout_seconds is not None:
                    final = await asyncio.wait_for(drive, subagent.timeout_seconds)
                else:
                    final = await drive
                span.finished(final)
    except TimeoutError:
        used = controller.loop.state.usage if controller.loop is not None else None
        return subagent_failure(
            tool_call, "timeout", f"did not finish within {subagent.timeout_seconds} s", used
        )
    except ExecutionSuspended as suspended:
        return SubagentSuspended(checkpoint=suspended.checkpoint, reason=suspended.reason)
    except Exception as error:
        # Whatever ends the sub-agent's run (its model raising included) is its parent
        # model's business: a tool error, as on Temporal, never the parent's failure.
        used = controller.loop.state.usage if controller.loop is not None else None
        kind = error.kind if isinstance(error, AgentError) else type(error).__name__
        return subagent_failure(tool_call, kind, str(error), used)
    if final.status is RunStatus.WAITING:
        return SubagentWaiting(state=final)
    change = call.workspace_change(final.metadata.get(ENVIRONMENT_REF))
    return subagent_finished(tool_call, subagent_output(final), final.usage, change)
