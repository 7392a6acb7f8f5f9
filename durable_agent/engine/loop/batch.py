"""A batch of tool calls: each call classified, then run, then its outcome applied.

`classify` only reads the run's state and says what each call of the batch is waiting for
or ready to do; `ToolBatch.run` then changes state in call order: denials and delivered
results applied, new approvals asked for, held sub-agent runs taken back, and the calls
that can run dispatched together, their outcomes applied in call order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...contract._fields import trusted
from ...contract.checkpoint import AgentCheckpoint, AgentExecutionNode, ExecutionSuspended
from ...contract.decisions import (
    DeferredToolCall,
    DeferredToolResult,
    PendingToolApproval,
    ToolApprovalDecision,
)
from ...contract.messages import ToolCall
from ...contract.records import SubagentStartData, SuspendedData, ToolCallData
from ...contract.state import AgentRunState
from ..node_io import RunRef, ToolCallInput, ToolReturned
from ..spec import AgentSpec
from ..subagents import SubagentSuspended, child_id
from .boundaries import Boundaries
from .dispatch import Dispatch, ToolDispatcher
from .holds import SubagentHolds
from .outcomes import OutcomeApplier
from .recorder import Recorder
from .toolset_index import ToolsetIndex
from .workspace import WorkspaceSteps

__all__ = [
    "AskApproval",
    "Classified",
    "Deliver",
    "Deny",
    "ResumeHeld",
    "ResumeSuspended",
    "Run",
    "ToolBatch",
    "classify",
]

N = AgentExecutionNode


@dataclass(frozen=True, slots=True)
class Run:
    """Ready to run (`decision`: the approval it had, if it needed one)."""

    call: ToolCall
    decision: ToolApprovalDecision | None = None


@dataclass(frozen=True, slots=True)
class AskApproval:
    call: ToolCall


@dataclass(frozen=True, slots=True)
class Deny:
    approval: PendingToolApproval
    decision: ToolApprovalDecision


@dataclass(frozen=True, slots=True)
class Deliver:
    """A deferred call whose result arrived."""

    deferred: DeferredToolCall
    result: DeferredToolResult


@dataclass(frozen=True, slots=True)
class ResumeHeld:
    """In-process: a held sub-agent run whose calls are all decided."""

    call: ToolCall


@dataclass(frozen=True, slots=True)
class ResumeSuspended:
    """In-process: a sub-agent run its executor suspended."""

    call: ToolCall


Classified = Run | AskApproval | Deny | Deliver | ResumeHeld | ResumeSuspended
"""What one call of a batch does now; a call with nothing to do (it has its outcome, or
still waits for a person) is left out."""


def classify(
    calls: Sequence[ToolCall], state: AgentRunState, agent: AgentSpec, holds: SubagentHolds
) -> list[Classified]:
    """What each call of the batch does now, from the run's state alone."""
    done = {r.tool_call_id for r in state.pending_tool_returns}
    approvals = {a.tool_call_id: a for a in state.pending_approval_tool_returns}
    deferred = {d.tool_call_id: d for d in state.deferred_tool_returns}
    out: list[Classified] = []
    for call in calls:
        if call.id in done:
            continue
        if call.id in state.subagent_runs:
            if holds.ready(call.id):
                out.append(ResumeHeld(call))
        elif call.id in state.suspended_subagents:
            out.append(ResumeSuspended(call))
        elif (waiting := deferred.get(call.id)) is not None:
            if waiting.result is not None:
                out.append(Deliver(waiting, waiting.result))
        elif (approval := approvals.get(call.id)) is not None:
            decision = approval.decision
            if decision is not None:
                out.append(Run(call, decision) if decision.approved else Deny(approval, decision))
        elif agent.needs_approval(call.name):
            out.append(AskApproval(call))
        else:
            out.append(Run(call))
    return out


