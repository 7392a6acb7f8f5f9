"""The agent loop: a state machine over `AgentRunState`, written once for both drivers.

Each node has a boundary (a checkpoint handed to the executor) followed by its work. A
checkpoint is taken *before* the node's work, so resuming from it means doing exactly that
work and going on: nothing already recorded in state is done again.

The loop does no I/O and reads no clock: work goes through the `NodeRunner`, ids and time
through the `IdSource`. That is what lets the same code run inside a Temporal workflow.
`AgentLoop` drives; each part of a step is a collaborator with one job: `Recorder` (stream
records), `Boundaries` (checkpoints and the executor), `ModelSteps`, `ToolSteps` (which call
is next) over `ToolBatch` (classify, dispatch, apply), `OutcomeApplier`, `ToolsetIndex` and
`SubagentHolds`.
"""

from __future__ import annotations

import asyncio

from ...contract._fields import trusted
from ...contract.checkpoint import AgentExecutionNode, ExecutionSuspended
from ...contract.decisions import ToolApprovalDecision
from ...contract.errors import AgentError, AgentExecutorError
from ...contract.records import (
    NodeCompleteData,
    RecordData,
    RunCompleteData,
    RunFailedData,
    SteeredData,
)
from ...contract.state import AgentRunState, RunError, RunStatus
from ...contract.tools import ToolDefinition
from ..runner import Driver
from ..spec import AgentSpec
from .batch import ToolBatch
from .boundaries import Boundaries, Conversation
from .dispatch import ToolDispatcher
from .holds import SubagentHolds
from .model_steps import ModelSteps, run_ref
from .outcomes import OutcomeApplier
from .recorder import Recorder
from .tool_steps import ToolSteps
from .toolset_index import ToolsetIndex
from .workspace import WorkspaceSteps

__all__ = ["AgentLoop"]


N = AgentExecutionNode


def _error_kind(exc: BaseException) -> str:
    return exc.kind if isinstance(exc, AgentError) else type(exc).__name__


_NODE_COMPLETE = NodeCompleteData()


