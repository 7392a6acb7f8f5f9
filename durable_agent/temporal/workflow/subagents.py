"""Sub-agents on Temporal: each call a child `AgentWorkflow`, one tree for humans.

The parent starts one child per call, with an id made of its own workflow id, run, step and
call id: unique over the chain (tool call ids repeat across a session's turns), the same on
replay, so a worker crash or a replay never starts a second child (Temporal matches the
recorded start). The child is cancelled with the parent (`REQUEST_CANCEL`).

While the parent awaits a child, the child tells it of each change of its status by signal
(`subagent_status`): the parent's `status` then reads `waiting` while a descendant waits for
a human, and lists the descendant's pending calls with the workflow that holds each. A
decision sent to the parent for a child's call is forwarded (signal) or refused with the
holder's id (update: a workflow cannot update another), which `AgentRunHandle.approve`
follows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import (
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    TimeoutError,
)
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from ...contract.errors import UserError
    from ...contract.state import AgentRunState, RunStatus
    from ...contract.usage import Usage
    from ...engine.node_io import ToolCallOutcome, ToolReturned
    from ...engine.subagents import (
        MAX_SUBAGENT_DEPTH,
        SubagentCall,
        depth_exceeded,
        output_of,
        subagent_failure,
        subagent_finished,
    )
    from ..outbox import Outbox
    from ..queries import ApprovalRefusal
    from ..runner import CANCEL_PATCH
    from ..tracing import subagent_tool_span
    from ..wire import (
        HELD_BY_SUBAGENT,
        AgentWorkflowInput,
        AgentWorkflowResult,
        ApprovalSignal,
        ParentLink,
        PendingApprovalView,
        SubagentStatus,
        SubagentView,
    )
    from .gates import Refusal, parse_signal
    from .port import WorkflowPort

__all__ = [
    "AMBIGUOUS_CALL",
    "ROUTING_PATCH",
    "USAGE_PATCH",
    "SUBAGENT_STATUS_SIGNAL",
    "ParentNotifier",
    "SubagentRuns",
]

SUBAGENT_STATUS_SIGNAL = "subagent_status"
ROUTING_PATCH = "durable-agent.approval-routing"
"""Marks a run that told apart two calls of one id in its tree: an `approval` signal naming
no one of them is dropped, where runs recorded before sent it to the first holder."""
USAGE_PATCH = "durable-agent.live-subagent-usage"
"""Marks a sub-agent's run that tells its parent of its usage as it goes, not only of its
status changes."""
AMBIGUOUS_CALL = "ambiguous_call"
"""The refusal of a decision whose tool call id more than one workflow of the tree waits on."""


class SubagentRuns:
    """The child workflows of this run's sub-agent calls, and what each reported."""

    def __init__(
        self,
        port: WorkflowPort,
        publish: Callable[[], None],
        *,
        priority: int | None = None,
        refused: Callable[[ApprovalRefusal], None] = lambda refused: None,
    ) -> None:
        self._port = port
        self._publish = publish
        self._refused = refused
        """Where a descendant's refusals of approval signals go (this run's details and
        stream): a signal forwarded down the tree cannot answer its sender."""
        self._refusals_seen: dict[str, int] = {}
        self._views: dict[str, SubagentView] = {}
        self._pending: dict[str, list[PendingApprovalView]] = {}
        self._outbox = Outbox()
        self._calls: dict[str, tuple[str, int, str]] = {}
        """Each child's parent run, step and tool call id: which usage is not yet the run's."""
        self.priority = priority
        """The parent's priority, which its sub-agents' runs inherit."""

    async def call(self, call: SubagentCall) -> ToolCallOutcome:
        tool_call = call.input.call
        if call.depth > MAX_SUBAGENT_DEPTH:
            return depth_exceeded(tool_call, call.depth)
        try:
            prompt = call.subagent.prompt_of(tool_call, call.input.override_arguments)
        except UserError as error:
            return subagent_failure(tool_call, error.kind, error.message)
        child_id = call.child_id
        agent = call.subagent.agent.name
        view = SubagentView(
            tool_call_id=tool_call.id, agent=agent, workflow_id=child_id, status="starting"
        )
        self._views[child_id] = view
        ref = call.input
        self._calls[child_id] = (ref.run_id, ref.run_step, tool_call.id)
        self._publish()
        started = workflow.time_ns()
        outcome = await self._run_child(call, child_id, prompt, view)
        returned = outcome.tool_return if isinstance(outcome, ToolReturned) else None
        if returned is not None:
            failed = returned.metadata.get("subagent_error_kind") if returned.is_error else None
            subagent_tool_span(
                call.parent_agent, tool_call.name, tool_call.id, child_id, started, failed
            )
        return outcome

    async def _run_child(
        self, call: SubagentCall, child_id: str, prompt: str, view: SubagentView
    ) -> ToolCallOutcome:
        tool_call = call.input.call
        own = self._port.identity()
        agent = call.subagent.agent.name
        timeout = call.subagent.timeout_seconds
        try:
            result: AgentWorkflowResult = await workflow.execute_child_workflow(
                "AgentWorkflow",
                AgentWorkflowInput(
                    agent=agent,
                    prompt=prompt,
                    metadata=call.metadata,
                    parent=ParentLink(workflow_id=own.workflow_id, tool_call_id=tool_call.id),
                    priority=self.priority,
                ),
                id=child_id,
                task_queue=call.subagent.task_queue,
                result_type=AgentWorkflowResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                execution_timeout=timedelta(seconds=timeout) if timeout is not None else None,
                static_summary=f"sub-agent {agent} · {tool_call.id}",
            )
        except ChildWorkflowError as error:
            kind, message = _failure_of(error, timeout)
            self._ended(child_id, "cancelled" if kind == "cancelled" else "failed")
            cancelled = kind == "cancelled" and self._port.cancel_requested()
            if cancelled and self._port.patched(CANCEL_PATCH):
                # This run is being cancelled, and its child with it: the run ends
                # cancelled, no model request follows (runs recorded before went on).
                raise asyncio.CancelledError(message) from error
            return subagent_failure(tool_call, kind, message, view.usage)
        self._ended(child_id, result.status, result.usage)
        output = output_of(result.structured_output, result.output)
        change = call.workspace_change(result.environment_ref)
        return subagent_finished(tool_call, output, result.usage, change)

    def _ended(self, child_id: str, status: str, usage: Usage | None = None) -> None:
        view = self._views[child_id]
        view.status = status
        if usage is not None:
            view.usage = usage
        self._pending.pop(child_id, None)
        self._publish()

    # -- what children report ------------------------------------------------------------

    def on_status(self, *inputs: Any) -> None:
        """A child's `subagent_status` signal (never sent by people)."""
        report = parse_signal(SubagentStatus, SUBAGENT_STATUS_SIGNAL, inputs, self._port)
        if report is not None:
            self.update(report)

    def update(self, report: SubagentStatus) -> None:
        """A child's `subagent_status` signal. Reports of children this run did not start
        (or that ended) are ignored: only the parent's own children change its status."""
        view = self._views.get(report.workflow_id)
        if view is None or view.status in _ENDED:
            return
        view.status = report.status
        view.usage = report.usage
        seen = self._refusals_seen.get(report.workflow_id, 0)
        fresh = report.refused_total - seen
        if fresh > 0:
            self._refusals_seen[report.workflow_id] = report.refused_total
            for refused in report.refused[-fresh:]:
                holder = refused.workflow_id or report.workflow_id
                self._refused(refused.model_copy(update={"workflow_id": holder}))
        self._pending[report.workflow_id] = [
            p.model_copy(update={"workflow_id": p.workflow_id or report.workflow_id})
            for p in report.pending_approvals
        ]
        self._publish()

    @property
    def outbox(self) -> Outbox:
        """The decisions this run forwards to its children (drained before the run ends)."""
        return self._outbox

    def views(self) -> list[SubagentView]:
        return list(self._views.values())

    def unapplied_usage(self, state: AgentRunState | None) -> Usage:
        """What the children of the step in flight have used that the run's own usage
        does not hold yet (a child's usage is added when its call's outcome is applied):
        each reports its own, its descendants' included, as it goes."""
        total = Usage()
        if state is None or not state.pending_tool_calls:
            return total
        applied = {r.tool_call_id for r in state.pending_tool_returns}
        calls = {c.id for c in state.pending_tool_calls}
        for child_id, view in self._views.items():
            run_id, step, call_id = self._calls.get(child_id, ("", -1, ""))
            in_flight = run_id == state.run_id and step == state.run_step and call_id in calls
            if in_flight and call_id not in applied:
                total = total.add(view.usage)
        return total

    def waiting(self) -> bool:
        """A child (or a descendant of one) waits for a human."""
        return any(
            view.status == RunStatus.WAITING.value and view.status not in _ENDED
            for view in self._views.values()
        )

    def pending(self) -> list[PendingApprovalView]:
        """The descendants' calls waiting for a decision, each naming its workflow."""
        return [p for calls in self._pending.values() for p in calls]

    def holders_of(self, tool_call_id: str) -> list[str]:
        """The workflows holding a descendant's undecided call of that id (models that
        number their calls give two sub-agents the same ids)."""
        return [
            p.workflow_id
            for p in self.pending()
            if p.tool_call_id == tool_call_id and not p.decided and p.workflow_id is not None
        ]

    def route(self, tool_call_id: str, holder: str | None, own: bool) -> str | Refusal | None:
        """Where a decision for `tool_call_id` goes: a descendant's workflow id, None (this
        run's own call), or why it cannot go anywhere. `holder` names the workflow holding
        the call (None: whichever one does); `own` says whether this run itself waits
        for a call of that id."""
        here = self._port.identity().workflow_id
        holders = self.holders_of(tool_call_id)
        if holder is not None:
            if holder == here or holder in holders:
                return None if holder == here else holder
            return Refusal(
                "invalid_approval",
                f"workflow {holder!r} holds no pending tool call {tool_call_id!r} of this run; "
                f"{self.candidates(tool_call_id, own)}",
            )
        if len(holders) + own > 1:
            return Refusal(
                AMBIGUOUS_CALL,
                f"tool call id {tool_call_id!r} is pending in more than one workflow; "
                f"{self.candidates(tool_call_id, own)}",
            )
        return holders[0] if holders else None

    def candidates(self, tool_call_id: str, own: bool) -> str:
        """The calls of that id people may decide, each with the command that does."""
        here = self._port.identity().workflow_id
        calls = [
            (p.workflow_id or here, p.agent, p.tool_name)
            for p in self.pending()
            if p.tool_call_id == tool_call_id and not p.decided
        ]
        listed = [f"{w} ({agent or '?'}: {tool})" for w, agent, tool in calls]
        if own:
            listed.insert(0, f"{here} (this run)")
        if not listed:
            return "it is not pending anywhere in this run's tree"
        return "pending in: " + ", ".join(listed) + " (name one with --holder)"

    def candidates_everywhere(self, own: list[str]) -> str:
        """Every call of the tree waiting for a decision: this run's ids, then its
        descendants' with the workflow holding each."""
        listed = [repr(call_id) for call_id in own]
        listed += [
            f"{p.tool_call_id!r} ({p.agent or '?'}: {p.tool_name}, in {p.workflow_id})"
            for p in self.pending()
            if not p.decided
        ]
        return f"pending: {', '.join(listed) or 'none'}"

    def forward(self, signal: ApprovalSignal, holder: str) -> None:
        """Sends an `approval` signal meant for a descendant's call on to its workflow."""
        self._outbox.send(holder, "approval", signal)

    def refusal(self, tool_call_id: str, holder: str) -> ApplicationError:
        """The update error for a decision sent here for a descendant's call."""
        return ApplicationError(
            f"tool call {tool_call_id!r} is held by sub-agent workflow {holder!r}: send the "
            "decision there (AgentRunHandle.approve on this run does)",
            holder,
            type=HELD_BY_SUBAGENT,
            non_retryable=True,
        )


