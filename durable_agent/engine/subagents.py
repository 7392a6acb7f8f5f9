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

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from ..contract._fields import trusted
from ..contract.checkpoint import AgentCheckpoint, AgentExecutor
from ..contract.decisions import DeferredToolResult, ToolApprovalDecision
from ..contract.environment import ENVIRONMENT_REF, EnvironmentChange
from ..contract.messages import ToolCall, ToolReturn
from ..contract.state import AgentRunState
from ..contract.usage import Usage
from .ids import IdSource
from .node_io import ToolCallInput, ToolCallOutcome, ToolReturned
from .spec import SubAgent

__all__ = [
    "MAX_SUBAGENT_DEPTH",
    "child_id",
    "PARENT_RUN_ID",
    "PARENT_TOOL_CALL_ID",
    "SUBAGENT_DEPTH",
    "HELD_BY",
    "SubagentCall",
    "SubagentResume",
    "SubagentSuspended",
    "SubagentWaiting",
    "depth_exceeded",
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
        """The child run's `state.metadata`: with the parent's workspace as of the call,
        which the child starts from."""
        metadata: dict[str, Any] = {
            PARENT_RUN_ID: self.parent_run_id,
            PARENT_TOOL_CALL_ID: self.input.call.id,
            SUBAGENT_DEPTH: self.depth,
        }
        environment = self.input.metadata.get(ENVIRONMENT_REF)
        if environment is not None:
            metadata[ENVIRONMENT_REF] = environment
        return metadata

    def workspace_change(self, final: object) -> EnvironmentChange | None:
        """The change a finished child hands back: from the tree it started from to its
        `final` ref, paths not listed (the parent's runner lists them)."""
        base = self.input.metadata.get(ENVIRONMENT_REF)
        if not isinstance(base, str) or not isinstance(final, str) or final == base:
            return None
        return EnvironmentChange(base=base, environment_ref=final, listed=False)


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


def _returned(
    call: ToolCall,
    content: Any,
    usage: Usage,
    workspace: EnvironmentChange | None = None,
    **extra: Any,
) -> ToolCallOutcome:
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
        workspace=workspace,
    )


def subagent_finished(
    call: ToolCall, output: Any, usage: Usage, workspace: EnvironmentChange | None = None
) -> ToolCallOutcome:
    """A finished sub-agent's output as the call's return, its usage the parent's too
    (from its final state in-process, from its child workflow's result on Temporal), and
    what it changed in the workspace it started from (applied like a tool call's)."""
    return _returned(call, output, usage, workspace)


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


def depth_exceeded(call: ToolCall, depth: int) -> ToolCallOutcome:
    return subagent_failure(
        call,
        "subagent_depth_exceeded",
        f"sub-agents nest {depth} deep, more than the {MAX_SUBAGENT_DEPTH} allowed; an agent "
        "may be calling itself through its sub-agents",
    )
