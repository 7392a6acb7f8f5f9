"""`AgentBuilder` and `Agent`: what users configure and run."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, cast

from pydantic import BaseModel
from typing_extensions import TypeVar

from . import telemetry
from .approvers import ApproverMap
from .controller import RunController
from .errors import InvalidInput, UserError
from .executor import AgentCheckpoint, AgentExecutor, DirectAgentExecutor
from .history_processors import HistoryProcessor, apply_history_processors
from .hitl import DeferredToolCall, DeferredToolResult, PendingToolApproval, ToolApprovalDecision
from .ids import IdSource, SystemIdSource
from .messages import ModelMessage
from .models.base import Model, ModelRequestParameters, ModelSettings
from .output import OUTPUT_TOOL_NAME, OutputValidator
from .overrides import AgentOverrides, merge_settings
from .runner import DirectNodeRunner, Driver, NodeRunner
from .state import AgentRunState, RunStatus
from .stream import AgentStreamRecord, StreamSink
from .subagents import SubAgent
from .tools import Tool, ToolContext, ToolDefinition
from .toolsets import Toolset
from .usage import Usage, UsageLimits

__all__ = ["Agent", "AgentBuilder", "AgentResult"]

OutputT = TypeVar("OutputT", default=str)
NewOutputT = TypeVar("NewOutputT", bound=BaseModel)
OversizedToolResult = Literal["truncate", "fail"]
Instructions = str | Callable[[ToolContext], str | Awaitable[str]]


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
class Agent(Generic[OutputT]):
    """A configured agent. Immutable: `with_executor` returns a new one."""

    model: Model
    name: str = "agent"
    instructions: Instructions | None = None
    tools: Mapping[str, Tool] = field(default_factory=dict)
    output_type: type[BaseModel] | None = None
    output_validators: Sequence[OutputValidator] = ()
    output_retries: int = 1
    approval_required: frozenset[str] = frozenset()
    approvers: ApproverMap = field(default_factory=dict)
    """Tool name → the users and groups who may decide its approvals (see `.approvers`)."""
    usage_limits: UsageLimits = field(default_factory=UsageLimits)
    max_steps: int | None = None
    parallel_tool_calls: bool = True
    max_concurrent_tools: int | None = None
    model_settings: ModelSettings | None = None
    max_tool_result_bytes: int = 256_000
    """Tool results larger than this (as JSON) are truncated or fail the run."""
    oversized_tool_result: OversizedToolResult = "truncate"
    toolsets: Sequence[Toolset] = ()
    """Sources of tools listed at run time (MCP servers), each under a name of its own."""
    history_processors: Sequence[HistoryProcessor] = ()
    """Applied in order to what the model sees, and to what a run carries across
    continue-as-new."""
    allowed_models: Mapping[str, Model] = field(default_factory=dict)
    """The models a resumed or forked run may switch to, by name (`AgentOverrides.model`)."""
    subagents: Mapping[str, SubAgent] = field(default_factory=dict)
    """Agents this one's model may delegate to, each a tool by its name (`.subagent`)."""
    executor: AgentExecutor = field(default_factory=DirectAgentExecutor)

    def with_executor(self, executor: AgentExecutor) -> Agent[OutputT]:
        return replace(self, executor=executor)

    def with_overrides(self, overrides: AgentOverrides | None) -> Agent[OutputT]:
        """This agent as it runs a resumed or forked run with `overrides` (itself when there
        are none); `InvalidInput` for a model name that is not in `allowed_models`."""
        if overrides is None or overrides.empty:
            return self
        model = self.model
        if overrides.model is not None:
            allowed = self.allowed_models.get(overrides.model)
            if allowed is None:
                raise InvalidInput(
                    f"agent {self.name!r} has no allowed model named {overrides.model!r} "
                    f"(allowed: {', '.join(sorted(self.allowed_models)) or 'none'}); add it "
                    "with AgentBuilder.allowed_models({name: model})"
                )
            model = allowed
        instructions = self.instructions
        if overrides.instructions is not None:
            instructions = overrides.instructions
        return replace(
            self,
            model=model,
            model_settings=merge_settings(self.model_settings, overrides.model_settings),
            instructions=instructions,
        )

    # -- configuration read by the loop and the nodes ------------------------------------

    def needs_approval(self, tool_name: str) -> bool:
        tool = self.tools.get(tool_name)
        return tool_name in self.approval_required or (tool is not None and tool.requires_approval)

    def approvers_of(self, tool_name: str) -> frozenset[str] | None:
        """Who may decide a call of `tool_name`; None when anyone may."""
        return self.approvers.get(tool_name)

    def tool_max_retries(self, tool_name: str) -> int:
        tool = self.tools.get(tool_name)
        return tool.max_retries if tool is not None else 1

    def process_history(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """The messages the model is sent: the history after this agent's processors."""
        if not self.history_processors:
            return messages
        return apply_history_processors(self.history_processors, messages)

    def is_output_tool(self, tool_name: str) -> bool:
        return self.output_type is not None and tool_name == OUTPUT_TOOL_NAME

    def toolset(self, name: str) -> Toolset:
        toolset = self._toolsets_by_name.get(name)
        if toolset is None:
            raise UserError(
                f"agent {self.name!r} has no toolset named {name!r} (toolsets: "
                f"{sorted(self._toolsets_by_name) or 'none'}); the run was started with another "
                "definition of this agent, so register the same toolsets on every worker"
            )
        return toolset

    @functools.cached_property
    def _toolsets_by_name(self) -> dict[str, Toolset]:
        return {toolset.name: toolset for toolset in self.toolsets}

    @contextlib.asynccontextmanager
    async def open_toolsets(self) -> AsyncIterator[None]:
        """Keeps every toolset open while the block runs: an in-process run opens its
        servers' sessions for the run (a toolset already open stays open after it)."""
        async with contextlib.AsyncExitStack() as stack:
            for toolset in self.toolsets:
                await stack.enter_async_context(toolset)
            yield

    def request_parameters(
        self, toolset_tools: Sequence[ToolDefinition] = ()
    ) -> ModelRequestParameters:
        """The request's tools and output settings; `toolset_tools` (the run's listed
        toolset tools) are shown to the model after the function tools."""
        if not toolset_tools:
            return self._request_parameters
        base = self._request_parameters
        return base.model_copy(update={"function_tools": [*base.function_tools, *toolset_tools]})

    @functools.cached_property
    def _request_parameters(self) -> ModelRequestParameters:
        tools = [tool.definition() for tool in self.tools.values()]
        tools.extend(subagent.definition() for subagent in self.subagents.values())
        if self.output_type is None:
            return ModelRequestParameters(function_tools=tools, settings=self.model_settings)
        schema = self.output_type.model_json_schema()
        mode = self.model.structured_output_mode
        return ModelRequestParameters(
            function_tools=tools,
            output_mode=mode,
            output_schema=schema,
            output_schema_name=self.output_type.__name__,
            output_tool=ToolDefinition(
                name=OUTPUT_TOOL_NAME,
                description=f"Return the final result as {self.output_type.__name__}.",
                parameters_json_schema=schema,
            )
            if mode == "tool"
            else None,
            settings=self.model_settings,
        )

    async def render_instructions(self, ctx: ToolContext) -> str | None:
        if self.instructions is None or isinstance(self.instructions, str):
            return self.instructions
        rendered = self.instructions(ctx)
        if inspect.isawaitable(rendered):
            rendered = await rendered
        return rendered

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
        import asyncio

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


from .builder import AgentBuilder  # noqa: E402  (the builder builds `Agent`s: imported after)
