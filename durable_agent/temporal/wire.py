"""One model per workflow input, result, signal, update and query: the wire contract.

What goes into a run is defined here (its input, result, signals, updates, continuation
and activity inputs); what its queries take and answer is in `queries`, re-exported here so
every wire model imports from this one module."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio.contrib.workflow_streams import WorkflowStreamState

from durable_agent import (
    AgentCheckpoint,
    AgentExecutionNode,
    AgentOverrides,
    ModelDelta,
    ModelMessage,
    ToolApprovalDecision,
    Usage,
)
from durable_agent.contract._fields import omit_empty, omit_none
from durable_agent.contract.decisions import DecisionFields
from durable_agent.engine.controller import MAX_PROMPT_CHARS
from durable_agent.engine.node_io import (
    ListToolsInput,
    ModelRequestInput,
    PrepareModelRequestInput,
    ToolCallInput,
    ValidateOutputInput,
    WorkspaceMergeInput,
)
from durable_agent.temporal.queries import (
    AgentStatusView,
    ApprovalRefusal,
    CheckpointLookup,
    CheckpointQuery,
    CheckpointsView,
    ForkOrigin,
    HistoryPageQuery,
    HistorySegment,
    PendingApprovalView,
    RunLink,
    SessionView,
    SubagentView,
)
from durable_agent.temporal.quota.wire import QuotaTicket

__all__ = [
    "HELD_BY_SUBAGENT",
    "ParentLink",
    "SubagentStatus",
    "SubagentView",
    "EVENTS_TOPIC",
    "WORKFLOW_TYPE",
    "AWAITING_PROMPT",
    "MAX_APPROVAL_TIMEOUT_SECONDS",
    "MAX_PROMPT_CHARS",
    "AgentStatusView",
    "AgentWorkflowInput",
    "AgentWorkflowResult",
    "CheckpointLookup",
    "CheckpointQuery",
    "ForkOrigin",
    "LoadCheckpointInput",
    "LoadedCheckpoint",
    "ResumeFrom",
    "CheckpointsView",
    "Continuation",
    "HistorySegment",
    "ApprovalSignal",
    "DeferredResultSignal",
    "EndSessionSignal",
    "PromptRequest",
    "SessionCarry",
    "SessionView",
    "HistoryPageQuery",
    "HistoryRef",
    "ListToolsActivityInput",
    "ModelDeltaBatch",
    "ModelRequestActivityInput",
    "PendingApprovalView",
    "PrepareActivityInput",
    "ResumeSignal",
    "RunLink",
    "SteerSignal",
    "SuspendSignal",
    "ToolCallActivityInput",
    "UpdateAccepted",
    "ValidateOutputActivityInput",
    "WorkspaceMergeActivityInput",
]


class ResumeFrom(BaseModel):
    """A boundary another run recorded, where a fork (or a retry) starts.

    `index` counts the workflow's checkpoints over its whole continue-as-new chain, as
    `AgentRunHandle.checkpoints()` lists them; `checkpoint_id` names one instead. Neither:
    the latest checkpoint a run can go on from (the one before a `run_failed`). `run_id`
    pins a run of the workflow id (a retry names the failed one); without it the search
    starts at the latest run and goes back through the runs before it."""

    workflow_id: str
    run_id: str | None = None
    checkpoint_id: str | None = None
    index: int | None = None

    def problem(self) -> str | None:
        if not self.workflow_id.strip():
            return "resume_from.workflow_id is empty; name the run to fork"
        if self.checkpoint_id is not None and self.index is not None:
            return (
                f"resume_from names both checkpoint_id={self.checkpoint_id!r} and "
                f"index={self.index}; give one of them"
            )
        if self.index is not None and self.index < 0:
            return f"resume_from.index={self.index} is negative; indexes count from 0"
        return None

    def describe(self) -> str:
        """The boundary as people name it: `w1 #12`, `w1 ckpt_...` or `w1 (latest)`."""
        if self.index is not None:
            return f"{self.workflow_id} #{self.index}"
        if self.checkpoint_id is not None:
            return f"{self.workflow_id} {self.checkpoint_id}"
        return f"{self.workflow_id} (latest)"


class SessionCarry(BaseModel):
    """What a session run carries into its continue-as-new successor."""

    turn: int = 0
    """The turns started so far."""
    answered: int = 0
    """The turns that have finished."""
    between_turns: bool = False
    """It continued after a turn: the successor waits for the next prompt instead of
    driving the checkpoint (the last turn's `run_complete`) again."""


class StreamPoll(BaseModel):
    """A plain Workflow Streams subscriber's poll: when, and the offset it asked for."""

    at: datetime
    offset: int


class Continuation(BaseModel):
    """What a run carries into its continue-as-new successor.

    With `carries_history` (every run this release starts) the checkpoint's state holds
    the conversation, after the agent's history processors: the successor never needs an
    earlier run, which namespace retention deletes. Large inputs go to external storage
    (`durable_agent.temporal.storage`) and history keeps a reference. Runs started by
    release 0.1 left the messages behind in earlier runs (`segments`) and carried only
    their length and digest; they go on that way.
    """

    checkpoint: AgentCheckpoint
    stream_seq: int
    history_digest: str
    segments: list[HistorySegment] = Field(default_factory=list)
    decided: dict[str, ToolApprovalDecision] = Field(default_factory=dict)
    delivered: list[str] = Field(default_factory=list)
    checkpoint_count: int = 0
    pause_reason: str | None = None
    carries_history: bool = False
    earlier_runs: int = 0
    """How many runs of this workflow came before the successor."""
    forked_from: ForkOrigin | None = None
    """For a fork or retry: the boundary its first run started from."""
    session: SessionCarry | None = None
    """For a session run: its turns, and whether it continued between two of them."""
    stream: WorkflowStreamState | None = None
    """The Workflow Stream's state, with its log emptied: the successor's stream goes on at
    offset `stream_seq` (an offset is a record's seq), so history does not carry the
    transcript's records along. Absent in continuations of runs before the event stream."""
    runs: list[RunLink] = Field(default_factory=list)
    """Every earlier run of the chain, oldest first (a few ids, not their checkpoints)."""
    stream_polls: list[StreamPoll] = omit_empty(factory=list)
    """Where plain Workflow Streams subscribers polled lately: the successor keeps their
    records at its own continue-as-new too (a subscriber busy with a batch may not poll a
    run at all before it continues)."""


WORKFLOW_TYPE = "AgentWorkflow"
"""The workflow type of every agent run (`AgentWorkflow`'s name)."""
EVENTS_TOPIC = "events"
"""The Workflow Stream topic every run publishes its `AgentStreamRecord`s on; an item's
offset is its record's `seq`."""
AWAITING_PROMPT = "awaiting_prompt"
"""The `AgentStatus` (and `status`) of a session that waits for its next prompt: not a
human's decision, so it is not listed among the runs `waiting` for one."""
MAX_APPROVAL_TIMEOUT_SECONDS = 366 * 24 * 3600
"""A year and a day: the longest wait for a human a run may set. Far longer ones overflow
Temporal's timers."""


HELD_BY_SUBAGENT = "held_by_subagent"
"""The update error type of a decision sent to a parent for a call its sub-agent's child
workflow holds; the error's first detail is that workflow's id."""


class ParentLink(BaseModel):
    """Set on a sub-agent's child workflow: the workflow and tool call that started it,
    which it tells of each change of its status (`subagent_status`)."""

    workflow_id: str
    tool_call_id: str


class AgentWorkflowInput(BaseModel):
    agent: str = Field(description="Name of an agent registered on the worker.")
    prompt: str = ""
    """The task. Unused by a fork (`resume_from`), whose conversation has its own."""
    conversation_id: str | None = None
    message_history: list[ModelMessage] = Field(default_factory=list)
    suspend_at: list[AgentExecutionNode] = Field(default_factory=list)
    approval_timeout_seconds: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    stream_deltas: bool | None = None
    """Whether a streaming model's text is published as it is written (`model_delta`
    records). None: whenever the agent's model streams; False keeps history free of the
    deltas' signals for runs nobody watches live."""
    resume_from: ResumeFrom | None = None
    """Start from a boundary another run recorded instead of from `prompt`: a fork does
    that boundary's work and goes on, redoing nothing recorded before it."""
    overrides: AgentOverrides | None = None
    """Another of the agent's allowed models, model settings or instructions for this run."""
    session: bool = False
    """After a turn completes, wait for the next prompt (`send_prompt`) and go on with the
    same conversation, until `end_session` or `idle_timeout_seconds`. With an empty
    `prompt` the session waits for its first one."""
    idle_timeout_seconds: float | None = None
    """A session waiting this long for its next prompt ends (None: it waits for ever)."""
    continuation: Continuation | None = None
    """Set only by the workflow itself when it continues as new."""
    parent: ParentLink | None = omit_none()
    """Set only for a sub-agent's run, by the parent workflow that starts it."""
    priority: int | None = omit_none()
    """1 (first) to 5: the run's Temporal task priority and its place in a model quota's
    queue (None: 3). Set with `AgentClient.start(..., priority=...)`."""

    def problem(self) -> str | None:
        """What makes this input unrunnable, checked where bad input cannot stick a run:
        by the workflow (which then fails with `invalid_input`) and by clients before they
        start one. Decoding cannot refuse it, or every workflow task would fail."""
        timeout = self.approval_timeout_seconds
        if timeout is not None and not 0 < timeout <= MAX_APPROVAL_TIMEOUT_SECONDS:
            return (
                f"approval_timeout_seconds={timeout:g} is out of range; give a number of "
                f"seconds above 0 and at most {MAX_APPROVAL_TIMEOUT_SECONDS} (366 days)"
            )
        idle = self.idle_timeout_seconds
        if idle is not None and not 0 < idle <= MAX_APPROVAL_TIMEOUT_SECONDS:
            return (
                f"idle_timeout_seconds={idle:g} is out of range; give a number of seconds "
                f"above 0 and at most {MAX_APPROVAL_TIMEOUT_SECONDS} (366 days)"
            )
        if idle is not None and not self.session:
            return "idle_timeout_seconds is for sessions; set session=true too"
        if self.priority is not None and not 1 <= self.priority <= 5:
            return f"priority={self.priority} is out of range; give 1 (first) to 5 (default 3)"
        if self.resume_from is not None:
            return self.resume_from.problem()
        return None


class AgentWorkflowResult(BaseModel):
    output: Any = None
    structured_output: Any = None
    status: str
    run_id: str
    conversation_id: str
    usage: Usage
    run_step: int
    environment_ref: str | None = omit_none()
    """The run's workspace at its end (None: it has none): a sub-agent's hands its
    changes back to its parent with it."""


class ResumeSignal(BaseModel):
    reason: str | None = None


class SuspendSignal(BaseModel):
    reason: str = "suspended by signal"


class SteerSignal(BaseModel):
    """The `steer` signal and `steer_run` update: a user message for the model's next
    request. Its text is checked by the workflow (an empty one is refused by the update's
    validator, logged and dropped as a signal), not here, so the refusal can say why."""

    message: str = ""


class PromptRequest(BaseModel):
    """The `send_prompt` update: a session's next turn (its validator checks the text)."""

    prompt: str = ""


class EndSessionSignal(BaseModel):
    """The `end_session` signal: the session ends once its current turn has answered."""


class ApprovalSignal(DecisionFields):
    """The `approval` signal and `submit_approval` update: a decision (the fields of
    `ToolApprovalDecision`, flat, as they always were on the wire) with where it goes
    (`tool_call_id`) and who vouches for it (`groups`, `signed_at`, `signature`)."""

    tool_call_id: str
    holder: str | None = omit_none()
    """The workflow that holds the call, for a sub-agent's call its lead lists (None: the
    run it is sent to finds it; an id two workflows of the tree wait on is refused as
    ambiguous, listing them)."""
    groups: list[str] | None = None
    """The approver's groups, checked against `AgentBuilder.approvers` with `decided_by`."""
    signed_at: datetime | None = None
    signature: str | None = None
    """`v1:<key id>:<mac>` over this decision (see `durable_agent.temporal.signing`);
    required when the worker has DURABLE_AGENT_APPROVAL_KEYS. All three fields are optional,
    so decisions sent before they existed still decode."""

    @classmethod
    def envelope(
        cls,
        tool_call_id: str,
        decision: ToolApprovalDecision,
        groups: Sequence[str] | None = None,
        *,
        holder: str | None = None,
    ) -> ApprovalSignal:
        """`decision` addressed to call `tool_call_id` (of workflow `holder`, when given;
        unsigned: `signing.sign_signal`)."""
        return cls(
            tool_call_id=tool_call_id,
            holder=holder,
            groups=list(groups) if groups is not None else None,
            **decision.model_dump(exclude_unset=True),
        )

    def decision(self) -> ToolApprovalDecision:
        """The decision this envelope carries, without routing or signature."""
        return ToolApprovalDecision.model_validate(
            self.model_dump(include=set(DecisionFields.model_fields), exclude_unset=True)
        )


class DeferredResultSignal(BaseModel):
    tool_call_id: str
    status: Literal["success", "error"] = "success"
    response: Any = None


class UpdateAccepted(BaseModel):
    """What an accepted update answers: the run's status right after the change."""

    accepted: bool = True
    message: str
    status: str


class SubagentStatus(BaseModel):
    """What a sub-agent's workflow tells its parent when its status changes."""

    workflow_id: str
    tool_call_id: str
    status: str
    pending_approvals: list[PendingApprovalView] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    refused: list[ApprovalRefusal] = omit_empty(factory=list)
    """The latest approval signals the child (or a descendant) refused."""
    refused_total: int = omit_empty(0)
    """How many it has refused so far: the parent announces the ones it has not seen."""


class LoadCheckpointInput(BaseModel):
    """The `load_checkpoint` activity: the fork's agent and where it starts."""

    agent: str
    resume_from: ResumeFrom


class LoadedCheckpoint(BaseModel):
    checkpoint: AgentCheckpoint
    origin: ForkOrigin


class ModelDeltaBatch(BaseModel):
    """The `model_deltas` signal: deltas the `model_request` activity's attempt `attempt`
    of step `run_step` produced since its previous batch (`batch` counts from 0 per
    attempt, so a resent batch is recognised and dropped)."""

    run_step: int
    attempt: int
    batch: int
    deltas: list[ModelDelta]


class HistoryRef(BaseModel):
    """Names the message prefix an activity may already hold: `length` messages whose
    chained hash starts with `digest`. Only messages after it travel in the activity
    input; the activity knows its workflow from `activity.info()`."""

    length: int
    digest: str


class PrepareActivityInput(BaseModel):
    agent: str
    input: PrepareModelRequestInput
    overrides: AgentOverrides | None = omit_none()
    """The run's overrides (its instructions); absent for most runs."""


class ModelRequestActivityInput(BaseModel):
    """Packed (`durable_agent.temporal.compaction`): the step, its time and the messages
    after `history`. Requests scheduled by earlier releases carry `input` instead: the run
    and the new messages whole."""

    agent: str
    input: ModelRequestInput | None = omit_none()
    run_step: int = omit_empty(0)
    timestamp: str | None = omit_none()
    messages: list[dict[str, Any]] = omit_empty(factory=list)
    """The messages after `history`, packed."""
    through: str | None = omit_none()
    """The (shortened) digest of the history and `messages` together: what the messages
    the activity rebuilds must match."""
    history: HistoryRef
    toolset_digest: str | None = omit_none()
    """Names the run's toolset tool definitions (`input.toolset_tools` travels empty): the
    activity reads them from its cache, or from the workflow's `toolset_tools` query."""
    overrides: AgentOverrides | None = omit_none()
    """The run's overrides (its model and settings); absent for most runs."""
    stream_deltas: bool = omit_empty(False)
    """Stream the model's deltas to the workflow (`model_deltas` signals); absent (off)
    unless the run wants them and the model streams."""
    model_index: int | None = omit_none()
    """For an agent whose model is a `FallbackModel`: the member this activity asks (the
    workflow moves to the next one once this one has failed for good); absent otherwise."""
    quota: QuotaTicket | None = omit_none()
    """For a request within a model quota: the keeper to tell when it goes out (each
    attempt), so the keeper counts it from then; absent otherwise."""


class ListToolsActivityInput(BaseModel):
    agent: str
    input: ListToolsInput


class ToolCallActivityInput(BaseModel):
    agent: str
    input: ToolCallInput


class ValidateOutputActivityInput(BaseModel):
    agent: str
    input: ValidateOutputInput


class WorkspaceMergeActivityInput(BaseModel):
    agent: str
    input: WorkspaceMergeInput
