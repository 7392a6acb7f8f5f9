"""Durable-execution types, as in starweaver's `executor.rs`.

At every loop boundary the runtime hands an `AgentCheckpoint` to an `AgentExecutor` and
obeys its decision. The checkpoint carries the full state plus `AgentResumeEvidence`, a small
summary (cursors, counts, usage) that a durable store can index without reading the state.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, TypeAdapter

from ._fields import WIRE_CONFIG, omit_empty, omit_none, trusted
from .errors import AgentError
from .state import AgentRunState, RunStatus
from .trace_context import TraceContext
from .usage import Usage

__all__ = [
    "AgentCheckpoint",
    "AgentCheckpointMetadata",
    "AgentExecutionDecision",
    "AgentExecutionDecisionAdapter",
    "AgentExecutionNode",
    "AgentExecutor",
    "AgentResumeCursor",
    "AgentResumeEvidence",
    "Continue",
    "DirectAgentExecutor",
    "ExecutionSuspended",
    "Suspend",
]


class AgentExecutionNode(StrEnum):
    RUN_START = "run_start"
    PREPARE_MODEL_REQUEST = "prepare_model_request"
    BEFORE_MODEL_REQUEST = "before_model_request"
    MODEL_RESPONSE = "model_response"
    TOOL_CALL = "tool_call"
    TOOL_RETURN = "tool_return"
    VALIDATE_OUTPUT = "validate_output"
    RUN_COMPLETE = "run_complete"
    RUN_FAILED = "run_failed"


class AgentResumeCursor(BaseModel):
    model_config = WIRE_CONFIG
    message_cursor: int
    model_request_attempt: int
    output_validation_attempt: int
    stream_cursor: int
    tool_call_batch_id: str | None = omit_none()


class AgentResumeEvidence(BaseModel):
    model_config = WIRE_CONFIG
    cursor: AgentResumeCursor
    deferred_tool_count: int
    node: AgentExecutionNode
    pending_approval_count: int
    run_step: int
    status: RunStatus
    usage: Usage
    context_revision: str | None = omit_none()
    """A service layer's context revision (or hash): `state.metadata["context_revision"]`."""
    environment_ref: str | None = omit_none()
    """A service layer's environment state reference: `state.metadata["environment_ref"]`."""
    trace_context: TraceContext | None = omit_none()
    """The run's trace (its `invoke_agent` span), when tracing is on."""
    metadata: dict[str, Any] = omit_empty(factory=dict)
    """Resume metadata for session stores (starweaver's; empty unless a store sets it)."""

    @classmethod
    def from_state(
        cls, state: AgentRunState, node: AgentExecutionNode, stream_cursor: int
    ) -> AgentResumeEvidence:
        """Evidence is derived from state alone, so it can be recomputed and checked."""
        meta = state.metadata
        revision = meta.get("context_revision") if meta else None
        environment = meta.get("environment_ref") if meta else None
        return trusted(
            cls,
            cursor=trusted(
                AgentResumeCursor,
                message_cursor=state.history_offset + len(state.message_history),
                model_request_attempt=state.run_step,
                output_validation_attempt=state.output_validation_attempt,
                stream_cursor=stream_cursor,
                tool_call_batch_id=state.tool_call_batch_id,
            ),
            deferred_tool_count=len(state.deferred_tool_returns),
            node=node,
            pending_approval_count=len(state.pending_approval_tool_returns),
            run_step=state.run_step,
            status=state.status,
            usage=state.usage,
            context_revision=revision if isinstance(revision, str) else None,
            environment_ref=environment if isinstance(environment, str) else None,
            trace_context=state.trace_context,
            metadata={},
        )


class AgentCheckpointMetadata(BaseModel):
    """`parent_run_id` / `parent_tool_call_id` name the run and call that started a
    sub-agent's run (omitted for a top-level run)."""

    model_config = WIRE_CONFIG
    span_id: str | None = None
    trace_id: str | None = None
    parent_run_id: str | None = omit_none()
    parent_tool_call_id: str | None = omit_none()


class AgentCheckpoint(BaseModel):
    model_config = WIRE_CONFIG
    checkpoint_id: str
    run_id: str
    conversation_id: str
    node: AgentExecutionNode
    run_step: int
    resume: AgentResumeEvidence
    state: AgentRunState
    metadata: AgentCheckpointMetadata = Field(default_factory=AgentCheckpointMetadata)


class ExecutionSuspended(AgentError):
    """The executor answered `Suspend` at a boundary; `agent.resume(checkpoint)` continues."""

    kind = "suspended"

    def __init__(self, node: AgentExecutionNode, reason: str, checkpoint: AgentCheckpoint) -> None:
        super().__init__(f"run suspended at {node.value}: {reason}")
        self.node = node
        self.reason = reason
        self.checkpoint = checkpoint


class Continue(BaseModel):
    kind: Literal["continue"] = "continue"


class Suspend(BaseModel):
    kind: Literal["suspend"] = "suspend"
    reason: str


AgentExecutionDecision = Annotated[Continue | Suspend, Field(discriminator="kind")]
AgentExecutionDecisionAdapter: TypeAdapter[Continue | Suspend] = TypeAdapter(AgentExecutionDecision)


@runtime_checkable
class AgentExecutor(Protocol):
    """Decides at each boundary whether the run goes on.

    Raising from `checkpoint` fails the run with `AgentExecutorError`.
    """

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend: ...


class DirectAgentExecutor:
    """Runs straight through; the default when no durability is wanted."""

    async def checkpoint(self, checkpoint: AgentCheckpoint) -> Continue | Suspend:
        return Continue()
