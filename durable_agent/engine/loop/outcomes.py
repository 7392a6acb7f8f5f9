"""The loop's apply step: what one tool call's outcome does to the run's state.

A returned or retried call adds its tool return (and counts against the tool's retries or
the run's usage); a call that needs approval or is deferred waits, announced on the stream;
a sub-agent left waiting for a human is held: this run keeps its state and lists its
pending calls as its own until their decisions take it back out. Denials and deferred
results a human sent are applied here too.

A mixin of `ToolSteps` (and so of `AgentLoop`): kept apart from planning and dispatching
calls (`tools`) because it is the one place run state changes after a call, in call order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...contract.checkpoint import AgentExecutionNode
from ...contract.decisions import (
    DeferredToolCall,
    DeferredToolResult,
    PendingCall,
    PendingToolApproval,
    ToolApprovalDecision,
)
from ...contract.errors import ToolRetryLimitExceeded
from ...contract.messages import ToolCall, ToolReturn
from ...contract.records import StreamKind, preview
from ...contract.state import AgentRunState
from ...contract.usage import Usage
from ..node_io import ToolApprovalNeeded, ToolCallOutcome, ToolDeferred, ToolRetry, ToolReturned
from ..spec import AgentSpec
from ..subagents import HELD_BY, SubagentResume, SubagentSuspended, SubagentWaiting

__all__ = ["Outcome", "OutcomeSteps"]

N = AgentExecutionNode
Outcome = ToolCallOutcome | SubagentWaiting | SubagentSuspended
"""What running one call gives: a tool's outcome, or (in-process) a sub-agent left waiting
or suspended."""
_ONE_TOOL_CALL = Usage(tool_calls=1)


def _tool_return_data(call: ToolCall, tool_return: ToolReturn) -> dict[str, Any]:
    content, cut = preview(tool_return.content)
    return {
        "tool_call_id": call.id,
        "is_error": tool_return.is_error,
        "tool_name": call.name,
        "content": content,
        **({"content_truncated": True} if cut else {}),
    }


class OutcomeSteps:
    """`ToolSteps`' apply step and its bookkeeping of calls that wait for humans."""

    agent: AgentSpec
    state: AgentRunState
    emit: Callable[..., int]
    emit_built: Callable[..., int]
    _mark_stale: Callable[[str], None]
    _max_retries: Callable[[str], int]

    def _apply_outcome(self, call: ToolCall, outcome: Outcome) -> None:
        state = self.state
        self._drop_approval(call.id)
        if isinstance(outcome, SubagentWaiting):
            self._hold(call, outcome)
            return
        if isinstance(outcome, SubagentSuspended):
            stored = outcome.checkpoint.model_dump(mode="json")
            state.suspended_subagents = {**state.suspended_subagents, call.id: stored}
            return
        if isinstance(outcome, ToolApprovalNeeded):
            pending = PendingToolApproval.for_call(call, outcome.reason, outcome.metadata)
            state.pending_approval_tool_returns = [*state.pending_approval_tool_returns, pending]
            self._announce_wait("approval_requested", pending)
            return
        if isinstance(outcome, ToolDeferred):
            deferred = DeferredToolCall.for_call(call, outcome.reason, outcome.metadata)
            state.deferred_tool_returns = [*state.deferred_tool_returns, deferred]
            self._announce_wait("call_deferred", deferred)
            return
        tool_return = outcome.tool_return
        if isinstance(outcome, ToolReturned) and outcome.toolset_changed:
            self._mark_stale(call.name)
        if isinstance(outcome, ToolRetry):
            used = state.tool_retries.get(call.name, 0) + 1
            limit = self._max_retries(call.name)
            if used > limit:
                raise ToolRetryLimitExceeded(
                    f"tool {call.name!r} exceeded its retry limit of {limit}; "
                    f"last problem: {tool_return.content}"
                )
            state.tool_retries = {**state.tool_retries, call.name: used}
        else:
            state.usage = state.usage.add(_ONE_TOOL_CALL)
            if isinstance(outcome, ToolReturned) and outcome.usage is not None:
                state.usage = state.usage.add(outcome.usage)
            if call.name in state.tool_retries:
                state.tool_retries = {k: v for k, v in state.tool_retries.items() if k != call.name}
        state.pending_tool_returns = [*state.pending_tool_returns, tool_return]
        subagent = self.agent.subagents.get(call.name)
        if subagent is not None and isinstance(outcome, ToolReturned):
            self.emit(
                "subagent_end",
                N.TOOL_CALL,
                tool_call_id=call.id,
                agent=subagent.agent.name,
                is_error=tool_return.is_error,
                usage=(outcome.usage or Usage()).model_dump(mode="json"),
            )
        self.emit_built("tool_return", N.TOOL_CALL, lambda: _tool_return_data(call, tool_return))

    def _announce_wait(self, kind: StreamKind, call: PendingCall) -> None:
        """`approval_requested` / `call_deferred`: a call that now waits for a human, with
        what a UI shows to get it decided."""
        self.emit(
            kind,
            N.TOOL_CALL,
            tool_call_id=call.tool_call_id,
            tool_name=call.tool_name,
            arguments=call.arguments,
            reason=call.reason,
        )

    def _drop_approval(self, call_id: str) -> None:
        state = self.state
        pending = state.pending_approval_tool_returns
        if any(a.tool_call_id == call_id for a in pending):
            state.pending_approval_tool_returns = [a for a in pending if a.tool_call_id != call_id]

    def _deny(self, approval: PendingToolApproval, decision: ToolApprovalDecision) -> None:
        self._drop_approval(approval.tool_call_id)
        reason = decision.reason or "denied"
        self.state.pending_tool_returns = [
            *self.state.pending_tool_returns,
            ToolReturn(
                tool_call_id=approval.tool_call_id,
                name=approval.tool_name,
                content=f"The call was not approved: {reason}",
                is_error=True,
                error_kind="approval_denied",
                metadata={"decided_by": decision.decided_by} if decision.decided_by else {},
            ),
        ]

    def _resolve_deferred(self, call: DeferredToolCall, result: DeferredToolResult) -> None:
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

    # -- sub-agents waiting for humans -----------------------------------------------------

    def _hold(self, call: ToolCall, waiting: SubagentWaiting) -> None:
        """A sub-agent's run waits for a human: this run keeps its state and lists its
        pending calls as its own (marked `held_by` the call), so the same decisions reach
        it."""
        state = self.state
        child = waiting.state
        agent = self.agent.subagents[call.name].agent.name
        state.subagent_runs = {**state.subagent_runs, call.id: child}

        def mark(metadata: dict[str, Any]) -> dict[str, Any]:
            return {**metadata, HELD_BY: call.id, "agent": metadata.get("agent", agent)}

        approvals = [
            a.model_copy(update={"metadata": mark(a.metadata), "decision": None})
            for a in child.pending_approval_tool_returns
            if a.decision is None
        ]
        deferred = [
            d.model_copy(update={"metadata": mark(d.metadata), "result": None})
            for d in child.deferred_tool_returns
            if d.result is None
        ]
        state.pending_approval_tool_returns = [*state.pending_approval_tool_returns, *approvals]
        state.deferred_tool_returns = [*state.deferred_tool_returns, *deferred]
        for approval in approvals:
            self._announce_wait("approval_requested", approval)
        for call_deferred in deferred:
            self._announce_wait("call_deferred", call_deferred)

    def _take_held(self, call_id: str) -> SubagentResume | None:
        """The waiting sub-agent run of call `call_id` with its calls' decisions, taken out
        of this run's state; None while one of its calls is still undecided."""
        state = self.state
        approvals = [
            a for a in state.pending_approval_tool_returns if a.metadata.get(HELD_BY) == call_id
        ]
        deferred = [d for d in state.deferred_tool_returns if d.metadata.get(HELD_BY) == call_id]
        if any(a.decision is None for a in approvals) or any(d.result is None for d in deferred):
            return None
        state.pending_approval_tool_returns = [
            a for a in state.pending_approval_tool_returns if a.metadata.get(HELD_BY) != call_id
        ]
        state.deferred_tool_returns = [
            d for d in state.deferred_tool_returns if d.metadata.get(HELD_BY) != call_id
        ]
        held = dict(state.subagent_runs)
        child = held.pop(call_id)
        state.subagent_runs = held
        return SubagentResume(
            state=child,
            approvals={a.tool_call_id: a.decision for a in approvals if a.decision is not None},
            results=[d.result for d in deferred if d.result is not None],
        )

    # -- human decisions, as records -------------------------------------------------------

    def announce_decision(
        self, tool_call_id: str, tool_name: str, decision: ToolApprovalDecision
    ) -> int:
        """The `approval_decided` record: who decided what for one call."""
        return self.emit(
            "approval_decided",
            N.TOOL_CALL,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            approved=decision.approved,
            decided_by=decision.decided_by,
            reason=None if decision.approved else decision.reason,
            overridden=decision.override_arguments is not None,
        )

    def announce_result(self, tool_call_id: str, tool_name: str, status: str) -> int:
        """The `deferred_result` record: a deferred call's result was delivered."""
        return self.emit(
            "deferred_result",
            N.TOOL_CALL,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            status=status,
        )
