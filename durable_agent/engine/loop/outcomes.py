"""The apply step: what one tool call's outcome does to the run's state, in call order.

A returned or retried call adds its tool return (and counts against the tool's retries or
the run's usage); a call that needs approval or is deferred waits, announced on the
stream; a sub-agent left waiting for a human is held (`holds`). Denials and deferred
results people sent are applied here too: this is the one place run state changes after a
call.
"""

from __future__ import annotations

from ...contract._fields import trusted
from ...contract.checkpoint import AgentExecutionNode
from ...contract.decisions import (
    DeferredToolCall,
    DeferredToolResult,
    PendingToolApproval,
    ToolApprovalDecision,
)
from ...contract.errors import ToolRetryLimitExceeded
from ...contract.messages import ToolCall, ToolReturn
from ...contract.records import (
    ApprovalDecidedData,
    ApprovalRequestedData,
    CallDeferredData,
    DeferredResultData,
    SubagentEndData,
    ToolReturnData,
)
from ...contract.state import AgentRunState
from ...contract.usage import Usage
from ..node_io import ToolApprovalNeeded, ToolCallOutcome, ToolDeferred, ToolRetry, ToolReturned
from ..spec import AgentSpec
from ..subagents import SubagentSuspended, SubagentWaiting
from .holds import SubagentHolds
from .recorder import Recorder
from .toolset_index import ToolsetIndex

__all__ = ["Outcome", "OutcomeApplier"]

N = AgentExecutionNode
Outcome = ToolCallOutcome | SubagentWaiting | SubagentSuspended
"""What running one call gives: a tool's outcome, or (in-process) a sub-agent left waiting
or suspended."""
_ONE_TOOL_CALL = Usage(tool_calls=1)


