"""`LiveRun`: the one place the workflow's components reach the loop they drive.

The run controller exists once the workflow knows its agent, and its loop once a run has a
state; before that there is nothing to read. Components ask here instead of each testing
`controller`, `controller.loop` and `loop.state` for themselves.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentExecutionNode
    from ...contract.records import RecordData, RunCancelledData
    from ...contract.state import AgentRunState, RunStatus
    from ...engine.controller import RunController
    from ...engine.loop import AgentLoop
    from ...engine.spec import AgentSpec
    from ..wire import AgentWorkflowInput

__all__ = ["LiveRun", "release_evicted"]


class LiveRun:
    """The workflow's input, its controller (once there is one) and why it failed."""

    def __init__(self, input: AgentWorkflowInput) -> None:
        self.input = input
        self.controller: RunController | None = None
        self.error: str | None = None
        """`kind: message` once the run failed."""

    @property
    def loop(self) -> AgentLoop | None:
        return self.controller.loop if self.controller is not None else None

    @property
    def state(self) -> AgentRunState | None:
        """The run's live state: the one the loop is driving (None before it has one)."""
        loop = self.loop
        return loop.state if loop is not None else None

    @property
    def agent(self) -> AgentSpec | None:
        return self.controller.agent if self.controller is not None else None

    @property
    def seq(self) -> int:
        """The next stream record's seq."""
        loop = self.loop
        return loop.seq if loop is not None else 0

    def cancelled(self, reason: str | None) -> None:
        """The run was cancelled (`reason`: what its canceller said, if anything)."""
        state = self.state
        if state is not None:
            state.status = RunStatus.CANCELLED
        self.announce(None, RunCancelledData(reason=reason or None))

    def announce(self, node: AgentExecutionNode | None, data: RecordData) -> None:
        """A record of the workflow's own (a decision arrived, the run was suspended), in
        the loop's numbering; nothing before the loop exists."""
        loop = self.loop
        if loop is not None:
            loop.emit(node, data)


def release_evicted(workflow_fields: dict[str, Any]) -> None:
    """Empties a run's workflow object (its `vars`) and the components only it owns, once
    the run has left the worker's cache and none of its code runs again. The components
    refer to each other (callbacks, the loop's sink), a cycle that would keep the run's
    state and conversation until the collector's full pass; emptied, they are freed at once.
    Worker-wide objects (`hosting`, the registered agent) are only let go. Released once:
    a second call finds nothing. (A run evicted in flight also leaves its cancelled
    coroutines' frames to the collector.)"""
    live = workflow_fields.get("live")
    if not isinstance(live, LiveRun):
        return
    controller = live.controller
    owned: list[object] = [
        live,
        workflow_fields.get("executor"),
        workflow_fields.get("events"),
    ]
    if controller is not None:
        if controller.loop is not None:
            controller.loop.release()
        owned.append(controller)
    for component in owned:
        if component is not None:
            vars(component).clear()
    workflow_fields.clear()
