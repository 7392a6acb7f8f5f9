"""Sub-agents waiting for a human, in-process: the parent holds their runs.

A sub-agent's run that ends waiting for a person is kept in the parent's state
(`subagent_runs`), and its pending calls are listed as the parent's own, marked `held_by`
the parent's call, so the same decisions reach them. Once every held call is decided, the
sub-agent's run is taken back out and goes on. (On Temporal the child workflow holds its
own state; the parent only lists its calls.)
"""

from __future__ import annotations

from typing import Any

from ...contract.decisions import PendingCall
from ...contract.messages import ToolCall
from ...contract.state import AgentRunState
from ..subagents import HELD_BY, SubagentResume, SubagentWaiting

__all__ = ["SubagentHolds"]


class SubagentHolds:
    """The sub-agent runs one parent run holds, by the parent's tool call id."""

    def __init__(self, state: AgentRunState) -> None:
        self.state = state

    def hold(
        self, call: ToolCall, waiting: SubagentWaiting, agent: str
    ) -> tuple[list[PendingCall], list[PendingCall]]:
        """Keeps the waiting sub-agent run `waiting` for call `call` (of sub-agent
        `agent`) and lists its undecided calls as this run's; returns the approvals and
        deferred calls it now lists, to be announced."""
        state = self.state
        child = waiting.state
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
        return list(approvals), list(deferred)

    def ready(self, call_id: str) -> bool:
        """Whether every call the sub-agent run of `call_id` holds has its decision."""
        state = self.state
        return all(
            a.decision is not None
            for a in state.pending_approval_tool_returns
            if a.metadata.get(HELD_BY) == call_id
        ) and all(
            d.result is not None
            for d in state.deferred_tool_returns
            if d.metadata.get(HELD_BY) == call_id
        )

    def take(self, call_id: str) -> SubagentResume:
        """The held sub-agent run of `call_id` with its calls' decisions, taken out of this
        run's state (once `ready`)."""
        state = self.state
        approvals = [
            a for a in state.pending_approval_tool_returns if a.metadata.get(HELD_BY) == call_id
        ]
        deferred = [d for d in state.deferred_tool_returns if d.metadata.get(HELD_BY) == call_id]
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
