"""The agent loop: a state machine over `AgentRunState`, written once for both drivers.

Each node has a boundary (a checkpoint handed to the executor) followed by its work. A
checkpoint is taken *before* the node's work, so resuming from it means doing exactly that
work and going on: nothing already recorded in state is done again.

The loop does no I/O and reads no clock: work goes through the `NodeRunner`, ids and time
through the `IdSource`. That is what lets the same code run inside a Temporal workflow.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any

from ...contract._fields import trusted
from ...contract.checkpoint import (
    AgentCheckpoint,
    AgentCheckpointMetadata,
    AgentExecutionNode,
    AgentResumeEvidence,
    Continue,
    ExecutionSuspended,
    Suspend,
)
from ...contract.errors import (
    AgentError,
    AgentExecutorError,
    MaxStepsExceeded,
    OutputRetryLimitExceeded,
)
from ...contract.messages import (
    ModelMessage,
    ModelRequest,
    ModelRequestPart,
    TextContent,
    UserPromptPart,
)
from ...contract.records import AgentStreamRecord, StreamKind, response_view
from ...contract.state import AgentRunState, RunError, RunStatus
from ...contract.tools import ToolDefinition
from ...contract.toolsets import ToolsetListing, ToolsetTool
from ...contract.trace_context import TraceContext
from ...contract.usage import Usage
from ...models.base import DeltaSink, ModelDelta
from ..ids import format_timestamp, new_id
from ..node_io import (
    ModelRequestInput,
    OutputOk,
    PrepareModelRequestInput,
    RunRef,
    ValidateOutputInput,
)
from ..runner import Driver
from ..spec import AgentSpec
from ..subagents import PARENT_RUN_ID, PARENT_TOOL_CALL_ID, SubagentResume
from .tools import ToolSteps

__all__ = ["AgentLoop"]


N = AgentExecutionNode


def _error_kind(exc: BaseException) -> str:
    return exc.kind if isinstance(exc, AgentError) else type(exc).__name__


_ONE_REQUEST = Usage(requests=1)
"""What a model that does not count its requests is counted for (usage is never changed)."""


class AgentLoop(ToolSteps):
    """Drives one run from a node until it completes, waits for a human, or is suspended."""

    def __init__(
        self, agent: AgentSpec, state: AgentRunState, driver: Driver, *, stream_start: int = 0
    ) -> None:
        self.agent = agent
        self.state = state
        self.runner = driver.runner
        self.executor = driver.executor
        self.ids = driver.ids
        self.sink = driver.sink
        self.model_deltas = driver.model_deltas
        self.seq = stream_start
        self.driving = False
        """True while `drive` runs; records emitted outside it (a human's decision arriving
        while the run waits) move `state.stream_seq` on themselves."""
        self.idempotency_prefix = driver.idempotency_prefix or state.run_id
        bounds = (agent.max_concurrent_tools, driver.max_concurrent_tools)
        limits = [n for n in bounds if n is not None]
        self.max_concurrent_tools = min(limits) if limits else None
        self._indexed: list[ToolsetListing] | None = None
        self._index: dict[str, tuple[ToolsetTool, str]] = {}
        self._definitions: list[ToolDefinition] = []
        self._resumes: dict[str, SubagentResume | AgentCheckpoint] = {}
        """In-process: waiting sub-agent runs going on in this step's batch, by call id."""
        self._owned_history: list[ModelMessage] | None = None
        """The conversation list this loop made itself, so it may append to it in place."""
        self._history_views: list[weakref.ref[AgentRunState]] = []
        """Checkpoint states handed out since the last message, sharing the conversation."""
        metadata = state.metadata
        self._parent: tuple[str | None, str | None] = (
            metadata.get(PARENT_RUN_ID),
            metadata.get(PARENT_TOOL_CALL_ID),
        )
        """A sub-agent's run names its parent run and call in each checkpoint's metadata."""
        self._metadata: tuple[TraceContext | None, AgentCheckpointMetadata] | None = None

    # -- stream and boundaries -------------------------------------------------------------

    def emit(self, kind: StreamKind, node: AgentExecutionNode | None = None, /, **data: Any) -> int:
        seq = self.seq
        self.seq += 1
        if not self.driving:
            self.state.stream_seq = self.seq
        if self.sink is not None:
            self.sink(
                trusted(
                    AgentStreamRecord,
                    seq=seq,
                    kind=kind,
                    run_id=self.state.run_id,
                    node=node.value if node else None,
                    data=data,
                    workflow_id=None,
                    depth=0,
                )
            )
        return seq

    def emit_built(
        self, kind: StreamKind, node: AgentExecutionNode, build: Callable[[], dict[str, Any]]
    ) -> int:
        """`emit` for a record whose data costs something to build: built only when a sink
        listens, numbered either way, so the records' numbers do not depend on listening."""
        if self.sink is None:
            return self.emit(kind, node)
        return self.emit(kind, node, **build())

    def _checkpoint(self, node: AgentExecutionNode, stream_cursor: int) -> AgentCheckpoint:
        state = self.state
        view = state.snapshot(view=True)
        self._history_views.append(weakref.ref(view))
        return trusted(
            AgentCheckpoint,
            checkpoint_id=new_id(self.ids, "ckpt"),
            run_id=state.run_id,
            conversation_id=state.conversation_id,
            node=node,
            run_step=state.run_step,
            resume=AgentResumeEvidence.from_state(state, node, stream_cursor),
            state=view,
            metadata=self._checkpoint_metadata(state.trace_context),
        )

    def _checkpoint_metadata(self, trace_context: TraceContext | None) -> AgentCheckpointMetadata:
        """One metadata model for the checkpoints of a run while its trace stays the same
        (checkpoints, like messages, are never changed), instead of one per boundary."""
        kept = self._metadata
        if kept is not None and kept[0] is trace_context:
            return kept[1]
        metadata = trusted(
            AgentCheckpointMetadata,
            span_id=trace_context.span_id if trace_context else None,
            trace_id=trace_context.trace_id if trace_context else None,
            parent_run_id=self._parent[0],
            parent_tool_call_id=self._parent[1],
        )
        self._metadata = trace_context, metadata
        return metadata

    def _add_message(self, message: ModelMessage) -> None:
        """Appends to the conversation, in place unless a checkpoint still holds the list.

        Checkpoints share the conversation instead of copying it (five boundaries a step
        copying it would make each step cost O(history)); a later message must not show up
        in a checkpoint someone kept, so a list still held is copied once before it grows."""
        state = self.state
        history = state.message_history
        shared = history is not self._owned_history or any(
            (view := ref()) is not None and view.message_history is history
            for ref in self._history_views
        )
        if shared:
            history = [*history, message]
            state.message_history = self._owned_history = history
        else:
            history.append(message)
        self._history_views.clear()

    async def _boundary(self, node: AgentExecutionNode) -> None:
        cursor = self.emit("node_start", node)
        checkpoint = self._checkpoint(node, cursor)
        self.emit("checkpoint", node, checkpoint_id=checkpoint.checkpoint_id)
        try:
            decision = await self.executor.checkpoint(checkpoint)
        except (asyncio.CancelledError, ExecutionSuspended):
            raise
        except Exception as exc:
            raise AgentExecutorError(
                f"executor {type(self.executor).__name__} failed at {node.value}: {exc}"
            ) from exc
        if type(decision) is Continue:
            # Every boundary but a pause ends here; inside a workflow's sandbox each
            # `isinstance` goes through the sandbox's wrapper.
            return
        if isinstance(decision, Suspend):
            self.emit("suspended", node, reason=decision.reason)
            raise ExecutionSuspended(node, decision.reason, checkpoint)
        if not isinstance(decision, Continue):
            raise AgentExecutorError(
                f"executor {type(self.executor).__name__} returned {decision!r} at "
                f"{node.value}; expected Continue() or Suspend(reason=...)"
            )

    # -- driving ---------------------------------------------------------------------------

    async def drive(
        self, node: AgentExecutionNode, *, skip_boundary: bool = False
    ) -> AgentRunState:
        """Runs from `node`; `skip_boundary` resumes a run already checkpointed at `node`."""
        if self.state.status in (RunStatus.STARTING, RunStatus.WAITING):
            self.state.status = RunStatus.RUNNING
        current: AgentExecutionNode | None = node
        self.driving = True
        try:
            while current is not None:
                if skip_boundary:
                    skip_boundary = False
                else:
                    await self._boundary(current)
                following = await self._work(current)
                self.emit("node_complete", current)
                current = following
        except ExecutionSuspended:
            raise
        except asyncio.CancelledError:
            self.state.status = RunStatus.CANCELLED
            raise
        except Exception as exc:
            await self._fail(exc)
            raise
        finally:
            self.driving = False
            self.state.stream_seq = self.seq
        return self.state

    async def _fail(self, exc: Exception) -> None:
        state = self.state
        state.status = RunStatus.FAILED
        state.error = RunError(kind=_error_kind(exc), message=str(exc))
        cursor = self.emit("node_start", N.RUN_FAILED)
        checkpoint = self._checkpoint(N.RUN_FAILED, cursor)
        self.emit("checkpoint", N.RUN_FAILED, checkpoint_id=checkpoint.checkpoint_id)
        if not isinstance(exc, AgentExecutorError):
            # The run has already failed; an executor error here must not hide the cause.
            try:
                await self.executor.checkpoint(checkpoint)
            except asyncio.CancelledError:
                raise
            except Exception:
                pass
        self.emit("run_failed", N.RUN_FAILED, kind=state.error.kind, message=state.error.message)

    async def _work(self, node: AgentExecutionNode) -> AgentExecutionNode | None:
        if node is N.RUN_START:
            return N.PREPARE_MODEL_REQUEST
        if node is N.PREPARE_MODEL_REQUEST:
            return await self._prepare()
        if node is N.BEFORE_MODEL_REQUEST:
            return await self._request_model()
        if node is N.MODEL_RESPONSE:
            return self._route_response()
        if node is N.TOOL_CALL:
            return await self._tool_call()
        if node is N.TOOL_RETURN:
            return self._tool_return()
        if node is N.VALIDATE_OUTPUT:
            return await self._validate_output()
        if node is N.RUN_COMPLETE:
            self.emit("run_complete", node, output=self.state.output)
            return None
        raise AgentExecutorError(f"cannot run from node {node.value!r}")

    def _ref(self) -> RunRef:
        state = self.state
        return trusted(
            RunRef,
            run_id=state.run_id,
            conversation_id=state.conversation_id,
            run_step=state.run_step,
            timestamp=format_timestamp(self.ids.now()),
            metadata=dict(state.metadata),
        )

    # -- steering --------------------------------------------------------------------------

    def steer(self, message: str) -> int:
        """Queues a user message for the model's next request (starweaver's steering).

        It waits in `state.pending_steering`, so the next checkpoint holds it, until
        `prepare_model_request` adds it to the request as a user prompt; a final answer
        given meanwhile does not end the run, the model is asked again with it. Callers
        check the message first (`controller.steering_problem`). Returns the `steered`
        record's seq."""
        self.state.pending_steering = [*self.state.pending_steering, message]
        return self.emit("steered", None, message=message)

    # -- model -----------------------------------------------------------------------------

    async def _prepare(self) -> AgentExecutionNode:
        state = self.state
        if self.agent.toolsets:
            await self._list_toolsets()
        order = self._call_order()
        returns = sorted(
            state.pending_tool_returns, key=lambda r: order.get(r.tool_call_id, 1 << 30)
        )
        ref = self._ref()
        head: list[ModelRequestPart] = []
        tail: list[ModelRequestPart] = []
        include_instructions = state.run_step == 0 and self.agent.instructions is not None
        if state.pending_prompt is not None or include_instructions:
            # Only rendering user input is work (dynamic instructions may do I/O); the rest
            # of the request is assembled here from state.
            fresh = await self.runner.prepare_model_request(
                PrepareModelRequestInput.for_run(
                    ref, prompt=state.pending_prompt, include_instructions=include_instructions
                )
            )
            for part in fresh.parts:
                (head if part.kind in ("instruction", "system_prompt") else tail).append(part)
        request = trusted(
            ModelRequest,
            kind="request",
            parts=[
                *head,
                *(r.to_part() for r in returns),
                *state.pending_retry_prompts,
                *tail,
                *(UserPromptPart(content=[TextContent(text=m)]) for m in state.pending_steering),
            ],
            run_id=state.run_id,
            conversation_id=state.conversation_id,
            timestamp=ref.timestamp,
            metadata={},
        )
        self._add_message(request)
        # The request took them all; only what holds something is emptied (each assignment
        # goes through pydantic's __setattr__).
        if state.pending_steering:
            state.pending_steering = []
        if state.pending_prompt is not None:
            state.pending_prompt = None
        if state.pending_tool_calls:
            state.pending_tool_calls = []
        if state.pending_tool_returns:
            state.pending_tool_returns = []
        if state.pending_retry_prompts:
            state.pending_retry_prompts = []
        if state.active_tool_call_id is not None:
            state.active_tool_call_id = None
        return N.BEFORE_MODEL_REQUEST

    async def _request_model(self) -> AgentExecutionNode:
        state = self.state
        agent = self.agent
        if agent.max_steps is not None and state.run_step >= agent.max_steps:
            raise MaxStepsExceeded(
                f"the run reached max_steps={agent.max_steps} without a final answer; "
                "raise AgentBuilder.max_steps(...) if the task needs more steps"
            )
        latest = state.latest_response
        agent.usage_limits.check_before_request(state.usage, latest.usage.cost if latest else None)
        step = state.run_step + 1
        self.emit("model_request", N.BEFORE_MODEL_REQUEST, run_step=step)
        response = await self.runner.model_request(
            ModelRequestInput.for_run(
                self._ref(),
                messages=state.message_history,
                toolset_tools=self.toolset_definitions(),
            ),
            self._delta_sink(step),
        )
        usage = response.usage if response.usage.requests else response.usage.add(_ONE_REQUEST)
        self.emit_built(
            "model_response",
            N.BEFORE_MODEL_REQUEST,
            lambda: {
                "run_step": step,
                "parts": len(response.parts),
                "tool_calls": len(response.tool_calls),
                **response_view(response),
            },
        )
        self._add_message(response)
        state.latest_response = response
        state.run_step += 1
        total = state.usage = state.usage.add(usage)
        self.emit_built(
            "usage",
            N.BEFORE_MODEL_REQUEST,
            lambda: {
                "run_step": step,
                "request": usage.model_dump(mode="json"),
                "total": total.model_dump(mode="json"),
            },
        )
        agent.usage_limits.check_tokens(state.usage)
        return N.MODEL_RESPONSE

    def _delta_sink(self, step: int) -> DeltaSink | None:
        """Where a streaming model's deltas go: records of this run, numbered in order with
        everything else. None (the model is asked for the whole response at once) when no
        one listens, the driver does not want them, or the model does not stream."""
        if self.sink is None or not self.model_deltas or not self.agent.model.streams:
            return None

        def on_delta(delta: ModelDelta) -> None:
            self.emit_delta(step, 1, delta.kind, delta.text)

        return on_delta

    def emit_delta(self, step: int, attempt: int, part: str, text: str) -> int:
        """One `model_delta` record: `text` that attempt `attempt` of step `step`'s model
        request wrote, as `part` ("text" or "thinking")."""
        node = N.BEFORE_MODEL_REQUEST
        return self.emit("model_delta", node, run_step=step, attempt=attempt, part=part, text=text)

    def _route_response(self) -> AgentExecutionNode:
        state = self.state
        response = state.latest_response
        assert response is not None, "model_response without a response"
        calls = [c for c in response.tool_calls if not self.agent.is_output_tool(c.name)]
        if len(calls) < len(response.tool_calls) or not calls:
            return N.VALIDATE_OUTPUT
        state.pending_tool_calls = [c.as_call() for c in calls]
        state.active_tool_call_id = calls[0].id
        return N.TOOL_CALL

    async def _validate_output(self) -> AgentExecutionNode:
        state = self.state
        assert state.latest_response is not None, "validate_output without a response"
        outcome = await self.runner.validate_output(
            ValidateOutputInput.for_run(
                self._ref(),
                response=state.latest_response,
                attempt=state.output_validation_attempt,
            )
        )
        if isinstance(outcome, OutputOk):
            if state.pending_steering:
                # The model answered before it read what the user sent meanwhile: it gets
                # another request with those messages instead of the run ending unheard.
                return N.PREPARE_MODEL_REQUEST
            state.output = outcome.output
            state.structured_output = outcome.structured_output
            state.status = RunStatus.COMPLETED
            return N.RUN_COMPLETE
        state.output_validation_attempt += 1
        if state.output_validation_attempt > self.agent.output_retries:
            raise OutputRetryLimitExceeded(
                f"output validation failed {state.output_validation_attempt} time(s), more than "
                f"output_retries={self.agent.output_retries}; last problem: "
                f"{outcome.retry_prompt.content}"
            )
        state.pending_retry_prompts = [outcome.retry_prompt]
        return N.PREPARE_MODEL_REQUEST
