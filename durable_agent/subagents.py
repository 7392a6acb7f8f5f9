"""Sub-agents: an agent offered to another agent's model as a tool.

The parent's model sees a tool taking `{"prompt": str}`; calling it runs the sub-agent on
that prompt and its output is the tool's result. Everything that applies to a tool applies
(approval, concurrent calls, `max_concurrent_tools`); only where the sub-agent runs differs
by driver: in-process its loop runs here and hands its checkpoints to the parent's executor,
on Temporal it is a child workflow (`durable_agent.temporal.workflow.subagents`).

A sub-agent that fails is the parent's model's business, not the parent's: the call returns
an error the model reads (`subagent_failed`, with the child's own error kind and message).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from . import telemetry
from ._fields import trusted
from .errors import AgentError, ExecutionSuspended, UserError
from .executor import AgentCheckpoint, AgentExecutor
from .hitl import DeferredToolResult, ToolApprovalDecision
from .ids import IdSource
from .messages import ToolCall, ToolReturn
from .state import AgentRunState, RunStatus
from .tools import ToolDefinition
from .usage import Usage

if TYPE_CHECKING:
    from .agent import Agent
    from .controller import RunController
    from .nodes import ToolCallInput, ToolCallOutcome

__all__ = [
    "MAX_SUBAGENT_DEPTH",
    "agent_tree",
    "child_id",
    "PARENT_RUN_ID",
    "PARENT_TOOL_CALL_ID",
    "SUBAGENT_DEPTH",
    "SubAgent",
    "SubagentArguments",
    "HELD_BY",
    "SubagentCall",
    "SubagentResume",
    "SubagentSuspended",
    "SubagentWaiting",
    "default_description",
    "depth_exceeded",
    "run_in_process",
    "output_of",
    "subagent_finished",
    "subagent_depth",
    "subagent_failure",
    "subagent_output",
]

MAX_SUBAGENT_DEPTH = 5
"""How deep sub-agents may nest (a lead at depth 0 may reach depth 5): an agent that would
call itself through others without bound is stopped with a tool error, not a runaway tree."""

PARENT_RUN_ID = "parent_run_id"
PARENT_TOOL_CALL_ID = "parent_tool_call_id"
SUBAGENT_DEPTH = "subagent_depth"
"""Keys of a sub-agent run's `state.metadata`: who started it, and how deep it is."""


class SubagentArguments(BaseModel):
    """What the parent's model sends a sub-agent: the task, as a prompt."""

    model_config = ConfigDict(extra="forbid")
    prompt: str


_SCHEMA = SubagentArguments.model_json_schema()


@dataclass(frozen=True)
class SubAgent:
    """A sub-agent as its parent holds it. `timeout` bounds one call (in-process and on
    Temporal, where it is the child workflow's execution timeout); `task_queue` runs its
    child workflows on another worker pool (default: the parent's)."""

    agent: Agent[Any]
    name: str
    description: str
    timeout_seconds: float | None = None
    task_queue: str | None = None

    def definition(self) -> ToolDefinition:
        return ToolDefinition(
            name=self.name, description=self.description, parameters_json_schema=_SCHEMA
        )

    def prompt_of(self, call: ToolCall, override: Mapping[str, Any] | None = None) -> str:
        """The prompt the parent's model sent; `UserError` names what is wrong with it."""
        arguments: Any = override if override is not None else call.arguments
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments or "{}")
            except json.JSONDecodeError as error:
                raise UserError(f"arguments are not JSON: {error}") from error
        try:
            prompt = SubagentArguments.model_validate(arguments).prompt
        except ValidationError as error:
            raise UserError(
                f'sub-agent {self.name!r} takes {{"prompt": "..."}}: {error.errors()[0]["msg"]}'
            ) from error
        if not prompt.strip():
            raise UserError(f"sub-agent {self.name!r} needs a non-empty prompt")
        return prompt


def default_description(agent: Agent[Any]) -> str:
    """The tool's description when the parent gives none: the sub-agent's instructions when
    they are text, else its name."""
    if isinstance(agent.instructions, str) and agent.instructions.strip():
        return agent.instructions.strip()
    return f"Delegate a task to the {agent.name!r} agent; send the task as the prompt."


HELD_BY = "held_by"
"""The `metadata` key of a pending call a parent lists for its waiting sub-agent (in-process):
the parent's tool call whose sub-agent run holds it."""


class SubagentWaiting(BaseModel):
    """In-process: the sub-agent's run ended waiting for a human; the parent keeps its
    state and lists its pending calls as its own until they are decided."""

    kind: Literal["subagent_waiting"] = "subagent_waiting"
    state: AgentRunState


class SubagentSuspended(BaseModel):
    """In-process: the executor suspended the sub-agent's run at one of its boundaries; the
    parent suspends too, and resuming the parent resumes the sub-agent from `checkpoint`."""

    kind: Literal["subagent_suspended"] = "subagent_suspended"
    checkpoint: AgentCheckpoint
    reason: str