class AgentLoop:
    """Drives one run from a node until it completes, waits for a human, or is suspended."""

    def __init__(
        self, agent: AgentSpec, state: AgentRunState, driver: Driver, *, stream_start: int = 0
    ) -> None:
        self.agent = agent
        self.state = state
        self.ids = driver.ids
        recorder = self.recorder = Recorder(state, driver.sink, stream_start)
        conversation = Conversation(state)
        self.boundaries = Boundaries(state, driver.executor, driver.ids, recorder, conversation)
        toolsets = self.toolsets = ToolsetIndex(agent, state, driver.runner)
        holds = SubagentHolds(state)
        outcomes = self.outcomes = OutcomeApplier(agent, state, recorder, toolsets, holds)
        bounds = (agent.max_concurrent_tools, driver.max_concurrent_tools)
        limits = [n for n in bounds if n is not None]
        dispatcher = ToolDispatcher(
            agent,
            state,
            driver.runner,
            toolsets,
            executor=driver.executor,
            ids=driver.ids,
            prefix=driver.idempotency_prefix or state.run_id,
            max_concurrent=min(limits) if limits else None,
        )
        workspace = WorkspaceSteps(state, recorder, driver.runner)
        batch = ToolBatch(
            agent,
            state,
            recorder,
            self.boundaries,
            toolsets,
            holds,
            outcomes,
            dispatcher,
            workspace,
        )
        tools = self.tools = ToolSteps(agent, state, recorder, batch)
        self.model = ModelSteps(
            agent,
            state,
            driver.runner,
            driver.ids,
            recorder,
            conversation,
            toolsets,
            tools,
            deltas=driver.model_deltas,
        )

    # -- what drivers read and call --------------------------------------------------------

    @property
    def seq(self) -> int:
        """The next stream record's seq."""
        return self.recorder.seq

    @property
    def driving(self) -> bool:
        return self.recorder.driving

    def emit(self, node: AgentExecutionNode | None, data: RecordData) -> int:
        """A record in this run's numbering (a driver's own: a decision arrived, a fork)."""
        return self.recorder.emit(node, data)

    def emit_delta(self, step: int, attempt: int, part: str, text: str) -> int:
        return self.model.emit_delta(step, attempt, part, text)

    def announce_decision(
        self, tool_call_id: str, tool_name: str, decision: ToolApprovalDecision
    ) -> int:
        return self.outcomes.announce_decision(tool_call_id, tool_name, decision)

    def announce_result(self, tool_call_id: str, tool_name: str, status: str) -> int:
        return self.outcomes.announce_result(tool_call_id, tool_name, status)

    def toolset_definitions(self) -> list[ToolDefinition]:
        return self.toolsets.definitions()

    def steer(self, message: str) -> int:
        """Queues a user message for the model's next request (starweaver's steering).

        It waits in `state.pending_steering`, so the next checkpoint holds it, until
        `prepare_model_request` adds it to the request as a user prompt; a final answer
        given meanwhile does not end the run, the model is asked again with it. Callers
        check the message first (`controller.steering_problem`). Returns the `steered`
        record's seq."""
        self.state.pending_steering = [*self.state.pending_steering, message]
        return self.recorder.emit(None, trusted(SteeredData, message=message))

    def release(self) -> None:
        """Empties this loop and its parts, so reference counting frees a run's state at
        once when the loop is dropped (its parts refer to each other)."""
        for part in (
            self.model,
            self.tools,
            self.tools.batch,
            self.tools.batch.dispatcher,
            self.tools.batch.workspace,
            self.outcomes,
            self.toolsets,
            self.boundaries,
            self.boundaries.conversation,
            self.recorder,
        ):
            vars(part).clear()
        vars(self).clear()

    # -- driving ---------------------------------------------------------------------------

    async def drive(
        self, node: AgentExecutionNode, *, skip_boundary: bool = False
    ) -> AgentRunState:
        """Runs from `node`; `skip_boundary` resumes a run already checkpointed at `node`."""
        state = self.state
        recorder = self.recorder
        if state.status in (RunStatus.STARTING, RunStatus.WAITING):
            state.status = RunStatus.RUNNING
        current: AgentExecutionNode | None = node
        recorder.driving = True
        try:
            while current is not None:
                if skip_boundary:
                    skip_boundary = False
                else:
                    await self.boundaries.cross(current)
                following = await self._work(current)
                recorder.emit(current, _NODE_COMPLETE)
                current = following
        except ExecutionSuspended:
            raise
        except asyncio.CancelledError:
            state.status = RunStatus.CANCELLED
            raise
        except Exception as exc:
            await self._fail(exc)
            raise
        finally:
            recorder.driving = False
            state.stream_seq = recorder.seq
        return state

    async def _fail(self, exc: Exception) -> None:
        state = self.state
        state.status = RunStatus.FAILED
        error = state.error = RunError(kind=_error_kind(exc), message=str(exc))
        await self.boundaries.failed(tell_executor=not isinstance(exc, AgentExecutorError))
        self.recorder.emit(
            N.RUN_FAILED, trusted(RunFailedData, kind=error.kind, message=error.message)
        )

    async def _work(self, node: AgentExecutionNode) -> AgentExecutionNode | None:
        if node is N.RUN_START:
            return N.PREPARE_MODEL_REQUEST
        if node is N.PREPARE_MODEL_REQUEST:
            return await self.model.prepare()
        if node is N.BEFORE_MODEL_REQUEST:
            return await self.model.request()
        if node is N.MODEL_RESPONSE:
            return self.model.route_response()
        if node is N.TOOL_CALL:
            return await self.tools.tool_call(run_ref(self.state, self.ids))
        if node is N.TOOL_RETURN:
            return self.tools.tool_return()
        if node is N.VALIDATE_OUTPUT:
            return await self.model.validate_output()
        if node is N.RUN_COMPLETE:
            self.recorder.record(node, RunCompleteData, output=self.state.output)
            return None
        raise AgentExecutorError(f"cannot run from node {node.value!r}")