class OutcomeApplier:
    """Applies calls' outcomes and people's answers to one run's state."""

    def __init__(
        self,
        agent: AgentSpec,
        state: AgentRunState,
        recorder: Recorder,
        toolsets: ToolsetIndex,
        holds: SubagentHolds,
    ) -> None:
        self.agent = agent
        self.state = state
        self.recorder = recorder
        self.toolsets = toolsets
        self.holds = holds

    def apply(self, call: ToolCall, outcome: Outcome) -> None:
        state = self.state
        decision = self._take_approval(call.id)
        if isinstance(outcome, SubagentWaiting):
            agent = self.agent.subagents[call.name].agent.name
            approvals, deferred = self.holds.hold(call, outcome, agent)
            for approval in approvals:
                self.recorder.emit(N.TOOL_CALL, ApprovalRequestedData.of(approval))
            for waiting in deferred:
                self.recorder.emit(N.TOOL_CALL, CallDeferredData.of(waiting))
            return
        if isinstance(outcome, SubagentSuspended):
            stored = outcome.checkpoint.model_dump(mode="json")
            state.suspended_subagents = {**state.suspended_subagents, call.id: stored}
            return
        if isinstance(outcome, ToolApprovalNeeded):
            self.ask_approval(PendingToolApproval.for_call(call, outcome.reason, outcome.metadata))
            return
        if isinstance(outcome, ToolDeferred):
            deferred_call = DeferredToolCall.for_call(call, outcome.reason, outcome.metadata)
            state.deferred_tool_returns = [*state.deferred_tool_returns, deferred_call]
            self.recorder.emit(N.TOOL_CALL, CallDeferredData.of(deferred_call))
            return
        tool_return = outcome.tool_return
        if isinstance(outcome, ToolRetry):
            self._count_retry(call, tool_return)
        else:
            usage = state.usage.add(_ONE_TOOL_CALL)
            if outcome.usage is not None:
                usage = usage.add(outcome.usage)
            state.usage = usage
            if call.name in state.tool_retries:
                state.tool_retries = {k: v for k, v in state.tool_retries.items() if k != call.name}
            if outcome.toolset_changed:
                self.toolsets.mark_stale(call.name)
            if decision is not None:
                tool_return = _annotated(tool_return, decision)
        state.pending_tool_returns = [*state.pending_tool_returns, tool_return]
        subagent = self.agent.subagents.get(call.name)
        if subagent is not None and isinstance(outcome, ToolReturned):
            self.recorder.emit(
                N.TOOL_CALL,
                trusted(
                    SubagentEndData,
                    tool_call_id=call.id,
                    agent=subagent.agent.name,
                    is_error=tool_return.is_error,
                    usage=outcome.usage or Usage(),
                ),
            )
        self.recorder.emit_built(
            N.TOOL_CALL, ToolReturnData, lambda: ToolReturnData.of(call, tool_return)
        )

    def _count_retry(self, call: ToolCall, tool_return: ToolReturn) -> None:
        state = self.state
        used = state.tool_retries.get(call.name, 0) + 1
        limit = self.toolsets.max_retries(call.name)
        if used > limit:
            raise ToolRetryLimitExceeded(
                f"tool {call.name!r} exceeded its retry limit of {limit}; "
                f"last problem: {tool_return.content}"
            )
        state.tool_retries = {**state.tool_retries, call.name: used}

    def ask_approval(self, pending: PendingToolApproval) -> None:
        """The call now waits for a person's approval."""
        state = self.state
        state.pending_approval_tool_returns = [*state.pending_approval_tool_returns, pending]
        self.recorder.emit(N.TOOL_CALL, ApprovalRequestedData.of(pending))

    def _take_approval(self, call_id: str) -> ToolApprovalDecision | None:
        """Drops the call's pending approval (it has run, or waits anew); its decision."""
        state = self.state
        pending = state.pending_approval_tool_returns
        for approval in pending:
            if approval.tool_call_id == call_id:
                state.pending_approval_tool_returns = [
                    a for a in pending if a.tool_call_id != call_id
                ]
                return approval.decision
        return None

    def deny(self, approval: PendingToolApproval, decision: ToolApprovalDecision) -> None:
        """A denied call never runs: the model reads the denial as the call's error."""
        self._take_approval(approval.tool_call_id)
        self.state.pending_tool_returns = [
            *self.state.pending_tool_returns,
            ToolReturn(
                tool_call_id=approval.tool_call_id,
                name=approval.tool_name,
                content=decision.annotate(None),
                is_error=True,
                error_kind="approval_denied",
                metadata={"decided_by": decision.decided_by} if decision.decided_by else {},
            ),
        ]

    def resolve_deferred(self, call: DeferredToolCall, result: DeferredToolResult) -> None:
        state = self.state
        state.deferred_tool_returns = [
            d for d in state.deferred_tool_returns if d.tool_call_id != call.tool_call_id
        ]
        state.pending_tool_returns = [
            *state.pending_tool_returns,
            ToolReturn(
                tool_call_id=call.tool_call_id,
                name=call.tool_name,
                content=result.response,
                is_error=result.status == "error",
                error_kind="deferred_error" if result.status == "error" else None,
            ),
        ]
        if result.status != "error":
            state.usage = state.usage.add(_ONE_TOOL_CALL)

    # -- people's answers, as records ------------------------------------------------------

    def announce_decision(
        self, tool_call_id: str, tool_name: str, decision: ToolApprovalDecision
    ) -> int:
        """The `approval_decided` record: who decided what for one call."""
        return self.recorder.emit(
            N.TOOL_CALL, ApprovalDecidedData.of(tool_call_id, tool_name, decision)
        )

    def announce_result(self, tool_call_id: str, tool_name: str, status: str) -> int:
        """The `deferred_result` record: a deferred call's result was delivered."""
        return self.recorder.emit(
            N.TOOL_CALL,
            trusted(
                DeferredResultData, tool_call_id=tool_call_id, tool_name=tool_name, status=status
            ),
        )


def _annotated(tool_return: ToolReturn, decision: ToolApprovalDecision) -> ToolReturn:
    """The approved call's return as the model reads it after `decision`."""
    content = decision.annotate(tool_return.content)
    if content is tool_return.content:
        return tool_return
    return tool_return.model_copy(update={"content": content})
