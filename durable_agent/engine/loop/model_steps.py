"""The model's nodes: preparing a request, asking the model, routing its response, and
validating a final answer.

Only rendering user input (instructions, the prompt) and asking the model are work for the
node runner; the request is otherwise assembled here from state: tool returns in the order
the model called them, retry prompts, steering messages.
"""

from __future__ import annotations

from ...contract._fields import trusted
from ...contract.checkpoint import AgentExecutionNode
from ...contract.errors import MaxStepsExceeded, OutputRetryLimitExceeded
from ...contract.messages import ModelRequest, ModelRequestPart, TextContent, UserPromptPart
from ...contract.records import ModelDeltaData, ModelRequestData, ModelResponseData, UsageData
from ...contract.state import AgentRunState, RunStatus
from ...contract.usage import Usage
from ...models.base import DeltaSink, ModelDelta
from ..ids import IdSource, format_timestamp
from ..node_io import (
    ModelRequestInput,
    OutputOk,
    PrepareModelRequestInput,
    RunRef,
    ValidateOutputInput,
)
from ..runner import NodeRunner
from ..spec import AgentSpec
from .boundaries import Conversation
from .recorder import Recorder
from .tool_steps import ToolSteps
from .toolset_index import ToolsetIndex

__all__ = ["ModelSteps", "run_ref"]

N = AgentExecutionNode
_ONE_REQUEST = Usage(requests=1)
"""What a model that does not count its requests is counted for (usage is never changed)."""


def run_ref(state: AgentRunState, ids: IdSource) -> RunRef:
    """Which run and step a node works for, stamped with the driver's time."""
    return trusted(
        RunRef,
        run_id=state.run_id,
        conversation_id=state.conversation_id,
        run_step=state.run_step,
        timestamp=format_timestamp(ids.now()),
        metadata=dict(state.metadata),
    )


class ModelSteps:
    """One run's model requests and output validation."""

    def __init__(
        self,
        agent: AgentSpec,
        state: AgentRunState,
        runner: NodeRunner,
        ids: IdSource,
        recorder: Recorder,
        conversation: Conversation,
        toolsets: ToolsetIndex,
        tools: ToolSteps,
        *,
        deltas: bool,
    ) -> None:
        self.agent = agent
        self.state = state
        self.runner = runner
        self.ids = ids
        self.recorder = recorder
        self.conversation = conversation
        self.toolsets = toolsets
        self.tools = tools
        self.deltas = deltas
        """Whether the driver wants a streaming model's deltas (they cost history on
        Temporal)."""

    async def prepare(self) -> AgentExecutionNode:
        state = self.state
        agent = self.agent
        if agent.toolsets:
            await self.toolsets.list_toolsets(run_ref(state, self.ids))
        order = self.tools.call_order()
        returns = sorted(
            state.pending_tool_returns, key=lambda r: order.get(r.tool_call_id, 1 << 30)
        )
        ref = run_ref(state, self.ids)
        head: list[ModelRequestPart] = []
        tail: list[ModelRequestPart] = []
        include_instructions = state.run_step == 0 and agent.instructions is not None
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
        self.conversation.add(request)
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

    async def request(self) -> AgentExecutionNode:
        state = self.state
        agent = self.agent
        recorder = self.recorder
        if agent.max_steps is not None and state.run_step >= agent.max_steps:
            raise MaxStepsExceeded(
                f"the run reached max_steps={agent.max_steps} without a final answer; "
                "raise AgentBuilder.max_steps(...) if the task needs more steps"
            )
        latest = state.latest_response
        agent.usage_limits.check_before_request(state.usage, latest.usage.cost if latest else None)
        step = state.run_step + 1
        node = N.BEFORE_MODEL_REQUEST
        recorder.record(node, ModelRequestData, run_step=step)
        response = await self.runner.model_request(
            ModelRequestInput.for_run(
                run_ref(state, self.ids),
                messages=state.message_history,
                toolset_tools=self.toolsets.definitions(),
            ),
            self._delta_sink(step),
        )
        usage = response.usage if response.usage.requests else response.usage.add(_ONE_REQUEST)
        recorder.emit_built(node, ModelResponseData, lambda: ModelResponseData.of(step, response))
        self.conversation.add(response)
        state.latest_response = response
        state.run_step += 1
        total = state.usage = state.usage.add(usage)
        recorder.record(node, UsageData, run_step=step, request=usage, total=total)
        agent.usage_limits.check_tokens(state.usage)
        return N.MODEL_RESPONSE

    def _delta_sink(self, step: int) -> DeltaSink | None:
        """Where a streaming model's deltas go: records of this run, numbered in order with
        everything else. None (the model is asked for the whole response at once) when no
        one listens, the driver does not want them, or the model does not stream."""
        if self.recorder.sink is None or not self.deltas or not self.agent.model.streams:
            return None

        def on_delta(delta: ModelDelta) -> None:
            self.emit_delta(step, 1, delta.kind, delta.text)

        return on_delta

    def emit_delta(self, step: int, attempt: int, part: str, text: str) -> int:
        """One `model_delta` record: `text` that attempt `attempt` of step `step`'s model
        request wrote, as `part` ("text" or "thinking")."""
        return self.recorder.record(
            N.BEFORE_MODEL_REQUEST,
            ModelDeltaData,
            run_step=step,
            attempt=attempt,
            part=part,
            text=text,
        )

    def route_response(self) -> AgentExecutionNode:
        state = self.state
        response = state.latest_response
        assert response is not None, "model_response without a response"
        calls = [c for c in response.tool_calls if not self.agent.is_output_tool(c.name)]
        if len(calls) < len(response.tool_calls) or not calls:
            return N.VALIDATE_OUTPUT
        state.pending_tool_calls = [c.as_call() for c in calls]
        state.active_tool_call_id = calls[0].id
        return N.TOOL_CALL

    async def validate_output(self) -> AgentExecutionNode:
        state = self.state
        assert state.latest_response is not None, "validate_output without a response"
        outcome = await self.runner.validate_output(
            ValidateOutputInput.for_run(
                run_ref(state, self.ids),
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
