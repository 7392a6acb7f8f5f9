"""`Agent`: an agent's configuration that runs itself in-process (the in-process driver)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, cast

from pydantic import BaseModel
from typing_extensions import TypeVar

from ..contract.checkpoint import AgentCheckpoint
from ..contract.decisions import (
    DeferredToolCall,
    DeferredToolResult,
    PendingToolApproval,
    ToolApprovalDecision,
)
from ..contract.messages import ModelMessage
from ..contract.records import AgentStreamRecord, StreamSink
from ..contract.state import AgentRunState, RunStatus
from ..contract.usage import Usage
from ..engine import telemetry
from ..engine.controller import RunController
from ..engine.ids import IdSource, SystemIdSource
from ..engine.overrides import AgentOverrides
from ..engine.runner import Driver, NodeRunner
from ..engine.spec import AgentSpec
from .in_process import DirectNodeRunner

__all__ = ["Agent", "AgentResult", "NewOutputT", "OutputT"]

OutputT = TypeVar("OutputT", default=str)
NewOutputT = TypeVar("NewOutputT", bound=BaseModel)


@dataclass
class AgentResult(Generic[OutputT]):
    """The end of a run: completed, or waiting for a human (`status == "waiting"`)."""

    output: OutputT | None
    structured_output: Any
    state: AgentRunState
    usage: Usage = field(default_factory=Usage)

    @property
    def messages(self) -> list[ModelMessage]:
        return self.state.message_history

    @property
    def status(self) -> RunStatus:
        return self.state.status

    @property
    def pending_approvals(self) -> list[PendingToolApproval]:
        return self.state.pending_approval_tool_returns

    @property
    def deferred_calls(self) -> list[DeferredToolCall]:
        return self.state.deferred_tool_returns


@dataclass(frozen=True)
class Agent(AgentSpec, Generic[OutputT]):
    """A configured agent (see `AgentSpec` for what it holds). Immutable: `with_executor`
    returns a new one. Runs in-process with `run`, `resume` and `resume_after_hitl`."""

    # -- running ---------------------------------------------------------------------------

    def _result(self, state: AgentRunState) -> AgentResult[OutputT]:
        output: Any = state.output
        if self.output_type is not None and state.structured_output is not None:
            output = self.output_type.model_validate(state.structured_output)
        return AgentResult(
            output=cast(OutputT, output) if state.status == RunStatus.COMPLETED else None,
            structured_output=state.structured_output,
            state=state,
            usage=state.usage,
        )

    def controller(
        self,
        *,
        runner: NodeRunner | None = None,
        ids: IdSource | None = None,
        sink: StreamSink | None = None,
    ) -> RunController:
        """The in-process driver: nodes run here, checkpoints go to this agent's executor."""
        return RunController(
            self,
            Driver(
                runner=runner or DirectNodeRunner(self),
                executor=self.executor,
                ids=ids or SystemIdSource(),
                sink=sink,
            ),
        )

    async def run(
        self,
        prompt: str,
        *,
        message_history: Sequence[ModelMessage] | None = None,
        conversation_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        sink: StreamSink | None = None,
        runner: NodeRunner | None = None,
        ids: IdSource | None = None,
    ) -> AgentResult[OutputT]:
        """Runs to completion, or to a wait for a human; raises `ExecutionSuspended` on Suspend."""
        controller = self.controller(runner=runner, ids=ids, sink=sink)
        state = controller.new_state(
            prompt,
            message_history=message_history,
            conversation_id=conversation_id,
            metadata=metadata,
        )
        async with self.open_toolsets():
            with telemetry.invoke_agent_span(self.name, state, new_run=True) as span:
                return self._result(span.finished(await controller.start(state)))

    async def resume(
        self,
        checkpoint: AgentCheckpoint,
        *,
        overrides: AgentOverrides | None = None,
        sink: StreamSink | None = None,
        runner: NodeRunner | None = None,
        ids: IdSource | None = None,
    ) -> AgentResult[OutputT]:
        """Continues from a stored checkpoint, doing that node's work and what follows;
        `overrides` try it with another allowed model, other settings or instructions."""
        agent = self.with_overrides(overrides)
        controller = agent.controller(runner=runner, ids=ids, sink=sink)
        instructions = overrides.instructions if overrides is not None else None
        async with agent.open_toolsets():
            with telemetry.invoke_agent_span(agent.name, checkpoint.state, new_run=False) as span:
                resumed = await controller.resume(checkpoint, instructions=instructions)
                return agent._result(span.finished(resumed))

    async def resume_after_hitl(
        self,
        state: AgentRunState,
        *,
        approvals: Mapping[str, ToolApprovalDecision | bool] | None = None,
        deferred_results: Sequence[DeferredToolResult] | None = None,
        sink: StreamSink | None = None,
        runner: NodeRunner | None = None,
        ids: IdSource | None = None,
    ) -> AgentResult[OutputT]:
        """Continues a waiting run once every pending call has a decision or result."""
        controller = self.controller(runner=runner, ids=ids, sink=sink)
        async with self.open_toolsets():
            with telemetry.invoke_agent_span(self.name, state, new_run=False) as span:
                continued = await controller.continue_after_hitl(state, approvals, deferred_results)
                return self._result(span.finished(continued))

    async def run_stream(
        self, prompt: str, *, message_history: Sequence[ModelMessage] | None = None
    ) -> AsyncIterator[AgentStreamRecord]:
        """Yields stream records as the run makes them; errors are raised after the last one."""
        queue: asyncio.Queue[AgentStreamRecord | None] = asyncio.Queue()

        async def produce() -> None:
            try:
                await self.run(prompt, message_history=message_history, sink=queue.put_nowait)
            finally:
                queue.put_nowait(None)

        task = asyncio.ensure_future(produce())
        while (record := await queue.get()) is not None:
            yield record
        await task
