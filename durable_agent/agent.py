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
from .approvers import ApproverMap, normalize_approvers
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
from .subagents import SubAgent, default_description
from .tools import TOOL_NAME as _TOOL_NAME
from .tools import Tool, ToolContext, ToolDefinition, ToolFunc
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


class AgentBuilder(Generic[OutputT]):
    """Chainable configuration; `build()` checks it and returns an `Agent`."""

    def __init__(self, model: Model) -> None:
        if not isinstance(model, Model):
            raise UserError(
                f"AgentBuilder needs a Model (TestModel, FunctionModel, OpenAIChatModel, ...), "
                f"got {type(model).__name__}"
            )
        self._model = model
        self._name = "agent"
        self._instructions: Instructions | None = None
        self._tools: list[Tool] = []
        self._output_type: type[BaseModel] | None = None
        self._validators: list[OutputValidator] = []
        self._output_retries = 1
        self._approval: list[str] = []
        self._approvers: dict[str, frozenset[str]] = {}
        self._limits = UsageLimits()
        self._max_steps: int | None = None
        self._parallel = True
        self._max_concurrent: int | None = None
        self._settings: ModelSettings | None = None
        self._max_tool_result_bytes = 256_000
        self._oversized: OversizedToolResult = "truncate"
        self._toolsets: list[Toolset] = []
        self._history_processors: list[HistoryProcessor] = []
        self._allowed_models: dict[str, Model] = {}
        self._subagents: list[SubAgent] = []

    def name(self, name: str) -> AgentBuilder[OutputT]:
        self._name = name
        return self

    def instructions(self, instructions: Instructions) -> AgentBuilder[OutputT]:
        self._instructions = instructions
        return self

    def tool(self, tool: ToolFunc | Tool, **options: Any) -> AgentBuilder[OutputT]:
        self._tools.append(tool if isinstance(tool, Tool) else Tool(tool, **options))
        return self

    def tools(self, tools: Sequence[ToolFunc | Tool]) -> AgentBuilder[OutputT]:
        for tool in tools:
            self.tool(tool)
        return self

    def toolset(self, toolset: Toolset) -> AgentBuilder[OutputT]:
        """Adds a source of tools listed at run time, e.g. `durable_agent.mcp.MCPServerStdio`;
        an agent may have several, each under its own name."""
        if not isinstance(toolset, Toolset):
            raise UserError(
                f"toolset needs a Toolset (MCPServerStdio, MCPServerStreamableHTTP, ...), got "
                f"{type(toolset).__name__}"
            )
        self._toolsets.append(toolset)
        return self

    def output_type(self, output_type: type[NewOutputT]) -> AgentBuilder[NewOutputT]:
        if not (isinstance(output_type, type) and issubclass(output_type, BaseModel)):
            raise UserError(f"output_type must be a pydantic model class, got {output_type!r}")
        self._output_type = output_type
        return cast(AgentBuilder[NewOutputT], self)

    def output_validator(self, validator: OutputValidator) -> AgentBuilder[OutputT]:
        self._validators.append(validator)
        return self

    def output_retries(self, retries: int) -> AgentBuilder[OutputT]:
        self._output_retries = retries
        return self

    def approvers(self, approvers: Mapping[str, Sequence[str]]) -> AgentBuilder[OutputT]:
        """Limits who may decide each named tool's approvals: `{"deploy": ["alice", "ops"]}`
        (users or groups). Tools left out may be decided by anyone; a later call for the same
        tool replaces its list."""
        self._approvers.update(normalize_approvers(approvers))
        return self

    def approval_required_tools(self, names: Sequence[str]) -> AgentBuilder[OutputT]:
        self._approval.extend(names)
        return self

    def usage_limits(self, limits: UsageLimits) -> AgentBuilder[OutputT]:
        self._limits = limits
        return self

    def max_steps(self, steps: int) -> AgentBuilder[OutputT]:
        if steps < 1:
            raise UserError(f"max_steps must be at least 1, got {steps}")
        self._max_steps = steps
        return self

    def sequential_tool_calls(self, sequential: bool = True) -> AgentBuilder[OutputT]:
        self._parallel = not sequential
        return self

    def max_concurrent_tools(self, limit: int) -> AgentBuilder[OutputT]:
        if limit < 1:
            raise UserError(f"max_concurrent_tools must be at least 1, got {limit}")
        self._max_concurrent = limit
        return self

    def model_settings(self, settings: ModelSettings) -> AgentBuilder[OutputT]:
        self._settings = settings
        return self

    def max_tool_result_bytes(
        self, limit: int, *, oversized: OversizedToolResult = "truncate"
    ) -> AgentBuilder[OutputT]:
        """Bounds what one tool result may put into the conversation (256 kB by default):
        larger results are truncated with a note the model can read, or fail the run."""
        if limit < 1:
            raise UserError(f"max_tool_result_bytes must be at least 1, got {limit}")
        if oversized not in ("truncate", "fail"):
            raise UserError(f"oversized must be 'truncate' or 'fail', got {oversized!r}")
        self._max_tool_result_bytes = limit
        self._oversized = oversized
        return self

    def history_processor(self, processor: HistoryProcessor) -> AgentBuilder[OutputT]:
        """Adds a processor (see `durable_agent.history_processors`: `keep_last_messages`,
        `drop_old_tool_returns`, or your own deterministic function); several run in order."""
        if not callable(processor):
            raise UserError(f"history_processor needs a function, got {processor!r}")
        self._history_processors.append(processor)
        return self

    def allowed_models(self, models: Mapping[str, Model]) -> AgentBuilder[OutputT]:
        """Names models a resumed or forked run may switch to (`AgentOverrides(model=name)`,
        `durable-agent fork ID --model NAME`): only a name travels, so a fork can use no
        model, endpoint or key the agent's owner did not configure here."""
        for name, model in models.items():
            if not isinstance(name, str) or not name:
                raise UserError(f"allowed_models needs non-empty names, got {name!r}")
            if not isinstance(model, Model):
                raise UserError(
                    f"allowed_models[{name!r}] must be a Model (TestModel, FunctionModel, "
                    f"OpenAIChatModel, ...), got {type(model).__name__}"
                )
            self._allowed_models[name] = model
        return self

    def subagent(
        self,
        agent: Agent[Any],
        *,
        name: str | None = None,
        description: str | None = None,
        timeout_seconds: float | None = None,
        task_queue: str | None = None,
    ) -> AgentBuilder[OutputT]:
        """Offers `agent` to this agent's model as a tool named `name` (default: the
        sub-agent's name) taking `{"prompt": str}`; its output is the tool's result. On
        Temporal each call is a child workflow (on `task_queue`, default the parent's),
        failed after `timeout_seconds`."""
        if not isinstance(agent, Agent):
            raise UserError(
                f"subagent needs a built Agent (AgentBuilder(...).build()), got "
                f"{type(agent).__name__}"
            )
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise UserError(f"subagent timeout_seconds must be positive, got {timeout_seconds}")
        tool_name = name or agent.name
        if not _TOOL_NAME.match(tool_name):
            raise UserError(
                f"sub-agent tool name {tool_name!r} is not allowed: use 1-64 letters, digits, "
                "'_' or '-' (pass name=...)"
            )
        self._subagents.append(
            SubAgent(
                agent=agent,
                name=tool_name,
                description=description or default_description(agent),
                timeout_seconds=timeout_seconds,
                task_queue=task_queue,
            )
        )
        return self

    def build(self) -> Agent[OutputT]:
        tools: dict[str, Tool] = {}
        for tool in self._tools:
            if tool.name in tools:
                raise UserError(f"two tools are named {tool.name!r}; tool names must be unique")
            if self._output_type is not None and tool.name == OUTPUT_TOOL_NAME:
                raise UserError(f"{OUTPUT_TOOL_NAME!r} is reserved for structured output")
            tools[tool.name] = tool
        subagents: dict[str, SubAgent] = {}
        for subagent in self._subagents:
            if subagent.name in tools or subagent.name in subagents:
                raise UserError(
                    f"sub-agent {subagent.name!r} has the name of another tool or sub-agent; "
                    "give it another with subagent(..., name=...)"
                )
            subagents[subagent.name] = subagent
        names = [toolset.name for toolset in self._toolsets]
        if len(set(names)) < len(names):
            twice = sorted({name for name in names if names.count(name) > 1})
            raise UserError(
                f"two toolsets are named {twice[0]!r}; give each server a unique name (name=...)"
            )
        # A toolset's tools are known only once a run lists them: names that may be theirs
        # are checked then (see AgentLoop._check_listed_names).
        known = {*tools, *subagents}
        unknown = sorted(set(self._approval) - known) if not self._toolsets else []
        if unknown:
            raise UserError(
                f"approval_required_tools names unknown tool(s) {unknown}; "
                f"registered tools: {sorted(known) or 'none'}"
            )
        unknown = sorted(set(self._approvers) - known) if not self._toolsets else []
        if unknown:
            raise UserError(
                f"approvers names unknown tool(s) {unknown}; "
                f"registered tools: {sorted(known) or 'none'}"
            )
        return Agent(
            model=self._model,
            name=self._name,
            instructions=self._instructions,
            tools=tools,
            output_type=self._output_type,
            output_validators=tuple(self._validators),
            output_retries=self._output_retries,
            approval_required=frozenset(self._approval),
            approvers=dict(self._approvers),
            usage_limits=self._limits,
            max_steps=self._max_steps,
            parallel_tool_calls=self._parallel,
            max_concurrent_tools=self._max_concurrent,
            model_settings=self._settings,
            max_tool_result_bytes=self._max_tool_result_bytes,
            oversized_tool_result=self._oversized,
            toolsets=tuple(self._toolsets),
            history_processors=tuple(self._history_processors),
            allowed_models=dict(self._allowed_models),
            subagents=subagents,
        )
