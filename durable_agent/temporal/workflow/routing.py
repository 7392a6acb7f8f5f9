"""Where a decision sent to a run goes: the run's own call, or a descendant's.

A lead lists the calls its sub-agents' child workflows wait on, each with the workflow that
holds it; a decision sent to the lead for one of them goes there (an `approval` signal is
forwarded, an update is refused with the holder's id, which `AgentRunHandle.approve`
follows: a workflow cannot update another). Tool call ids are unique within one response
of one run only: two sub-agents (or a sub-agent and the lead) may wait on calls of the same
id. A decision naming such an id without its holder is refused, listing the candidates,
never guessed.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from ..wire import ApprovalSignal
    from .decisions import HumanDecisions
    from .gates import Refusal
    from .live import LiveRun
    from .port import WorkflowPort
    from .subagents import ROUTING_PATCH, SubagentRuns

__all__ = ["ApprovalRouting"]


class ApprovalRouting:
    """Routes the decisions sent to one run through its tree."""

    def __init__(
        self,
        live: LiveRun,
        decisions: HumanDecisions,
        subagents: SubagentRuns,
        port: WorkflowPort,
    ) -> None:
        self._live = live
        self._decisions = decisions
        self._subagents = subagents
        self._port = port

    def forwarded(self, inputs: tuple[Any, ...]) -> bool:
        """An `approval` signal for a descendant's call goes on to the workflow holding
        it; True once it is sent there (or dropped: it names no one call)."""
        if len(inputs) != 1 or not isinstance(inputs[0], dict):
            return False
        try:
            request = ApprovalSignal.model_validate(inputs[0])
        except ValidationError:
            return False  # the gate logs why
        call_id = request.tool_call_id
        route = self._subagents.route(call_id, request.holder, self._waits_for(call_id))
        if isinstance(route, Refusal):
            holders = self._subagents.holders_of(call_id)
            # Runs recorded before the tree's calls were told apart took the first holder.
            if not self._port.patched(ROUTING_PATCH):
                route = holders[0] if holders else None
            else:
                self._port.logger.warning("approval signal ignored: %s", route.message)
                self._decisions.refused(request, route)
                return True
        if route is None:
            return False
        self._subagents.forward(request, route)
        return True

    def validate(self, request: ApprovalSignal) -> None:
        """The `submit_approval` update's validator."""
        call_id = request.tool_call_id
        route = self._subagents.route(call_id, request.holder, self._waits_for(call_id))
        if isinstance(route, Refusal):
            raise ApplicationError(route.message, type=route.kind, non_retryable=True)
        if route is not None:
            raise self._subagents.refusal(call_id, route)
        try:
            self._decisions.approval_gate.validate(request)
        except ApplicationError as refused:
            known = call_id in self._decisions.decided or self._waits_for(call_id)
            if refused.type != "invalid_approval" or known or not self._subagents.pending():
                raise
            # Not this run's: say which calls of the tree are waiting, and where.
            listed = self._subagents.candidates_everywhere(self._own_pending())
            raise ApplicationError(
                f"no pending approval for tool call id {call_id!r} here; {listed}",
                type="invalid_approval",
                non_retryable=True,
            ) from None

    def _waits_for(self, tool_call_id: str) -> bool:
        """Whether this run itself waits for a decision on a call of that id."""
        return tool_call_id in self._own_pending()

    def _own_pending(self) -> list[str]:
        state = self._live.state
        if state is None:
            return []
        return [a.tool_call_id for a in state.pending_approval_tool_returns if a.decision is None]
