"""The run's queries on the wire: what each takes and what it answers.

`status` answers an `AgentStatusView` (with the pending calls, sub-agents and session in
it, and where a fork came from), `checkpoints` a `CheckpointsView` of this run's boundaries
and `runs` the `RunLink`s before it, `checkpoint_at` a `CheckpointLookup`,
`message_history_page` and `history_segments` the conversation by page and by run. Kept
apart from `wire`, whose models are what goes into a run (its input, signals, updates,
continuation and activity inputs), so what a reader of a run sees is in one place. Every
name is also importable from `wire`. Payloads carry no module path: a class's name and
fields are its contract, not where it is defined.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from durable_agent import AgentCheckpoint, AgentExecutionNode, AgentResumeEvidence, Usage
from durable_agent.contract._fields import omit_empty, omit_none
from durable_agent.temporal.quota.wire import QuotaWaitView

__all__ = [
    "AgentStatusView",
    "ApprovalRefusal",
    "CheckpointLookup",
    "CheckpointQuery",
    "CheckpointsView",
    "ForkOrigin",
    "HistoryPageQuery",
    "HistorySegment",
    "PendingApprovalView",
    "RunLink",
    "SessionView",
    "SubagentView",
]


class HistorySegment(BaseModel):
    """Messages `[start, end)` of the conversation, held by workflow run `run_id`."""

    run_id: str
    start: int
    end: int


class RunLink(BaseModel):
    """One run of a workflow's continue-as-new chain: where its stream records and its
    checkpoints begin, counted over the whole chain."""

    run_id: str
    first_seq: int = 0
    first_checkpoint: int = 0


class ForkOrigin(BaseModel):
    """Where a fork came from, as its `status` reports it."""

    workflow_id: str
    run_id: str
    """The source's workflow run that recorded the checkpoint."""
    index: int
    """The checkpoint's index over the source's chain."""
    checkpoint_id: str
    node: AgentExecutionNode
    run_step: int


class PendingApprovalView(BaseModel):
    tool_call_id: str
    tool_name: str
    arguments: Any
    reason: str | None = None
    decided: bool = False
    waiting_since: datetime | None = None
    """When the run began waiting for this call (the workflow's clock)."""
    expires_at: datetime | None = None
    """When an unanswered approval is denied ("approval expired"); None: never."""
    approvers: list[str] | None = None
    """Who may decide it (users or groups, `AgentBuilder.approvers`); None: anyone."""
    overridable: bool = False
    """Whether an approval may replace the arguments: the tool is one whose arguments the
    workflow can validate."""
    workflow_id: str | None = omit_none()
    """For a sub-agent's call: the child workflow holding it, where its decision goes
    (`AgentRunHandle.approve` on the parent routes there). None: this run holds it."""
    agent: str | None = omit_none()
    """For a sub-agent's call: the agent that made it."""


class SubagentView(BaseModel):
    """A sub-agent call of this run: its child workflow and what that is doing (the
    `status` query's values)."""

    tool_call_id: str
    agent: str
    workflow_id: str
    status: str
    usage: Usage = Field(default_factory=Usage)


class SessionView(BaseModel):
    turns: int = 0
    """Turns answered so far."""
    awaiting_prompt: bool = False
    ending: bool = False
    """`end_session` arrived: no further prompt is taken."""
    idle_since: datetime | None = None
    """When it began waiting for the prompt (the workflow's clock)."""
    idle_expires_at: datetime | None = None
    """When it ends if no prompt comes (`idle_timeout_seconds`)."""


class ApprovalRefusal(BaseModel):
    """An `approval` signal a run refused (`workflow_id`: the sub-agent's workflow that held
    the call, when it was not the run itself)."""

    tool_call_id: str
    reason: str
    decided_by: str | None = None
    workflow_id: str | None = omit_none()


class AgentStatusView(BaseModel):
    agent: str
    status: str
    node: str | None
    run_step: int
    run_id: str | None = None
    conversation_id: str | None = None
    suspend_reason: str | None = None
    pending_approvals: list[PendingApprovalView] = Field(default_factory=list)
    deferred_calls: list[PendingApprovalView] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)
    output: Any = None
    error: str | None = None
    checkpoint_count: int = 0
    """Boundaries passed since the workflow started, across continue-as-new."""
    continued_as_new: int = 0
    steering: list[str] = Field(default_factory=list)
    """Steering messages queued for the next model request, not yet sent to the model."""
    forked_from: ForkOrigin | None = None
    """For a fork or a retry: the boundary it started from."""
    session: SessionView | None = None
    """For a session run: its turns and whether it waits for the next prompt."""
    subagents: list[SubagentView] = Field(default_factory=list)
    """The child workflows of this run's sub-agent calls, oldest first."""
    quota_wait: QuotaWaitView | None = None
    """Set while the run waits for its model quota's grant: which key, since when."""
    environment_ref: str | None = None
    """The run's workspace now (`state.metadata["environment_ref"]`); None without one."""
    refused_decisions: list[ApprovalRefusal] = omit_empty(factory=list)
    """The latest `approval` signals this run (or a sub-agent's workflow it forwarded one
    to) refused: a signal cannot answer its sender, so the run says it here."""
    model: str | None = None
    """Who answered the latest model request, `provider:model` as the response names it
    (with a `FallbackModel`, the member that answered)."""


class HistoryPageQuery(BaseModel):
    offset: int = 0
    limit: int = 200


class CheckpointQuery(BaseModel):
    """The `checkpoint_at` query: one boundary's full checkpoint, by `index` over the
    chain or by `checkpoint_id`; neither: the latest one a run can go on from."""

    index: int | None = None
    checkpoint_id: str | None = None


class CheckpointLookup(BaseModel):
    """What one workflow run answers `checkpoint_at`: the checkpoint if it recorded it,
    and where its own boundaries lie in the chain, so the reader knows where to look
    next (`previous_run_id`: the run it continued from)."""

    agent: str
    run_id: str
    checkpoint: AgentCheckpoint | None = None
    index: int | None = None
    first_index: int
    count: int
    """How many boundaries this run recorded (indexes `first_index` to `first_index +
    count - 1`)."""
    previous_run_id: str | None = None


class CheckpointsView(BaseModel):
    """The `checkpoints` query: this run's boundaries and the runs before it, which hold
    the earlier ones (`AgentRunHandle.checkpoints()` stitches them into one list)."""

    run_id: str
    first_index: int = 0
    """The index of this run's first boundary over the whole chain."""
    checkpoints: list[AgentResumeEvidence] = Field(default_factory=list)
    earlier_runs: list[RunLink] = Field(default_factory=list)
