"""The state of one run: everything needed to resume it, and nothing else."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    BaseModel,
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    field_serializer,
)

from ._fields import WIRE_CONFIG, omit_empty, omit_none, shallow_copy
from .decisions import DeferredToolCall, PendingToolApproval
from .environment import EnvironmentBatch
from .messages import ModelMessage, ModelResponse, RetryPromptPart, ToolCall, ToolReturn
from .toolsets import ToolsetListing
from .trace_context import TraceContext
from .usage import Usage

__all__ = ["AgentRunState", "RunError", "RunStatus"]


class RunStatus(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    WAITING = "waiting"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RunError(BaseModel):
    """Why a run failed, kept in state so the `run_failed` checkpoint explains itself."""

    model_config = WIRE_CONFIG
    kind: str
    message: str


_COPIED_LISTS = (
    "pending_tool_calls",
    "pending_tool_returns",
    "pending_approval_tool_returns",
    "deferred_tool_returns",
    "pending_retry_prompts",
    "toolset_listings",
    "pending_steering",
)


class AgentRunState(BaseModel):
    """Starweaver's run state plus the few cursors this port needs to resume mid-batch.

    Fields beyond starweaver's (`pending_prompt`, `active_tool_call_id`, retry counters,
    `error`) are omitted from JSON while empty, so starweaver checkpoints round-trip exactly.
    """

    model_config = WIRE_CONFIG

    run_id: str
    conversation_id: str
    message_history: list[ModelMessage] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    run_step: int = 0
    status: RunStatus = RunStatus.STARTING
    output: Any = omit_none()
    structured_output: Any = omit_none()
    latest_response: ModelResponse | None = omit_none()
    pending_tool_calls: list[ToolCall] = omit_empty(factory=list)
    pending_tool_returns: list[ToolReturn] = omit_empty(factory=list)
    pending_approval_tool_returns: list[PendingToolApproval] = omit_empty(factory=list)
    deferred_tool_returns: list[DeferredToolCall] = omit_empty(factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    history_offset: int = omit_empty(0)
    """Messages of this conversation held before `message_history[0]` (by earlier runs of a
    workflow that continued as new); message cursors count them."""
    pending_prompt: str | None = omit_none()
    pending_retry_prompts: list[RetryPromptPart] = omit_empty(factory=list)
    active_tool_call_id: str | None = omit_none()
    tool_retries: dict[str, int] = omit_empty(factory=dict)
    output_validation_attempt: int = omit_empty(0)
    error: RunError | None = omit_none()
    stream_seq: int = omit_empty(0)
    """The next stream record's sequence number, so a run continued later (after a human's
    decision, or on another worker) numbers its records on from where it stopped."""
    toolset_listings: list[ToolsetListing] = omit_empty(factory=list)
    """The tools each of the agent's toolsets offered when this run listed them: kept so a
    resumed, replayed or continued-as-new run uses the same tools without asking again."""
    pending_steering: list[str] = omit_empty(factory=list)
    """User messages sent while the run works (starweaver's steering messages), queued
    until the next model request is prepared: then they join it as user prompts. Kept in
    state so a checkpoint, a resume or a fork still delivers them."""
    trace_context: TraceContext | None = omit_none()
    """The trace this run's spans belong to (its `invoke_agent` span), set when tracing is
    on: kept in state so a resumed or continued-as-new run stays in the same trace."""

    environment_batch: EnvironmentBatch | None = omit_none()
    """For a run with an environment (`metadata["environment_ref"]`): the snapshot the
    latest response's calls start from and the refs the calls that changed it left, until
    the response's calls are done."""

    subagent_runs: dict[str, AgentRunState] = omit_empty(factory=dict)
    """In-process only: the state of each sub-agent run that waits for a human, by the
    parent's tool call id. Its pending calls are the parent's too (marked `held_by`); once
    they are decided the sub-agent goes on from this state. (On Temporal the sub-agent's
    child workflow holds its own state.)"""

    suspended_subagents: dict[str, Any] = omit_empty(factory=dict)
    """In-process only: the checkpoint (as JSON) each sub-agent run its executor suspended
    stopped at, by the parent's tool call id; resuming the parent resumes it there."""

    @field_serializer("latest_response", mode="wrap")
    def _latest_response_without_kind(
        self,
        value: ModelResponse | None,
        handler: SerializerFunctionWrapHandler,
        info: SerializationInfo,
    ) -> object:
        # Starweaver writes the latest response without the `kind` tag it has in history.
        data = handler(value)
        if isinstance(data, dict):
            data.pop("kind", None)
        return data

    def snapshot(self, *, view: bool = False) -> AgentRunState:
        """A copy that later steps cannot change: lists are copied, messages are shared.

        `view` shares the lists and dicts too, for the loop's own checkpoints: the loop
        never changes a state's list or dict in place (it assigns a new one, and grows the
        conversation copy-on-write), so a shallow copy is already immutable to it. Taken at
        every boundary, so it copies the fields directly instead of through `model_copy`."""
        copy = shallow_copy(self)
        if view:
            return copy
        fields = copy.__dict__
        for name in _COPIED_LISTS:
            fields[name] = list(fields[name])
        fields["tool_retries"] = dict(self.tool_retries)
        fields["metadata"] = dict(self.metadata)
        fields["message_history"] = list(self.message_history)
        return copy

    @property
    def tool_call_batch_id(self) -> str | None:
        """Names the batch only while it is pending (starweaver lets it linger; we do not)."""
        return f"tool_batch_{self.run_step}" if self.pending_tool_calls else None
