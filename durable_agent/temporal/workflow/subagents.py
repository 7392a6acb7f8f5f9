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
    from ...contract.state import RunStatus
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
    from .gates import parse_signal
    from .port import WorkflowPort

__all__ = ["SUBAGENT_STATUS_SIGNAL", "ParentNotifier", "SubagentRuns"]

SUBAGENT_STATUS_SIGNAL = "subagent_status"


class SubagentRuns:
    """The child workflows of this run's sub-agent calls, and what each reported."""

    def __init__(self, port: WorkflowPort, publish: Callable[[], None]) -> None:
        self._port = port
        self._publish = publish
        self._views: dict[str, SubagentView] = {}
        self._pending: dict[str, list[PendingApprovalView]] = {}
        self._outbox = Outbox()
        self.priority: int | None = None
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
        self._pending[report.workflow_id] = [
            p.model_copy(update={"workflow_id": p.workflow_id or report.workflow_id})
            for p in report.pending_approvals
        ]
        self._publish()

    def views(self) -> list[SubagentView]:
        return list(self._views.values())

    def waiting(self) -> bool:
        """A child (or a descendant of one) waits for a human."""
        return any(
            view.status == RunStatus.WAITING.value and view.status not in _ENDED
            for view in self._views.values()
        )

    def pending(self) -> list[PendingApprovalView]:
        """The descendants' calls waiting for a decision, each naming its workflow."""
        return [p for calls in self._pending.values() for p in calls]

    def holder_of(self, tool_call_id: str) -> str | None:
        """The workflow holding a descendant's pending call, or None."""
        for pending in self.pending():
            if pending.tool_call_id == tool_call_id and not pending.decided:
                return pending.workflow_id
        return None

    def forward(self, inputs: tuple[Any, ...]) -> bool:
        """Sends an `approval` signal meant for a descendant's call on to its workflow;
        False when the call is not a descendant's (this run handles it)."""
        if len(inputs) != 1 or not isinstance(inputs[0], dict):
            return False
        call_id = inputs[0].get("tool_call_id")
        holder = self.holder_of(call_id) if isinstance(call_id, str) else None
        if holder is None:
            return False
        self._outbox.send(holder, "approval", ApprovalSignal.model_validate(inputs[0]))
        return True

    def refusal(self, tool_call_id: str) -> ApplicationError | None:
        """The update error for a decision sent here for a descendant's call."""
        holder = self.holder_of(tool_call_id)
        if holder is None:
            return None
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
        self._last: tuple[str, tuple[tuple[str, bool], ...]] | None = None
        self._outbox = Outbox(ordered=True)

    def changed(self, status: str, pending: list[PendingApprovalView], usage: Usage) -> None:
        if status in _ENDED:
            return  # the parent learns the end from the child's result
        key = (status, tuple((p.tool_call_id, p.decided) for p in pending))
        if key == self._last:
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
        )
        self._outbox.send(self._parent.workflow_id, SUBAGENT_STATUS_SIGNAL, report)
