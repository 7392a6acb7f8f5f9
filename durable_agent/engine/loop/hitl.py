"""Applying people's decisions to a waiting run's state, checked first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...contract.decisions import DeferredToolResult, ToolApprovalDecision
from ...contract.errors import HitlDecisionError
from ...contract.state import AgentRunState, RunStatus

__all__ = ["apply_hitl_decisions"]


def apply_hitl_decisions(
    state: AgentRunState,
    approvals: Mapping[str, ToolApprovalDecision | bool] | None = None,
    deferred_results: Sequence[DeferredToolResult] | None = None,
) -> AgentRunState:
    """A copy of a waiting state with every pending call decided, ready to continue.

    Rejects (with `HitlDecisionError`, changing nothing) runs that are not waiting, ids
    that are not pending, duplicate results and pending calls left without a decision.
    """
    approvals = dict(approvals or {})
    results = list(deferred_results or [])
    if state.status != RunStatus.WAITING:
        raise HitlDecisionError(
            f"run {state.run_id} is {state.status.value}, not waiting for approvals or deferred "
            "results; nothing to resume"
        )
    pending = {a.tool_call_id for a in state.pending_approval_tool_returns}
    waiting = {d.tool_call_id for d in state.deferred_tool_returns}
    unknown = sorted(set(approvals) - pending)
    if unknown:
        raise HitlDecisionError(
            f"no pending approval for tool call id(s) {unknown}; pending approvals: "
            f"{sorted(pending) or 'none'}"
        )
    seen: set[str] = set()
    for result in results:
        if result.tool_call_id not in waiting:
            raise HitlDecisionError(
                f"no deferred call with id {result.tool_call_id!r}; deferred calls: "
                f"{sorted(waiting) or 'none'}"
            )
        if result.tool_call_id in seen:
            raise HitlDecisionError(f"more than one deferred result for {result.tool_call_id!r}")
        seen.add(result.tool_call_id)
    missing = sorted((pending - set(approvals)) | (waiting - seen))
    if missing:
        raise HitlDecisionError(
            f"every pending call needs a decision; missing for tool call id(s) {missing}"
        )
    decided = {
        call_id: decision
        if isinstance(decision, ToolApprovalDecision)
        else (ToolApprovalDecision.approve() if decision else ToolApprovalDecision.deny("denied"))
        for call_id, decision in approvals.items()
    }
    by_id = {r.tool_call_id: r for r in results}
    new_state = state.snapshot()
    new_state.pending_approval_tool_returns = [
        a.model_copy(update={"decision": decided[a.tool_call_id]})
        for a in state.pending_approval_tool_returns
    ]
    new_state.deferred_tool_returns = [
        d.model_copy(update={"result": by_id[d.tool_call_id]}) for d in state.deferred_tool_returns
    ]
    response = state.latest_response
    order = [c.as_call() for c in response.tool_calls] if response else []
    # A sub-agent's calls are decided here, but the call that goes on is the parent's.
    held = set(state.subagent_runs)
    new_state.pending_tool_calls = [c for c in order if c.id in pending | waiting | held]
    new_state.active_tool_call_id = new_state.pending_tool_calls[0].id
    new_state.status = RunStatus.RUNNING
    return new_state
