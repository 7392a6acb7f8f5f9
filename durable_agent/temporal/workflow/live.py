"""`LiveRun`: the one place the workflow's components reach the loop they drive.

The run controller exists once the workflow knows its agent, and its loop once a run has a
state; before that there is nothing to read. Components ask here instead of each testing
`controller`, `controller.loop` and `loop.state` for themselves.

A run that waits for a person keeps its state as compressed JSON meanwhile (`park`, see
`ParkedRun`), and lets go of its loop: a worker holds every cached waiting run, and the
conversation is the part of one that grows with the run (about 6 KB a tool step as objects
against 0.6 KB as JSON), the loop a dozen collaborators. Readers meanwhile get copies read
back for them (`state`, `messages`); what the wait does through a loop (a record for a
decision as it arrives, a steering message) goes through one made again from the state
(`loop`), which then stays until the run goes on (`unpark`) in a loop of its own
(`RunController.continue_after_hitl`). Making a loop draws no ids and issues nothing, so it
is the same loop, numbering records on from where the parked one stopped; parking issues no
command either, so a replay parks and unparks at the same points.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from ...contract.checkpoint import AgentExecutionNode
    from ...contract.messages import ModelMessage
    from ...contract.records import RecordData, RunCancelledData
    from ...contract.state import AgentRunState, RunStatus
    from ...contract.tools import ToolDefinition
    from ...engine.controller import RunController
    from ...engine.loop import AgentLoop
    from ...engine.spec import AgentSpec
    from ..executor import TemporalExecutor
    from ..wire import AgentWorkflowInput
    from .parked import ParkedRun, answered_by

__all__ = ["LiveRun", "release_evicted"]


class LiveRun:
    """The workflow's input, its controller (once there is one) and why it failed."""

    def __init__(self, input: AgentWorkflowInput) -> None:
        self.input = input
        self.controller: RunController | None = None
        self.error: str | None = None
        """`kind: message` once the run failed."""
        self._parked: ParkedRun | None = None
        """The state while the run waits for a person."""

    @property
    def loop(self) -> AgentLoop | None:
        """The run's loop, to act through: made again if the run let go of it to wait."""
        controller, parked = self.controller, self._parked
        if controller is None:
            return None
        if controller.loop is None and parked is not None and parked.rest is not None:
            state = parked.state()
            self._parked = parked.unpacked()
            controller.attach(state, stream_start=parked.seq)
        return controller.loop

    def _kept_loop(self) -> AgentLoop | None:
        """The loop as it is: None before there is one and while a waiting run has none."""
        return self.controller.loop if self.controller is not None else None

    def driving_loop(self) -> AgentLoop | None:
        """The loop while it drives the run (None while the run waits: nothing made)."""
        loop = self._kept_loop()
        return loop if loop is not None and loop.driving else None

    @property
    def state(self) -> AgentRunState | None:
        """The run's live state: the one the loop is driving (None before it has one).
        While the run is parked without a loop, a copy read back for this reader alone:
        what changes the state goes through `loop`."""
        loop = self._kept_loop()
        if loop is not None:
            return loop.state
        parked = self._parked
        return parked.state() if parked is not None and parked.rest is not None else None

    @property
    def agent(self) -> AgentSpec | None:
        return self.controller.agent if self.controller is not None else None

    @property
    def seq(self) -> int:
        """The next stream record's seq."""
        loop = self._kept_loop()
        if loop is not None:
            return loop.seq
        return self._parked.seq if self._parked is not None else 0

    def toolset_definitions(self) -> list[ToolDefinition]:
        """The run's listed toolset tools, for a query: a waiting run's loop is not made
        again for it (what a query reads must not change what the run keeps)."""
        controller, kept, state = self.controller, self._kept_loop(), self.state
        if kept is not None:
            return kept.toolset_definitions()
        if controller is None or state is None:
            return []
        loop = AgentLoop(controller.agent, state, controller.driver)
        try:
            return loop.toolset_definitions()
        finally:
            loop.release()

    def messages(self) -> list[ModelMessage]:
        """The run's conversation: its state's, or while it is parked a copy read back for
        this reader alone (a query, a fork, the run's status), not kept."""
        if self._parked is not None:
            return self._parked.messages()
        state = self.state
        return state.message_history if state is not None else []

    def message_count(self) -> int:
        if self._parked is not None:
            return self._parked.length
        state = self.state
        return len(state.message_history) if state is not None else 0

    def answered_by(self) -> str | None:
        """`provider:model` of the conversation's latest response (None before one): the
        run's status names it."""
        if self._parked is not None:
            return self._parked.answered_by
        return answered_by(self.messages())

    def park(self, executor: TemporalExecutor) -> None:
        """The run starts a long wait: its state is kept as JSON, `executor` lets go of
        its messages and the controller of its loop. Nothing before the loop exists."""
        controller, loop = self.controller, self._kept_loop()
        if controller is None or loop is None or self._parked is not None:
            return
        state = loop.state
        self._parked = ParkedRun.of(state, loop.seq)
        executor.let_go_of(state.message_history, self.messages)
        controller.loop = None
        loop.release()

    def unpark(self, executor: TemporalExecutor) -> AgentRunState:
        """The wait is over: the state is objects again, with its conversation, in a loop
        and `executor` (the loop copies the conversation before it next grows)."""
        loop = self.loop
        assert loop is not None, "a run waits for people once its loop has a state"
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.restore(loop.state)
            executor.take_back(loop.state.message_history)
        return loop.state

    def cancelled(self, reason: str | None) -> None:
        """The run was cancelled (`reason`: what its canceller said, if anything)."""
        loop = self.loop
        if loop is not None:
            loop.state.status = RunStatus.CANCELLED
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