class ToolBatch:
    """Runs batches of one run's tool calls."""

    def __init__(
        self,
        agent: AgentSpec,
        state: AgentRunState,
        recorder: Recorder,
        boundaries: Boundaries,
        toolsets: ToolsetIndex,
        holds: SubagentHolds,
        outcomes: OutcomeApplier,
        dispatcher: ToolDispatcher,
        workspace: WorkspaceSteps,
    ) -> None:
        self.agent = agent
        self.state = state
        self.recorder = recorder
        self.boundaries = boundaries
        self.toolsets = toolsets
        self.holds = holds
        self.outcomes = outcomes
        self.dispatcher = dispatcher
        self.workspace = workspace

    async def run(self, calls: Sequence[ToolCall], ref: RunRef) -> None:
        """Runs the calls that have no outcome yet; outcomes are applied in call order,
        then what they changed in the run's workspace."""
        ref = self.workspace.start_ref(ref)
        batch = self._prepare(classify(calls, self.state, self.agent, self.holds), ref)
        if not batch:
            return
        self.agent.usage_limits.check_before_tool_calls(self.state.usage, len(batch))
        self._announce(batch)
        outcomes = await self.dispatcher.run(batch)
        for item, outcome in zip(batch, outcomes, strict=True):
            self.outcomes.apply(item.input.call, outcome)
        changes = [
            (item.input.call, outcome.workspace)
            for item, outcome in zip(batch, outcomes, strict=True)
            if isinstance(outcome, ToolReturned) and outcome.workspace is not None
        ]
        if changes:
            await self.workspace.apply(changes, ref)
        suspended = [o for o in outcomes if isinstance(o, SubagentSuspended)]
        if suspended:
            # Every other call's outcome is in state: resuming redoes only the suspended.
            reason = suspended[0].reason
            cursor = self.recorder.emit(N.TOOL_CALL, trusted(SuspendedData, reason=reason))
            checkpoint = self.boundaries.checkpoint(N.TOOL_CALL, cursor)
            raise ExecutionSuspended(N.TOOL_CALL, reason, checkpoint)

    def _prepare(self, classified: list[Classified], ref: RunRef) -> list[Dispatch]:
        """Applies what needs no node, in call order; the calls to dispatch."""
        state = self.state
        outcomes = self.outcomes
        batch: list[Dispatch] = []
        for item in classified:
            if isinstance(item, Run):
                batch.append(Dispatch(self._input(item.call, item.decision, ref)))
            elif isinstance(item, AskApproval):
                outcomes.ask_approval(PendingToolApproval.for_call(item.call))
            elif isinstance(item, Deny):
                outcomes.deny(item.approval, item.decision)
            elif isinstance(item, Deliver):
                outcomes.resolve_deferred(item.deferred, item.result)
            elif isinstance(item, ResumeHeld):
                call = item.call
                batch.append(Dispatch(self._input(call, None, ref), self.holds.take(call.id)))
            else:
                call = item.call
                kept = dict(state.suspended_subagents)
                stored = AgentCheckpoint.model_validate(kept.pop(call.id))
                state.suspended_subagents = kept
                batch.append(Dispatch(self._input(call, None, ref), stored))
        return batch

    def _input(
        self, call: ToolCall, decision: ToolApprovalDecision | None, ref: RunRef
    ) -> ToolCallInput:
        listed = self.toolsets.listed(call.name)
        prefix = self.dispatcher.prefix
        return ToolCallInput.for_run(
            ref,
            call=call,
            retry=self.state.tool_retries.get(call.name, 0),
            approved=decision is not None,
            override_arguments=decision.override_arguments if decision else None,
            idempotency_key=f"{prefix}:{call.id}",
            toolset_tool=listed[0] if listed else None,
            toolset_digest=listed[1] if listed else None,
        )

    def _announce(self, batch: list[Dispatch]) -> None:
        """`tool_call` (and `subagent_start`) records for the calls about to run; a
        sub-agent run going on was announced when it first ran."""
        recorder = self.recorder
        fresh = [item.input for item in batch if item.resume is None]
        for item in fresh:
            call = item.call
            arguments = (
                item.override_arguments if item.override_arguments is not None else call.arguments
            )
            recorder.record(
                N.TOOL_CALL,
                ToolCallData,
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=arguments,
            )
        subagents = self.agent.subagents
        for item in fresh:
            subagent = subagents.get(item.call.name)
            if subagent is not None:
                recorder.emit(
                    N.TOOL_CALL,
                    trusted(
                        SubagentStartData,
                        tool_call_id=item.call.id,
                        agent=subagent.agent.name,
                        workflow_id=child_id(self.dispatcher.prefix, subagent.name, item),
                    ),
                )