_ENDED = (RunStatus.COMPLETED.value, RunStatus.FAILED.value, RunStatus.CANCELLED.value)


def _failure_of(error: ChildWorkflowError, timeout: float | None) -> tuple[str, str]:
    cause = error.cause
    if isinstance(cause, ApplicationError):
        return cause.type or "ApplicationError", cause.message
    if isinstance(cause, TimeoutError):
        return "timeout", f"did not finish within {timeout:g} s" if timeout else "timed out"
    if isinstance(cause, CancelledError):
        return "cancelled", "the sub-agent's run was cancelled"
    return type(cause).__name__ if cause else "child_workflow_error", str(cause or error)


class ParentNotifier:
    """A sub-agent's run telling its parent of each change of its status, in order."""

    def __init__(self, parent: ParentLink, port: WorkflowPort, agent: str) -> None:
        self._parent = parent
        self._port = port
        self._agent = agent
        self._last: tuple[str, tuple[tuple[str, bool], ...], int, int, int] | None = None
        self._outbox = Outbox(ordered=True)

    def changed(
        self,
        status: str,
        pending: list[PendingApprovalView],
        usage: Usage,
        refused: list[ApprovalRefusal],
        refused_total: int,
    ) -> None:
        if status in _ENDED:
            return  # the parent learns the end from the child's result
        calls = tuple((p.tool_call_id, p.decided) for p in pending)
        key = (status, calls, usage.requests, usage.tool_calls, refused_total)
        if key == self._last:
            return
        # Usage or refusals alone changed: the parent's usage includes its children's as
        # they go, and it shows their refusals (children recorded before told their parent
        # only of status changes).
        last = self._last
        if last is not None and last[:2] == key[:2] and not self._port.patched(USAGE_PATCH):
            return
        self._last = key
        own = self._port.identity().workflow_id
        report = SubagentStatus(
            workflow_id=own,
            tool_call_id=self._parent.tool_call_id,
            status=status,
            pending_approvals=[
                p.model_copy(
                    update={"workflow_id": p.workflow_id or own, "agent": p.agent or self._agent}
                )
                for p in pending
            ],
            usage=usage,
            refused=refused,
            refused_total=refused_total,
        )
        self._outbox.send(self._parent.workflow_id, SUBAGENT_STATUS_SIGNAL, report)