@dataclass(frozen=True)
class SubagentResume:
    state: AgentRunState
    approvals: dict[str, ToolApprovalDecision]
    results: list[DeferredToolResult]


@dataclass(frozen=True)
class SubagentCall:
    """One sub-agent call as the loop hands it to the node runner. The in-process runner
    uses the parent's executor and ids; the workflow's starts a child workflow."""

    input: ToolCallInput
    subagent: SubAgent
    parent_run_id: str
    depth: int
    executor: AgentExecutor
    ids: IdSource
    prefix: str
    parent_agent: str = ""
    """The name of the agent making the call (its `execute_tool` span says so)."""
    resume: SubagentResume | AgentCheckpoint | None = None
    """In-process: the waiting sub-agent run to go on with and its calls' decisions, or
    the checkpoint a suspended one goes on from."""

    @property
    def child_id(self) -> str:
        """The child's id: on Temporal its workflow id (`prefix` is the parent's workflow
        id), unique over the parent's chain since it names the run and step as well as the
        call (tool call ids repeat across a session's turns)."""
        return child_id(self.prefix, self.subagent.name, self.input)

    @property
    def metadata(self) -> dict[str, Any]:
        """The child run's `state.metadata`."""
        return {
            PARENT_RUN_ID: self.parent_run_id,
            PARENT_TOOL_CALL_ID: self.input.call.id,
            SUBAGENT_DEPTH: self.depth,
        }


def child_id(prefix: str, name: str, ref: ToolCallInput) -> str:
    return f"{prefix}--{name}--{ref.run_id}-{ref.run_step}-{ref.call.id}"


def subagent_depth(state: AgentRunState) -> int:
    depth = state.metadata.get(SUBAGENT_DEPTH, 0)
    return depth if isinstance(depth, int) else 0


def subagent_output(state: AgentRunState) -> Any:
    """What the parent's model reads: the structured output (as JSON) or the text."""
    return output_of(state.structured_output, state.output)


def output_of(structured_output: Any, output: Any) -> Any:
    return structured_output if structured_output is not None else output


def _returned(call: ToolCall, content: Any, usage: Usage, **extra: Any) -> ToolCallOutcome:
    from .nodes import ToolReturned

    return ToolReturned(
        tool_return=trusted(
            ToolReturn,
            tool_call_id=call.id,
            name=call.name,
            content=content,
            is_error=extra.get("is_error", False),
            error_kind=extra.get("error_kind"),
            retry=False,
            metadata=extra.get("metadata", {}),
        ),
        usage=usage,
    )


def subagent_finished(call: ToolCall, output: Any, usage: Usage) -> ToolCallOutcome:
    """A finished sub-agent's output as the call's return, its usage the parent's too
    (from its final state in-process, from its child workflow's result on Temporal)."""
    return _returned(call, output, usage)


def subagent_failure(
    call: ToolCall, kind: str, message: str, usage: Usage | None = None, **metadata: Any
) -> ToolCallOutcome:
    """A failed sub-agent as the tool error its parent's model reads."""
    return _returned(
        call,
        f"sub-agent {call.name!r} failed ({kind}): {message}",
        usage or Usage(),
        is_error=True,
        error_kind="subagent_failed",
        metadata={"subagent_error_kind": kind, **metadata},
    )


async def run_in_process(
    call: SubagentCall,
) -> ToolCallOutcome | SubagentWaiting | SubagentSuspended:
    """Runs the sub-agent's own loop here (or goes on with its waiting run once its calls
    are decided); its checkpoints go to the parent's executor, their metadata naming the
    parent run and tool call (from the child's `state.metadata`).

    A child that ends waiting for a human answers `SubagentWaiting`: the parent waits too,
    listing the child's calls. A child its executor suspends answers `SubagentSuspended`:
    the parent suspends too, and resuming the parent resumes the child there."""
    from .controller import RunController
    from .runner import DirectNodeRunner, Driver

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
            runner=DirectNodeRunner(agent),
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
    agent: Agent[Any],
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
    except AgentError as error:
        used = controller.loop.state.usage if controller.loop is not None else None
        return subagent_failure(tool_call, error.kind, error.message, used)
    if final.status is RunStatus.WAITING:
        return SubagentWaiting(state=final)
    return subagent_finished(tool_call, subagent_output(final), final.usage)


def depth_exceeded(call: ToolCall, depth: int) -> ToolCallOutcome:
    return subagent_failure(
        call,
        "subagent_depth_exceeded",
        f"sub-agents nest {depth} deep, more than the {MAX_SUBAGENT_DEPTH} allowed; an agent "
        "may be calling itself through its sub-agents",
    )


def agent_tree(agent: Agent[Any]) -> list[Agent[Any]]:
    """`agent` and every sub-agent below it, each once: what registering `agent` registers."""
    found: list[Agent[Any]] = []
    pending = [agent]
    while pending:
        current = pending.pop(0)
        if any(current is known for known in found):
            continue
        found.append(current)
        pending.extend(subagent.agent for subagent in current.subagents.values())
    return found
